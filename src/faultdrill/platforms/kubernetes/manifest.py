"""The job's manifest: a template from the plan, filled in, labelled and given the probe's env.

A template (``resources.kubernetes.manifest``) is a YAML file of one or more documents:
exactly one *job* of a kind faultdrill knows how to follow (:data:`JOB_KINDS`: a
batch/v1 ``Job``, a Kubeflow ``PyTorchJob``, a ``JobSet``, a Volcano ``Job``) and any
objects it needs, created first in file order (a Service in front of a rendezvous store, a
ConfigMap...). Strings may hold ``{{placeholders}}`` (:data:`PLACEHOLDERS`), filled per
drill item:

==================  ===================================================================
``run_id``          the item's run id (also the value behind the ``faultdrill.io/run``
                    label, as a short hash: :func:`run_label`)
``job_name``        a name for the job unique to the item (DNS-1123, <= 40 characters)
``namespace``       the plan's namespace
``task_id``         the plan's task id
``entrypoint``      what each replica runs after the launcher (``-m pkg ...`` or a script
                    and its args); a list item that is exactly ``{{entrypoint}}`` is
                    replaced by the whole list, elsewhere it is shell-quoted
``python``          the interpreter: the harness's own on the test cluster (its kubelet
                    runs no images), ``python3`` on a real cluster
``events_dir``      where the probe writes its events (must be on the shared run
                    directory: see ``docs/kubernetes.md``)
``ckpt_dir``, ``run_dir``, ``workload_config``  as in ``task.entrypoint.args``
``nodes``, ``min_nodes``, ``procs_per_node``, ``max_restarts``  the plan's resources
                    (a string that is exactly one of these becomes a number)
``rdzv_endpoint``   host:port of the c10d rendezvous store (test cluster: its own store on
                    the control-plane host; a real cluster: ``kubernetes.rendezvous``)
``rdzv_id``         the rendezvous id (the run id)
``rdzv_conf``       torchrun's ``--rdzv-conf`` value from ``resources.timeouts``
==================  ===================================================================

faultdrill then adds to every object the labels ``faultdrill.io/run`` and
``faultdrill.io/task`` (what it deletes at the end), to every pod template the same labels
and, to each of its containers, the probe's environment (``FAULTDRILL_EVENTS_DIR``,
``FAULTDRILL_TASK_ID``, ``FAULTDRILL_RUN_ID``, ``FAULTDRILL_NODE`` from ``spec.nodeName``,
the plan's ``task.env``...). A pod template is any mapping whose ``spec`` has
``containers``, wherever the kind nests it.

Pure: no client library; :func:`template_problem` is what the plan loader calls.
"""

from __future__ import annotations

import copy
import hashlib
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from faultdrill.platforms.api import JobState

__all__ = [
    "JOB_KINDS",
    "LABEL_RUN",
    "LABEL_TASK",
    "PLACEHOLDERS",
    "inject",
    "job_document",
    "job_state",
    "kind_key",
    "load_template",
    "pod_templates",
    "render",
    "run_label",
    "template_problem",
    "uses_placeholder",
]

LABEL_RUN = "faultdrill.io/run"
LABEL_TASK = "faultdrill.io/task"
#: (API group, kind) of the jobs faultdrill follows, and the condition types (status True)
#: that mean the job succeeded or failed.
JOB_KINDS: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = {
    ("batch", "Job"): (frozenset({"Complete"}), frozenset({"Failed"})),
    ("kubeflow.org", "PyTorchJob"): (frozenset({"Succeeded"}), frozenset({"Failed"})),
    ("jobset.x-k8s.io", "JobSet"): (frozenset({"Completed"}), frozenset({"Failed"})),
    ("batch.volcano.sh", "Job"): (frozenset({"Completed"}), frozenset({"Failed", "Aborted"})),
}
PLACEHOLDERS = (
    "run_id",
    "job_name",
    "namespace",
    "task_id",
    "entrypoint",
    "python",
    "events_dir",
    "ckpt_dir",
    "run_dir",
    "workload_config",
    "nodes",
    "min_nodes",
    "procs_per_node",
    "max_restarts",
    "rdzv_endpoint",
    "rdzv_id",
    "rdzv_conf",
)
_HOLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

Value = str | int | list[str]


def run_label(run_id: str) -> str:
    """The ``faultdrill.io/run`` label value of a run id: short and label-safe."""
    return "fd-" + hashlib.sha1(run_id.encode()).hexdigest()[:16]


def kind_key(doc: Mapping[str, Any]) -> tuple[str, str]:
    """(API group, kind) of an object (group ``""`` for the core API)."""
    api = str(doc.get("apiVersion", ""))
    group = api.split("/", 1)[0] if "/" in api else ""
    return group, str(doc.get("kind", ""))


def load_template(path: Path) -> list[dict[str, Any]]:
    """The template's documents (empty ones dropped), read under the plan's own bounds
    (a regular file, its size, nesting and aliases: :mod:`faultdrill.plan.source`).
    Raises OSError, yaml.YAMLError, ValueError (a file that is none of those, a document
    that is not an object with apiVersion and kind)."""
    from faultdrill.errors import PlanError
    from faultdrill.plan.source import read_yaml_documents

    try:
        raw = read_yaml_documents(path, str(path), what="a manifest")
    except PlanError as exc:
        raise ValueError(
            "; ".join(
                msg if where == "(file)" else f"{where}: {msg}" for where, msg in exc.problems
            )
        ) from exc
    docs = [d for d in raw if d is not None]
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind"):
            raise ValueError(f"document {i + 1} is not an object with apiVersion and kind")
    return docs


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def uses_placeholder(path: Path, name: str) -> bool:
    """Whether the template at ``path`` uses ``{{name}}`` (False when unreadable)."""
    try:
        docs = load_template(path)
    except (OSError, ValueError, yaml.YAMLError):
        return False
    return any(m.group(1) == name for s in _strings(docs) for m in _HOLE.finditer(s))


def template_problem(path: Path) -> str | None:
    """What is wrong with the template at ``path`` (None: usable), in words with the fix."""
    try:
        docs = load_template(path)
    except OSError as exc:
        return f"cannot read manifest {path}: {exc.strerror or exc}"
    except yaml.YAMLError as exc:
        return f"manifest {path} is not valid YAML: {exc}"
    except ValueError as exc:
        return f"manifest {path}: {exc}"
    jobs = [d for d in docs if kind_key(d) in JOB_KINDS]
    known = ", ".join(f"{k} ({g})" for g, k in JOB_KINDS)
    if len(jobs) != 1:
        return (
            f"manifest {path} holds {len(jobs)} jobs of a kind faultdrill follows; it needs "
            f"exactly one of: {known}"
        )
    unknown = sorted(
        {m.group(1) for s in _strings(docs) for m in _HOLE.finditer(s)} - set(PLACEHOLDERS)
    )
    if unknown:
        return (
            f"manifest {path} uses unknown placeholder(s) {', '.join(unknown)}; use "
            + ", ".join("{{" + p + "}}" for p in PLACEHOLDERS)
        )
    if not list(pod_templates(jobs[0])):
        return f"manifest {path}: its {jobs[0]['kind']} has no pod template (spec.containers)"
    return None


def _fill(text: str, values: Mapping[str, Value]) -> Value:
    whole = _HOLE.fullmatch(text)
    if whole is not None:
        value = values[whole.group(1)]
        return value if isinstance(value, int) else _text(value)
    return _HOLE.sub(lambda m: _text(values[m.group(1)]), text)


def _text(value: Value) -> str:
    return shlex.join(value) if isinstance(value, list) else str(value)


def render(node: Any, values: Mapping[str, Value]) -> Any:
    """A copy of ``node`` with every placeholder filled (see the module docstring). Raises
    KeyError for a placeholder ``values`` lacks."""
    if isinstance(node, str):
        return _fill(node, values)
    if isinstance(node, dict):
        return {render(k, values): render(v, values) for k, v in node.items()}
    if isinstance(node, list):
        out: list[Any] = []
        for item in node:
            whole = _HOLE.fullmatch(item) if isinstance(item, str) else None
            if whole is not None and isinstance(values[whole.group(1)], list):
                out.extend(values[whole.group(1)])  # type: ignore[arg-type]
            else:
                out.append(render(item, values))
        return out
    return node


def pod_templates(node: Any) -> Iterator[dict[str, Any]]:
    """Every pod template in ``node``: a mapping whose ``spec`` has a ``containers`` list."""
    if isinstance(node, dict):
        spec = node.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
            yield node
            return
        for v in node.values():
            yield from pod_templates(v)
    elif isinstance(node, list):
        for v in node:
            yield from pod_templates(v)


def inject(
    docs: Sequence[dict[str, Any]],
    labels: Mapping[str, str],
    env: Sequence[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Copies of ``docs`` with ``labels`` on every object and pod template, and ``env``
    (Kubernetes ``EnvVar`` objects) in every container, replacing variables of the same
    name."""
    out = copy.deepcopy(list(docs))
    names = {e["name"] for e in env}
    for doc in out:
        meta = doc.setdefault("metadata", {})
        meta.setdefault("labels", {}).update(labels)
        for tpl in pod_templates(doc):
            tpl.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
            for c in tpl["spec"]["containers"]:
                kept = [e for e in c.get("env") or [] if e.get("name") not in names]
                c["env"] = kept + [dict(e) for e in env]
    return out


def job_document(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The one document whose kind is a job faultdrill follows. Raises ValueError."""
    jobs = [d for d in docs if kind_key(d) in JOB_KINDS]
    if len(jobs) != 1:
        raise ValueError(f"{len(jobs)} jobs of a followed kind in the manifest, not 1")
    return jobs[0]


def job_state(doc: Mapping[str, Any], obj: Mapping[str, Any]) -> JobState:
    """The state of job object ``obj`` (as read from the API) of ``doc``'s kind, from its
    conditions (status True) or, for Volcano, ``status.state.phase``."""
    ok, bad = JOB_KINDS[kind_key(doc)]
    status = obj.get("status") or {}
    true = {
        str(c.get("type")) for c in status.get("conditions") or [] if str(c.get("status")) == "True"
    }
    phase = (status.get("state") or {}).get("phase")
    if phase is not None:
        true.add(str(phase))
    if true & ok:
        return JobState.SUCCEEDED
    if true & bad:
        return JobState.FAILED
    return JobState.RUNNING
