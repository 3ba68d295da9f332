"""Follow a cluster's nodes, a job's pods and the cluster's events with watches.

Every change becomes one flat ``platform`` event, stamped on the drill's clock when it is
received (``ts``/``mono`` by the sink), with the control plane's own time beside it when the
object has one (``k8s_time``: epoch seconds; metav1.Time has whole seconds, Events'
``eventTime`` microseconds):

================  ===============================================================
``k8s_node``      node's Ready status/reason, taints, unschedulable changed
``node_state``    derived: ``up`` (Ready, schedulable), ``down`` (Ready not True),
                  ``drained`` (cordoned); ``source="kube-controller-manager"``
``node_lost``     Ready left True (the node controller deemed it lost)
``k8s_taint``     a taint added or removed (``op``, ``key``, ``effect``, ``time_added``)
``k8s_pod``       a pod of the job changed: phase, node, deletion, ready, exit code,
                  restarts (``change`` names what changed)
``pod_bound``     a pod got its node (the scheduler's decision)
``replica_started``  a pod of the job turned Running (its kubelet started it); ``k8s_time``
                  is the pod's ``startTime``
``replica_lost``  a pod was marked for deletion (``why``: deleted, which covers evictions)
                  or failed; ``grace_s`` (deletion grace), ``pids`` (its processes when
                  the platform can see them: the test cluster)
``pod_gone``      the pod object was removed
``k8s_event``     a core/v1 Event (reason, message, object, component)
================  ===============================================================

Each watch re-lists after an error (the apiserver paused or stopped) and emits only what
changed meanwhile, plus ``k8s_watch_error`` / ``k8s_watch_ok`` for the gap, so an outage of
the control plane is on the timeline as seen by its clients.
"""

from __future__ import annotations

import calendar
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faultdrill.events import EventSink

__all__ = ["DECIDERS", "Follower", "k8s_epoch", "node_view", "pod_view"]


#: The sources of the control plane's decisions in these events (the platform emits them
#: as its ``deciders``: readings.analysis prefers them to the agents' own symptoms).
DECIDERS = ("node-lifecycle-controller", "kube-controller-manager", "kube-apiserver", "kubelet")


def k8s_epoch(value: Any) -> float | None:
    """Epoch seconds of a client datetime (aware), or None."""
    if value is None:
        return None
    try:
        return float(calendar.timegm(value.utctimetuple()) + value.microsecond / 1e6)
    except AttributeError:
        return None


def node_view(node: Any) -> dict[str, Any]:
    """What is followed of a Node, flat."""
    ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
    taints = sorted(f"{t.key}:{t.effect}" for t in node.spec.taints or [])
    return {
        "node": node.metadata.name,
        "ready": ready.status if ready else "None",
        "reason": ready.reason if ready else "",
        "taints": taints,
        "unschedulable": bool(node.spec.unschedulable),
        "k8s_time": k8s_epoch(ready.last_transition_time) if ready else None,
    }


def pod_view(pod: Any) -> dict[str, Any]:
    """What is followed of a Pod, flat."""
    st = pod.status
    cs = (st.container_statuses or [None])[0] if st else None
    term = cs.state.terminated if cs is not None and cs.state is not None else None
    ready = next((c.status for c in (st.conditions or []) if c.type == "Ready"), "") if st else ""
    return {
        "pod": pod.metadata.name,
        "uid": pod.metadata.uid,
        "node": pod.spec.node_name or "",
        "phase": st.phase if st else "",
        "ready": ready,
        "deleting": pod.metadata.deletion_timestamp is not None,
        "reason": (st.reason or "") if st else "",
        "exit_code": term.exit_code if term is not None else None,
        "restarts": cs.restart_count if cs is not None else 0,
        "grace_s": pod.metadata.deletion_grace_period_seconds,
        "started": k8s_epoch(st.start_time) if st else None,
        "k8s_time": k8s_epoch(pod.metadata.deletion_timestamp),
    }


def _state(view: dict[str, Any]) -> str:
    if view["ready"] != "True":
        return "down"
    return "drained" if view["unschedulable"] else "up"


class Follower:
    """Three watch threads (nodes, pods with ``label_selector`` in ``namespace``, events in
    all namespaces) until :meth:`stop`. ``api`` returns the ``ApiClient`` to use."""

    def __init__(
        self,
        api: Callable[[], Any],
        sink: EventSink,
        *,
        namespace: str,
        label_selector: str,
        pids_of: Callable[[str], list[int]] | None = None,
    ) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api())
        self.pids_of = pids_of
        self.sink = sink
        self.namespace = namespace
        self.selector = label_selector
        self.stopping = threading.Event()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self._events_seen: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    # --- life cycle ---------------------------------------------------------------------

    def start(self) -> None:
        for name, list_fn, kw, on in (
            ("nodes", self.core.list_node, {}, self._on_node),
            (
                "pods",
                self.core.list_namespaced_pod,
                {"namespace": self.namespace, "label_selector": self.selector},
                self._on_pod,
            ),
            ("events", self.core.list_event_for_all_namespaces, {}, self._on_event),
        ):
            t = threading.Thread(
                target=self._loop, args=(name, list_fn, kw, on), name=f"k8s-{name}", daemon=True
            )
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self.stopping.set()
        for t in self._threads:
            t.join(timeout=50)

    # --- the watch loop -----------------------------------------------------------------

    def _loop(
        self, name: str, list_fn: Any, kw: dict[str, Any], on: Callable[[str, Any, bool], None]
    ) -> None:
        from kubernetes import watch

        failing_since: float | None = None
        first = True
        while not self.stopping.is_set():
            try:
                listed = list_fn(_request_timeout=10, **kw)
                for obj in listed.items:
                    on("LISTED", obj, first)
                first = False
                if failing_since is not None:
                    self.sink.emit(
                        "platform",
                        "k8s_watch_ok",
                        watch=name,
                        gap_s=round(time.monotonic() - failing_since, 3),
                    )
                    failing_since = None
                w = watch.Watch()
                for ev in w.stream(
                    list_fn,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=5,
                    _request_timeout=(3, 10),
                    **kw,
                ):
                    if self.stopping.is_set():
                        w.stop()
                        break
                    if ev.get("type") == "ERROR" or not hasattr(ev.get("object"), "metadata"):
                        break  # e.g. 410 Gone: re-list
                    on(ev["type"], ev["object"], False)
            except Exception as exc:  # the apiserver is away: keep trying, say it once
                if failing_since is None:
                    failing_since = time.monotonic()
                    self.sink.emit("platform", "k8s_watch_error", watch=name, error=str(exc)[:300])
                self.stopping.wait(0.5)

    # --- nodes --------------------------------------------------------------------------

    def _on_node(self, kind: str, node: Any, initial: bool) -> None:
        view = node_view(node)
        name = view["node"]
        with self._lock:
            old = self.nodes.get(name)
            if kind == "DELETED":
                self.nodes.pop(name, None)
                self.sink.emit("platform", "k8s_node_deleted", node=name)
                return
            if old is not None and {k: v for k, v in old.items() if k != "k8s_time"} == {
                k: v for k, v in view.items() if k != "k8s_time"
            }:
                return
            self.nodes[name] = view
        self.sink.emit("platform", "k8s_node", initial=initial, **view)
        for op, taints in (
            ("added", set(view["taints"]) - set(old["taints"] if old else [])),
            ("removed", set(old["taints"] if old else []) - set(view["taints"])),
        ):
            for taint in sorted(taints):
                key, _, effect = taint.partition(":")
                added = next((t.time_added for t in node.spec.taints or [] if t.key == key), None)
                self.sink.emit(
                    "platform",
                    "k8s_taint",
                    node=name,
                    op=op,
                    key=key,
                    effect=effect,
                    k8s_time=k8s_epoch(added),
                )
        state = _state(view)
        if old is None or _state(old) != state:
            self.sink.emit(
                "platform",
                "node_state",
                node=name,
                state=state,
                previous=_state(old) if old else None,
                reason="cordoned" if state == "drained" else view["reason"],
                source="kube-controller-manager",
                k8s_time=view["k8s_time"],
            )
        if old is not None and old["ready"] == "True" and view["ready"] != "True":
            self.sink.emit(
                "platform",
                "node_lost",
                node=name,
                ready=view["ready"],
                reason=view["reason"],
                source="node-lifecycle-controller",
                k8s_time=view["k8s_time"],
            )

    # --- pods ---------------------------------------------------------------------------

    def _on_pod(self, kind: str, pod: Any, initial: bool) -> None:
        view = pod_view(pod)
        uid = view["uid"]
        with self._lock:
            old = self.pods.get(uid)
            if kind == "DELETED":
                self.pods.pop(uid, None)
                self.sink.emit("platform", "pod_gone", pod=view["pod"], uid=uid, node=view["node"])
                return
            changed = [k for k in view if old is None or old.get(k) != view[k]]
            if not changed:
                return
            self.pods[uid] = view
        self.sink.emit("platform", "k8s_pod", change=changed, initial=initial, **view)
        if view["node"] and (old is None or not old["node"]):
            self.sink.emit("platform", "pod_bound", pod=view["pod"], uid=uid, node=view["node"])
        if view["phase"] == "Running" and (old is None or old["phase"] != "Running"):
            self.sink.emit(
                "platform",
                "replica_started",
                pod=view["pod"],
                uid=uid,
                node=view["node"],
                source="kubelet",
                k8s_time=view["started"],
            )
        lost_now = view["deleting"] or view["phase"] == "Failed"
        lost_before = old is not None and (old["deleting"] or old["phase"] == "Failed")
        if lost_now and not lost_before:
            self.sink.emit(
                "platform",
                "replica_lost",
                pod=view["pod"],
                uid=uid,
                node=view["node"],
                why="deleted" if view["deleting"] else "failed",
                exit_code=view["exit_code"],
                grace_s=view["grace_s"],
                pids=self.pids_of(uid) if self.pids_of is not None else None,
                source="kube-apiserver" if view["deleting"] else "kubelet",
                k8s_time=view["k8s_time"],
            )

    # --- events -------------------------------------------------------------------------

    def _on_event(self, kind: str, ev: Any, initial: bool) -> None:
        if initial or kind == "DELETED":
            if initial:
                self._events_seen.add(f"{ev.metadata.uid}/{ev.count}")
            return
        key = f"{ev.metadata.uid}/{ev.count}"
        if key in self._events_seen:
            return
        self._events_seen.add(key)
        when = ev.event_time or ev.last_timestamp or ev.first_timestamp
        src = ev.source.component if ev.source else ""
        self.sink.emit(
            "platform",
            "k8s_event",
            reason=ev.reason,
            message=(ev.message or "")[:500],
            object=f"{ev.involved_object.kind}/{ev.involved_object.name}",
            namespace=ev.metadata.namespace,
            component=src or (ev.reporting_component or ""),
            host=ev.source.host if ev.source else None,
            count=ev.count,
            k8s_time=k8s_epoch(when),
        )
