"""API objects of any kind: created from manifests, read, and deleted by label.

The job's manifest may hold any kinds (a batch/v1 Job, a PyTorchJob, a Service...), so
objects are addressed through API discovery (``/api/v1``, ``/apis/<group>/<version>``:
each kind's plural name and whether it is namespaced) and the client's generic
``call_api``, not through one typed API class per kind.

Ledger kind ``k8s-objects`` (registered here, replayed by ``faultdrill cleanup``): the
objects of one drill item, recorded BEFORE the first is created, with what the undo needs
to find them again: the kubeconfig (and context, and for the test cluster the network
namespace its API is reached from), the namespace, the kinds and the label selector. The
undo deletes every object of those kinds (and every pod) carrying the labels. On the test
cluster, a kubeconfig that is gone means the cluster went with its etcd data: nothing is
left to delete. Deletions use ``propagationPolicy: Background``.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from faultdrill.errors import NotOursError, PlatformError
from faultdrill.host import owned
from faultdrill.ledger import PATH, RunScope, undoer
from faultdrill.platforms.kubernetes.client import api_client

__all__ = [
    "CORDONED_BY",
    "KINDS",
    "KUBECONFIG",
    "NAMESPACE",
    "NODE",
    "RUN_LABEL",
    "Objects",
    "api_for",
    "is_not_found",
]

#: The annotation a drill's cordon puts on the node: the run's label; the undo uncordons
#: only a node that still carries it (never one an administrator cordoned).
CORDONED_BY = "faultdrill.io/cordoned-by"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_API_VERSION = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?v[0-9]+((alpha|beta)[0-9]+)?")
_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")

_AUTH = ["BearerToken"]
_JSON = {"Accept": "application/json", "Content-Type": "application/json"}


def is_not_found(exc: BaseException) -> bool:
    """Whether a client error is the API's 404."""
    return getattr(exc, "status", None) == 404


def api_for(data: Mapping[str, Any]) -> Any | None:
    """An ``ApiClient`` from a ledger entry's ``kubeconfig``/``context``/``netns``; None when
    the entry is the test cluster's and its kubeconfig is gone (the cluster with it)."""
    if "kubeconfig" not in data:
        return None  # written by the draft adapter: its test cluster goes with its etcd
    kubeconfig = Path(str(data["kubeconfig"]))
    if data.get("test_cluster") and not kubeconfig.exists():
        return None
    context = data.get("context")
    return api_client(kubeconfig, data.get("netns"), context=str(context) if context else None)


class Objects:
    """Create, read and delete objects of any kind through one ``ApiClient``."""

    def __init__(self, api: Any, *, timeout_s: float = 10.0) -> None:
        self.api = api
        self.timeout_s = timeout_s
        # discovery is kept with the ApiClient: it does not change while a drill runs
        if not hasattr(api, "_faultdrill_discovery"):
            api._faultdrill_discovery = {}
        self._resources: dict[str, dict[str, tuple[str, bool]]] = api._faultdrill_discovery

    def _call(self, path: str, method: str, **kw: Any) -> Any:
        return self.api.call_api(
            path,
            method,
            header_params=dict(_JSON),
            response_type="object",
            auth_settings=_AUTH,
            _return_http_data_only=True,
            # (connect, read): the 20.13 client drops a float given alone (no timeout at
            # all: a paused apiserver would block the call for ever)
            _request_timeout=(min(5.0, self.timeout_s), self.timeout_s),
            **kw,
        )

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of a kind, from the API's discovery document."""
        if api_version not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            doc = self._call(base, "GET")
            self._resources[api_version] = {
                r["kind"]: (r["name"], bool(r.get("namespaced")))
                for r in doc.get("resources", [])
                if "/" not in r["name"]
            }
        try:
            return self._resources[api_version][kind]
        except KeyError:
            raise PlatformError(
                f"the cluster does not serve {kind} in {api_version} (is its controller installed?)"
            ) from None

    def collection(self, api_version: str, kind: str, namespace: str) -> str:
        """The URL path of a kind's collection (in ``namespace`` when namespaced)."""
        plural, namespaced = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        return f"{base}/namespaces/{namespace}/{plural}" if namespaced else f"{base}/{plural}"

    def create(self, doc: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        path = self.collection(str(doc["apiVersion"]), str(doc["kind"]), namespace)
        out: dict[str, Any] = self._call(path, "POST", body=dict(doc))
        return out

    def read(self, doc: Mapping[str, Any], namespace: str) -> dict[str, Any]:
        path = self.collection(str(doc["apiVersion"]), str(doc["kind"]), namespace)
        out: dict[str, Any] = self._call(f"{path}/{doc['metadata']['name']}", "GET")
        return out

    def delete_labelled(
        self,
        kinds: Iterable[tuple[str, str]],
        namespace: str,
        selector: str,
        *,
        grace_s: int | None = None,
    ) -> None:
        """Delete every object of ``kinds`` (and every pod) with labels ``selector``."""
        query: list[tuple[str, Any]] = [("labelSelector", selector)]
        query.append(("propagationPolicy", "Background"))
        if grace_s is not None:
            query.append(("gracePeriodSeconds", grace_s))
        wanted = list(dict.fromkeys([*kinds, ("v1", "Pod")]))
        for api_version, kind in wanted:
            path = self.collection(api_version, kind, namespace)
            try:
                self._call(path, "DELETE", query_params=list(query))
            except Exception as exc:
                if getattr(exc, "status", None) != 405:
                    raise
                self._delete_each(path, selector, query)  # no deletecollection for this kind

    def _delete_each(self, path: str, selector: str, query: list[tuple[str, Any]]) -> None:
        listed = self._call(path, "GET", query_params=[("labelSelector", selector)])
        for item in listed.get("items", []):
            with contextlib.suppress(Exception):  # gone meanwhile
                self._call(f"{path}/{item['metadata']['name']}", "DELETE", query_params=query)

    def labelled_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        path = self.collection("v1", "Pod", namespace)
        items: list[dict[str, Any]] = self._call(
            path, "GET", query_params=[("labelSelector", selector)]
        ).get("items", [])
        return items


def _run_selector(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    """Claim: a label selector that names this run's label (``faultdrill.io/run``)."""
    from faultdrill.platforms.kubernetes.manifest import LABEL_RUN, run_label

    own = f"{LABEL_RUN}={run_label(run.run_id)}"
    if not isinstance(value, str) or own not in value.split(","):
        raise NotOursError(f"selector {value!r} does not select this run's objects ({own})")


def _run_label(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    """Claim: this run's label value (``faultdrill.io/run``)."""
    from faultdrill.platforms.kubernetes.manifest import run_label

    if value != run_label(run.run_id):
        raise NotOursError(f"label {value!r} is not this run's ({run_label(run.run_id)})")


def _namespace(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    """Claim: one Kubernetes namespace name (a DNS label: nothing to climb out of a path)."""
    if not isinstance(value, str) or not _DNS_LABEL.fullmatch(value):
        raise NotOursError(f"{value!r} is not a Kubernetes namespace name")


def _node(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    """Claim: one Kubernetes node name (a DNS subdomain)."""
    if not isinstance(value, str) or not _DNS_NAME.fullmatch(value):
        raise NotOursError(f"{value!r} is not a Kubernetes node name")


def _kinds(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    """Claim: a list of [apiVersion, kind] pairs, each a plain API name (they make the
    request's path: nothing else may reach it)."""
    for pair in value if isinstance(value, list) else [None]:
        api_version, kind = pair if isinstance(pair, list) and len(pair) == 2 else ("", "")
        plain = isinstance(api_version, str) and isinstance(kind, str)
        if not plain or not _API_VERSION.fullmatch(api_version) or not _KIND.fullmatch(kind):
            raise NotOursError(f"{pair!r} is not an [apiVersion, kind] pair")


def _kubeconfig(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    """Claim: an absolute path to a regular file (never a FIFO, device or directory read
    as root); the test cluster's own is writable by this user alone."""
    if not isinstance(value, str) or not os.path.isabs(value):
        raise NotOursError(f"kubeconfig {value!r} is not an absolute path")
    try:
        st = os.stat(value)
    except OSError:
        return  # gone: the undo finds no cluster through it
    if not stat.S_ISREG(st.st_mode):
        raise NotOursError(f"kubeconfig {value} is not a regular file")
    if data.get("test_cluster") and (st.st_uid != os.geteuid() or st.st_mode & 0o022):
        raise NotOursError(f"kubeconfig {value} is not the test cluster's (owner, mode)")


#: Claims of the Kubernetes kinds' fields (see :mod:`faultdrill.ledger`).
RUN_LABEL = _run_label
NAMESPACE = _namespace
NODE = _node
KINDS = _kinds
KUBECONFIG = _kubeconfig


@undoer(
    "k8s-objects",
    owns={
        "selector": _run_selector,
        "netns": owned.NETNS,
        "namespace": _namespace,
        "kinds": _kinds,
        "kubeconfig": _kubeconfig,
    },
)
def _undo_objects(data: dict[str, Any]) -> None:
    """Delete the recorded kinds' objects (and pods) carrying the recorded labels: the
    selector names this run's label (its claim), and the API server matches it on each
    live object, so only objects labelled as this run's are deleted."""
    api = api_for(data)
    if api is None:
        return
    kinds = [(str(a), str(k)) for a, k in data.get("kinds", [])]
    Objects(api).delete_labelled(kinds, str(data["namespace"]), str(data["selector"]))


@undoer("k8s-request", owns={})  # acts on nothing
def _undo_request(data: dict[str, Any]) -> None:
    """A request to the API that cannot be taken back (a pod deleted, an eviction)."""


# --- kinds the draft adapter wrote (before the platform-actions seam): still cleanable -------


@undoer("k8s-done", owns={})  # acts on nothing
def _undo_done(data: dict[str, Any]) -> None:
    """A delivered signal, a deleted pod, an eviction: nothing to take back."""


@undoer("k8s-link-down", owns={"ns": owned.NETNS, "dev": owned.IFACE})
def _undo_link_down(data: dict[str, Any]) -> None:
    """Set the recorded veth up again (the same as ``link-down``)."""
    from faultdrill.ledger import UNDOERS

    UNDOERS["link-down"](data)


@undoer("k8s-kubelet-pause", owns={"file": PATH})
def _undo_kubelet_pause(data: dict[str, Any]) -> None:
    Path(str(data["file"])).unlink(missing_ok=True)


@undoer("k8s-kubelet-down", owns={})  # acts on nothing
def _undo_kubelet_down(data: dict[str, Any]) -> None:
    """A kubelet killed with its node: restarted in process only; its cluster goes."""


@undoer("k8s-apiserver-down", owns={})  # acts on nothing
def _undo_apiserver_down(data: dict[str, Any]) -> None:
    """An apiserver killed: restarted in process only; its cluster goes."""
