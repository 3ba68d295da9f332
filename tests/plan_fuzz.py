"""A fuzz corpus of bad (and a few good) plan files, and a driver that validates each.

:func:`corpus` builds the cases deterministically from the demo plan: every input class of
issue 11 (bytes that are not UTF-8, nesting of 500 levels and more, format widths in
``entrypoint.args``, alias bombs, non-finite / absurd / boolean numbers in every numeric
field of the schema, duplicate keys, several cross-field problems at once, and odd files),
and those of issue 21 (a quoted or fractional-looking number in every numeric field, binary
data and dates where text goes, empty responsibility names, entry point modules that are no
module name, plans that drill nothing, triggers past the job's last step or checkpoint, a
FIFO for the plan or for a file it names, and several of these at once). Each case says
whether the plan must be refused (and where the error must point, with ``also`` the other
places) or accepted.

``python -m tests.plan_fuzz MANIFEST`` is the driver: it imports faultdrill once, then
forks one child per case that runs ``faultdrill validate FILE`` (``faultdrill.cli.main``)
with its output captured, under a memory limit, killed after ``TIMEOUT_S``; it prints one
JSON line per case. Forking after the import keeps a corpus of hundreds of cases to
seconds, and every case still runs in a process of its own.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import json
import os
import random
import resource
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DEMO = Path(__file__).resolve().parents[1] / "src" / "faultdrill" / "plans" / "demo.yaml"
TIMEOUT_S = 20.0
MEMORY_LIMIT = 2 << 30


@dataclass(frozen=True)
class Case:
    """One plan file: its bytes, and the expected outcome: ``refuse`` with an error naming
    ``where`` (a field path or ``line N``), ``accept``, or ``either`` (a legal but odd value:
    only no traceback and no hang are required)."""

    name: str
    data: bytes
    expect: str
    where: str = ""
    #: Names to make FIFOs of in the case's directory ("plan.yaml": the plan file itself).
    fifos: tuple[str, ...] = ()
    #: More places the error must name besides ``where`` (problems said all at once).
    also: tuple[str, ...] = ()


_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@functools.cache
def _demo() -> dict[str, Any]:
    raw: dict[str, Any] = yaml.load(DEMO.read_text(), Loader=_Loader)
    return raw


def demo_raw() -> dict[str, Any]:
    """A fresh copy of the demo plan's data."""
    return copy.deepcopy(_demo())


def dump(raw: Any) -> bytes:
    return yaml.dump(raw, Dumper=_Dumper, sort_keys=False, allow_unicode=True).encode()


# --- numbers: every numeric field of the schema, by the model that holds it --------------

#: Where each model of the plan sits in the demo plan (dotted path; digits index lists),
#: and the value to put there first when the demo has none (a fault of that kind).
SITES: dict[str, tuple[str, dict[str, Any] | None]] = {
    "Plan": ("", None),
    "Data": ("data", None),
    "Resources": ("resources", None),
    "Timeouts": ("resources.timeouts", {}),
    "SlurmSettings": ("resources.slurm", {}),
    "RaySettings": ("resources.ray", {}),
    "KubernetesSettings": ("resources.kubernetes", {}),
    "CheckpointPolicy": ("checkpoint", None),
    "Observation": ("observation", None),
    "StopConditions": ("stop", None),
    "StopOverrides": ("rounds.0.scenarios.0.stop", {}),
    "Tolerance": ("tolerance", {}),
    "Trigger": ("rounds.0.scenarios.0.trigger", {}),
    "PassCriteria": ("rounds.0.scenarios.0.pass_criteria", {}),
    "Round": ("rounds.0", None),
    "KillWorkerSpec": ("rounds.0.scenarios.0.fault", None),
    "WorkerTarget": ("rounds.0.scenarios.0.fault.target", {}),
    "HangWorkerSpec": (
        "rounds.0.scenarios.0.fault",
        {"kind": "hang-worker", "target": {"rank": 1}, "for_s": 2},
    ),
    "SlowWorkerSpec": (
        "rounds.0.scenarios.0.fault",
        {"kind": "slow-worker", "target": {"rank": 1}, "cpu_percent": 20, "for_s": 2},
    ),
    "DetectionExpected": ("rounds.0.scenarios.0.fault.expect_detection", {"within_s": 5}),
    "OomWorkerSpec": (
        "rounds.0.scenarios.0.fault",
        {"kind": "oom-worker", "target": {"rank": 1}},
    ),
    "LinkLossSpec": ("rounds.0.scenarios.1.fault", None),
    "LinkSlowSpec": (
        "rounds.0.scenarios.1.fault",
        {"kind": "link-slow", "target": {"node": "n2"}, "for_s": 2},
    ),
    "LinkFlapSpec": ("rounds.0.scenarios.1.fault", {"kind": "link-flap", "target": {"node": "n2"}}),
    "PartitionSpec": (
        "rounds.0.scenarios.1.fault",
        {"kind": "partition", "target": {"node": "n2"}, "for_s": 2},
    ),
    "NodeFreezeSpec": (
        "rounds.1.scenarios.0.fault",
        {"kind": "node-freeze", "target": {"node": "n2"}, "for_s": 2},
    ),
    "ControlPlaneOutageSpec": ("rounds.2.scenarios.0.fault", None),
    "RestartProbe": ("rounds.2.scenarios.0.fault.restart_during", None),
    "StorageOutageSpec": ("rounds.2.scenarios.2.fault", None),
    "StorageSlowSpec": (
        "rounds.2.scenarios.2.fault",
        {"kind": "storage-slow", "latency_ms": 100, "for_s": 2},
    ),
    "DataOutageSpec": (
        "rounds.2.scenarios.2.fault",
        {"kind": "data-outage", "mode": "error", "for_s": 2},
    ),
    "CorruptCheckpointSpec": ("rounds.2.scenarios.3.fault", None),
    "RollbackLatestSpec": ("controls.0.fault", {"kind": "rollback-latest"}),
    "LogPatterns": ("logs", {"step": r"step (?P<step>\d+)"}),
}

#: Models whose site is inside another model's fresh mapping: that one is put in place first.
INSIDE = {"DetectionExpected": "SlowWorkerSpec"}

#: Values no numeric field may take, as (label, value).
ALWAYS_BAD: tuple[tuple[str, Any], ...] = (
    ("inf", float("inf")),
    ("-inf", float("-inf")),
    ("nan", float("nan")),
    ("1e300", 1e300),
    ("2p63", 2**63),
    ("-2p63", -(2**63)),
    ("true", True),
    ("false", False),
)


def numeric_fields(schema: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(model, field, "integer"|"number") of every numeric field, dict values as ``field[*]``."""
    models = {"Plan": schema, **schema.get("$defs", {})}
    for model, sch in models.items():
        for name, prop in sch.get("properties", {}).items():
            for alt in prop.get("anyOf", [prop]):
                kind = alt.get("type")
                if kind in ("integer", "number"):
                    yield model, name, kind
                extra = alt.get("additionalProperties")
                if isinstance(extra, dict) and extra.get("type") in ("integer", "number"):
                    yield model, f"{name}[*]", extra["type"]


def _node(raw: Any, dotted: str) -> Any:
    for part in dotted.split(".") if dotted else []:
        raw = raw[int(part)] if part.isdigit() else raw[part]
    return raw


def _display(dotted: str) -> str:
    out = ""
    for part in dotted.split(".") if dotted else []:
        out += f"[{part}]" if part.isdigit() else ("." if out else "") + part
    return out


def _set_site(raw: dict[str, Any], model: str) -> dict[str, Any]:
    """The mapping of ``model`` in ``raw``, put in place first when the demo has none."""
    dotted, fresh = SITES[model]
    if model in INSIDE:
        _set_site(raw, INSIDE[model])
    if fresh is not None:
        parent, _, last = dotted.rpartition(".")
        holder = _node(raw, parent)
        holder[int(last) if last.isdigit() else last] = copy.deepcopy(fresh)
    node: dict[str, Any] = _node(raw, dotted)
    if model == "Trigger":
        node.clear()  # a trigger takes exactly one field: the one under test
    return node


def number_cases(schema: dict[str, Any]) -> Iterator[Case]:
    for model, field, kind in numeric_fields(schema):
        bad = list(ALWAYS_BAD)
        if kind == "number":
            bad.append(("1e-300", 1e-300))
        for label, value in bad:
            raw = demo_raw()
            node = _set_site(raw, model)
            where = _display(SITES[model][0])
            name = field.removesuffix("[*]")
            if field.endswith("[*]"):
                node.setdefault(name, {})["global"] = value
            else:
                node[name] = value
            path = f"{where}.{name}" if where else name
            expect = "either" if label == "1e-300" else "refuse"
            yield Case(f"num-{model}-{name}-{label}", dump(raw), expect, path)


def workload_number_cases() -> Iterator[Case]:
    """The reference workload's own numbers (``task.workload``), checked at load too."""
    for field in ("steps", "global_batch", "step_sleep_s", "loader_workers", "seed", "lr"):
        for label, value in ALWAYS_BAD:
            raw = demo_raw()
            raw["task"]["workload"][field] = value
            yield Case(f"workload-{field}-{label}", dump(raw), "refuse", "task.workload")


# --- everything else ---------------------------------------------------------------------


def _demo_text() -> str:
    return DEMO.read_text()


def encoding_cases() -> Iterator[Case]:
    text = _demo_text()
    title_line = text[: text.index("title: one worker")].count("\n") + 1
    yield Case(
        "utf8-latin1-title",
        text.replace("title: one worker", "title: caf\xe9 worker").encode("latin-1"),
        "refuse",
        f"line {title_line}",
    )
    yield Case("utf8-utf16", text.encode("utf-16"), "refuse", "line 1")
    rng = random.Random(11)
    yield Case("utf8-random-bytes", bytes([0xC3, 0x28]) + rng.randbytes(4096), "refuse", "line")
    yield Case(
        "utf8-nul-bytes", text.encode().replace(b"demo-lm", b"demo\x00lm", 1), "refuse", "line"
    )
    yield Case("utf8-bom-valid", b"\xef\xbb\xbf" + text.encode(), "accept")
    yield Case("utf8-crlf-valid", text.replace("\n", "\r\n").encode(), "accept")


def nesting_cases() -> Iterator[Case]:
    text = _demo_text()
    for depth in (500, 5000, 100_000):
        deep = "[" * depth + "]" * depth
        yield Case(
            f"deep-flow-{depth}",
            text.replace(
                "    loader_workers: 2", f"    loader_workers: 2\n    deep: {deep}"
            ).encode(),
            "refuse",
            "nested deeper than",
        )
    block = "".join(f"{'  ' * i}k{i}:\n" for i in range(600)) + "  " * 600 + "v: 1\n"
    yield Case("deep-block-600", block.encode(), "refuse", "nested deeper than")
    yield Case("deep-top-list", ("- " * 2000 + "1\n").encode(), "refuse", "nested deeper than")
    yield Case(
        "deep-json", ('{"a":' * 1000 + "1" + "}" * 1000).encode(), "refuse", "nested deeper than"
    )


def format_cases() -> Iterator[Case]:
    for label, arg in (
        ("width", "{run_dir:999999999999}"),
        ("width-nested", "{run_dir:{ckpt_dir}}"),
        ("conversion", "{ckpt_dir!r}"),
        ("attribute", "{run_dir.__class__}"),
        ("index", "{run_dir[0]}"),
        ("positional", "{0}"),
        ("empty", "{}"),
        ("open-brace", "--x={"),
        ("close-brace", "--x=}"),
        ("unknown", "{workload_cfg}"),
    ):
        raw = demo_raw()
        raw["task"]["entrypoint"]["args"] = ["--workload-config={workload_config}", arg]
        yield Case(f"args-{label}", dump(raw), "refuse", "task.entrypoint.args")
    raw = demo_raw()
    raw["task"]["entrypoint"]["args"] = ["--workload-config={workload_config}", "{{literal}}"]
    yield Case("args-literal-braces-valid", dump(raw), "accept")


def alias_cases() -> Iterator[Case]:
    lol = ['lol0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        lol.append(f"lol{i}: &a{i} [{','.join(f'*a{i - 1}' for _ in range(9))}]")
    bomb = "\n".join(lol) + "\n"
    yield Case("alias-billion-laughs", bomb.encode(), "refuse", "aliases expand")
    text = _demo_text()
    inside = text.replace(
        "    loader_workers: 2",
        "    loader_workers: 2\n    bomb: {" + ", ".join(f"k{i}: *a9" for i in range(3)) + "}",
    )
    yield Case("alias-bomb-in-workload", (bomb + inside).encode(), "refuse", "aliases expand")
    wide = "big: &big [" + ",".join(["x"] * 2000) + "]\nuse: [" + ",".join(["*big"] * 100) + "]\n"
    yield Case("alias-wide", wide.encode(), "refuse", "aliases expand")
    yield Case("alias-cycle", b"a: &a [1, *a]\n", "refuse", "a cycle")
    yield Case("alias-unknown", b"a: *nope\n", "refuse", "line 1")
    raw_text = text.replace(
        "fault: {kind: kill-worker, target: {rank: 1}, signal: SIGKILL}",
        "fault: &kill {kind: kill-worker, target: {rank: 1}, signal: SIGKILL}",
    ).replace("    fault: {kind: kill-worker, target: {rank: 1}}\n", "    fault: *kill\n")
    yield Case("alias-small-valid", raw_text.encode(), "accept")


def duplicate_cases() -> Iterator[Case]:
    text = _demo_text()
    yield Case(
        "dup-top-rounds", (text + "\nrounds: []\n").encode(), "refuse", "duplicate key 'rounds'"
    )
    yield Case(
        "dup-task-id",
        text.replace("  id: demo-lm\n", "  id: demo-lm\n  id: other\n").encode(),
        "refuse",
        "duplicate key 'id' in task",
    )
    yield Case(
        "dup-in-flow",
        text.replace(
            "{rank: 1}, signal: SIGKILL}", "{rank: 1, rank: 0}, signal: SIGKILL}"
        ).encode(),
        "refuse",
        "in rounds[0].scenarios[0].fault.target",
    )
    yield Case(
        "dup-scenario-fault",
        text.replace(
            "        trigger: {at_step: 15}\n        preconditions:\n          - checkpoint at step 10 "
            "published before the fault\n        expected:\n          job: completes\n          "
            "recovery: automatic\n          resume: latest-valid\n          state: torchrun",
            "        trigger: {at_step: 15}\n        trigger: {at_step: 5}\n        preconditions:\n"
            "          - checkpoint at step 10 published before the fault\n        expected:\n"
            "          job: completes\n          recovery: automatic\n          resume: latest-valid\n"
            "          state: torchrun",
        ).encode(),
        "refuse",
        "duplicate key 'trigger' in rounds[0].scenarios[0]",
    )


def cross_field_cases() -> Iterator[Case]:
    raw = demo_raw()
    raw["controls"][1]["id"] = raw["controls"][0]["id"]
    raw["controls"][2]["expected_check"] = "progress.nope"
    raw["rounds"][0]["scenarios"][0]["fault"]["target"] = {"rank": 7}
    yield Case("cross-three-at-once", dump(raw), "refuse", "controls[1].id")
    raw = demo_raw()
    raw["resources"].update(min_nodes=5, isolation="none")
    yield Case("cross-resources-both", dump(raw), "refuse", "resources.spares")


def odd_file_cases() -> Iterator[Case]:
    text = _demo_text()
    yield Case("odd-empty", b"", "refuse", "(top level)")
    yield Case("odd-comment-only", b"# nothing\n", "refuse", "(top level)")
    yield Case("odd-list", b"- a\n- b\n", "refuse", "(top level)")
    yield Case("odd-scalar", b"42\n", "refuse", "(top level)")
    yield Case("odd-two-documents", b"a: 1\n---\nb: 2\n", "refuse", "line")
    yield Case(
        "odd-python-tag", b"task: !!python/object/apply:os.system [echo hi]\n", "refuse", "line 1"
    )
    yield Case("odd-tabs", b"task:\n\tid: x\n", "refuse", "line 2")
    yield Case("odd-unclosed", b"task: {id: x\nresources: [", "refuse", "line")
    yield Case(
        "odd-timestamp",
        text.replace("config_version: lm-v1", "config_version: 2026-11-30").encode(),
        "refuse",
        "task.config_version",
    )
    yield Case(
        "odd-binary-tag",
        text.replace("id: demo-lm", "id: !!binary aGVsbG8=").encode(),
        "refuse",
        "task.id",
    )
    yield Case(
        "odd-task-not-mapping",
        text.replace("task:\n  id: demo-lm", "task: 5\nold:\n  id: demo-lm").encode(),
        "refuse",
        "task",
    )
    huge = "x" * 1_000_000
    raw = demo_raw()
    raw["task"]["id"] = huge
    yield Case("odd-huge-id", dump(raw), "refuse", "task.id")
    raw = demo_raw()
    raw["task"]["k" * 100_000] = 1
    yield Case("odd-huge-unknown-key", dump(raw), "refuse", "task.'kkkk")
    raw = demo_raw()
    raw["rounds"][0]["scenarios"][0]["title"] = huge
    yield Case("odd-huge-title-valid", dump(raw), "accept")
    raw = demo_raw()
    raw["rounds"][0]["scenarios"][0]["id"] = "a" * 10_000
    yield Case("odd-huge-scenario-id", dump(raw), "refuse", "rounds[0].scenarios[0].id")
    raw = demo_raw()
    raw["task"]["entrypoint"]["args"] = ["--workload-config={workload_config}"] + ["x"] * 10_000
    yield Case("odd-many-args-valid", dump(raw), "accept")
    raw = demo_raw()
    raw["task"]["entrypoint"] = {"script": "/nonexistent/" + "d" * 10_000 + "/train.py"}
    raw["task"]["workload"] = {}
    yield Case("odd-huge-script-path", dump(raw), "refuse", "task.entrypoint.script")
    raw = demo_raw()
    raw["task"]["entrypoint"] = {"script": "train\x00.py"}
    raw["task"]["workload"] = {}
    yield Case("odd-nul-in-script", json.dumps(raw).encode(), "refuse", "task.entrypoint.script")
    raw = demo_raw()
    raw["controls"][0]["env"] = {"X": 1, "Y": [1, 2]}
    yield Case("odd-env-not-strings", dump(raw), "refuse", "controls[0].env.X")
    raw = demo_raw()
    raw["rounds"][0]["scenarios"][0]["fault"]["kind"] = "k" * 100_000
    yield Case("odd-huge-fault-kind", dump(raw), "refuse", "rounds[0].scenarios[0].fault.kind")
    raw = demo_raw()
    raw["seeds"] = {"global": -1}
    yield Case("odd-negative-seed", dump(raw), "refuse", "seeds.global")
    yield Case("odd-json-valid", json.dumps(demo_raw()).encode(), "accept")
    yield Case(
        "odd-hex-octal-valid",
        text.replace("every_steps: 10", "every_steps: 0xa").encode(),
        "accept",
    )
    merged = text.replace("stop:\n  max_wall_s: 150", "stop: &stop\n  max_wall_s: 150").replace(
        "stop: {max_no_progress_s: 40}", "stop: {<<: *stop, max_no_progress_s: 40}"
    )
    assert merged.count("*stop") == 1
    yield Case("odd-merge-key-valid", merged.encode(), "accept")


# --- issue 21: plans that cannot do what they say ------------------------------------------


def _mutated(changes: list[tuple[str, Any]]) -> dict[str, Any]:
    """The demo plan with each (dotted path, value) set."""
    raw = demo_raw()
    for dotted, value in changes:
        parent, _, last = dotted.rpartition(".")
        holder = _node(raw, parent)
        holder[int(last) if last.isdigit() else last] = copy.deepcopy(value)
    return raw


def quoted_number_cases(schema: dict[str, Any]) -> Iterator[Case]:
    """Every numeric field as a quoted number ('2'), and every integer one as 2.0: pydantic's
    lax mode would take both; a plan's numbers are strict."""
    for model, field, kind in numeric_fields(schema):
        labels = [("quoted", "2")] + ([("float", 2.0)] if kind == "integer" else [])
        for label, value in labels:
            raw = demo_raw()
            node = _set_site(raw, model)
            where = _display(SITES[model][0])
            name = field.removesuffix("[*]")
            if field.endswith("[*]"):
                node.setdefault(name, {})["global"] = value
                name = f"{name}.global"
            else:
                node[name] = value
            path = f"{where}.{name}" if where else name
            yield Case(f"strict-{model}-{name}-{label}", dump(raw), "refuse", path)


#: Text fields of the demo plan (dotted path), each of which must refuse bytes and dates.
TEXT_FIELDS = (
    "task.id",
    "task.config_version",
    "task.code_id",
    "task.submitter",
    "task.entrypoint.module",
    "data.snapshot",
    "data.digest",
    "checkpoint.dir",
    "responsibility.observer",
    "rounds.0.name",
    "rounds.0.scenarios.0.id",
    "rounds.0.scenarios.0.title",
    "rounds.0.scenarios.0.fault.kind",
    "rounds.0.scenarios.0.expected.state",
    "controls.0.expected_check",
    "controls.0.workload.bad_mode",
)


def not_text_cases() -> Iterator[Case]:
    """Binary data (``!!binary``) and dates where text goes: refused at the field."""
    for dotted in TEXT_FIELDS:
        where = _display(dotted)
        for label, value in (("binary", b"hello"), ("date", dt.date(2026, 11, 30))):
            raw = _mutated([(dotted, value)])
            yield Case(f"text-{dotted}-{label}", dump(raw), "refuse", where)
    raw = _mutated([("task.env", {"NOTE": b"x", "WHEN": dt.date(2026, 1, 2)})])
    yield Case("text-env-both", dump(raw), "refuse", "task.env.NOTE", also=("task.env.WHEN",))
    raw = _mutated([("task.env", {b"KEY": "x"})])
    yield Case("text-binary-key", dump(raw), "refuse", "task.env.b'KEY'")
    raw = _mutated([("task.env", {"SET": {1, 2}})])
    yield Case("text-set", dump(raw), "refuse", "task.env.SET")


ROLES = ("injector", "observer", "recovery_operator", "signer")


def responsibility_cases() -> Iterator[Case]:
    for role in ROLES:
        for label, value in (("empty", ""), ("blank", "   "), ("tab", "\t"), ("newline", "\n")):
            raw = _mutated([(f"responsibility.{role}", value)])
            yield Case(f"names-{role}-{label}", dump(raw), "refuse", f"responsibility.{role}")
    raw = _mutated([("responsibility", dict.fromkeys(ROLES, ""))])
    paths = tuple(f"responsibility.{r}" for r in ROLES)
    yield Case("names-all-empty", dump(raw), "refuse", paths[0], also=paths[1:])


#: Entry point modules that are no dotted Python module name.
BAD_MODULES = (
    "os; rm -rf /",
    "$(reboot)",
    "`id`",
    "a b",
    "a\nb",
    ".lm",
    "lm.",
    "a..b",
    "1lm",
    "pkg.class",
    "pkg-name",
    "pkg/train",
    "",
    "é.train",
    "a" * 300,
)


def module_cases() -> Iterator[Case]:
    for i, module in enumerate(BAD_MODULES):
        raw = _mutated([("task.entrypoint.module", module)])
        yield Case(f"module-bad-{i}", dump(raw), "refuse", "task.entrypoint.module")
    raw = _mutated([("task.entrypoint.module", "my_pkg.train_2"), ("task.workload", {})])
    raw["controls"] = []
    yield Case("module-other-package-valid", dump(raw), "accept")


def nothing_to_drill_cases() -> Iterator[Case]:
    raw = _mutated([("rounds", []), ("controls", [])])
    yield Case("drill-nothing-empty", dump(raw), "refuse", "rounds")
    raw = demo_raw()
    del raw["rounds"], raw["controls"]
    yield Case("drill-nothing-absent", dump(raw), "refuse", "rounds")
    raw = _mutated([("rounds", [])])
    yield Case("drill-controls-only-valid", dump(raw), "accept")
    raw = _mutated([("controls", [])])
    yield Case("drill-scenarios-only-valid", dump(raw), "accept")


def _items(raw: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for r, rnd in enumerate(raw["rounds"]):
        for i, sc in enumerate(rnd["scenarios"]):
            yield f"rounds.{r}.scenarios.{i}", sc
    for i, control in enumerate(raw["controls"]):
        yield f"controls.{i}", control


def trigger_cases() -> Iterator[Case]:
    """Each item's trigger moved past the job's last step or last checkpoint (refused),
    and onto the last ones (either: the item may have other needs of its trigger)."""
    base = demo_raw()
    steps_of_task = base["task"]["workload"]["steps"]
    every = base["checkpoint"]["every_steps"]
    for dotted, item in _items(base):
        steps = item.get("workload", {}).get("steps", steps_of_task)
        saves = -(-steps // every)
        where = _display(dotted) + ".trigger"
        for label, trigger, expect in (
            ("step-past", {"at_step": steps + 1}, "refuse"),
            ("step-far", {"at_step": 10**9}, "refuse"),
            ("ckpt-past", {"after_checkpoint": saves + 1}, "refuse"),
            ("step-last", {"at_step": steps}, "either"),
            ("ckpt-last", {"after_checkpoint": saves}, "either"),
        ):
            raw = _mutated([(f"{dotted}.trigger", trigger)])
            path = f"{where}.{next(iter(trigger))}"
            yield Case(f"trigger-{item['id']}-{label}", dump(raw), expect, path)


def fifo_cases() -> Iterator[Case]:
    """A FIFO for the plan, and for each file a plan names: refused at once, never read."""
    yield Case("fifo-plan", b"", "refuse", "is a FIFO (named pipe)", fifos=("plan.yaml",))
    raw = _mutated([("task.entrypoint", {"script": "train.py"}), ("task.workload", {})])
    yield Case("fifo-script", dump(raw), "refuse", "task.entrypoint.script", fifos=("train.py",))
    k8s = {"platform": "kubernetes", "nodes": 2}
    raw = _mutated([("resources", k8s), ("controls", [])])
    raw["resources"]["kubernetes"] = {"test_cluster": True, "manifest": "job.yaml"}
    yield Case(
        "fifo-manifest", dump(raw), "refuse", "resources.kubernetes.manifest", fifos=("job.yaml",)
    )
    manifest = Path(__file__).resolve().parents[1] / "examples" / "kubernetes-job.yaml"
    raw["resources"]["kubernetes"] = {
        "kubeconfig": "kc",
        "manifest": str(manifest),
        "rendezvous": "store:29400",
    }
    yield Case(
        "fifo-kubeconfig", dump(raw), "refuse", "resources.kubernetes.kubeconfig", fifos=("kc",)
    )


def combined_cases() -> Iterator[Case]:
    """Several field mutations at once (seeded): every one is named in one error."""
    pool: list[tuple[str, Any, str]] = [
        (
            "rounds.0.scenarios.0.trigger",
            {"at_step": "15"},
            "rounds[0].scenarios[0].trigger.at_step",
        ),
        ("rounds.0.scenarios.1.fault.for_s", "2", "rounds[0].scenarios[1].fault.for_s"),
        ("observation.sample_hz", "10", "observation.sample_hz"),
        ("checkpoint.every_steps", 10.0, "checkpoint.every_steps"),
        ("seeds.global", "1", "seeds.global"),
        ("task.id", b"demo", "task.id"),
        ("data.snapshot", dt.date(2026, 1, 1), "data.snapshot"),
        ("task.entrypoint.module", "os; rm -rf /", "task.entrypoint.module"),
        ("responsibility.observer", "", "responsibility.observer"),
        ("responsibility.signer", " ", "responsibility.signer"),
        ("resources.nodes", True, "resources.nodes"),
        ("controls.0.id", b"ctl", "controls[0].id"),
    ]
    rng = random.Random(21)
    for n in range(40):
        picked = rng.sample(pool, rng.randint(2, 5))
        raw = _mutated([(dotted, value) for dotted, value, _ in picked])
        paths = tuple(where for _, _, where in picked)
        yield Case(f"combined-{n}", dump(raw), "refuse", paths[0], also=paths[1:])


def corpus() -> list[Case]:
    """Every case, in a fixed order (the same bytes on every run)."""
    from faultdrill.admit import plan_schema

    makers: list[Callable[[], Iterator[Case]]] = [
        encoding_cases,
        nesting_cases,
        format_cases,
        alias_cases,
        duplicate_cases,
        cross_field_cases,
        odd_file_cases,
        workload_number_cases,
        not_text_cases,
        responsibility_cases,
        module_cases,
        nothing_to_drill_cases,
        trigger_cases,
        fifo_cases,
        combined_cases,
    ]
    schema = plan_schema()
    cases = [*number_cases(schema), *quoted_number_cases(schema)]
    for make in makers:
        cases.extend(make())
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    return cases


# --- the driver ---------------------------------------------------------------------------


def _run_one(path: str, out_dir: Path) -> int:
    """In a forked child: ``faultdrill validate path`` with stdout/stderr in files."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        f = os.open(out_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout = os.fdopen(1, "w", closefd=False)
    sys.stderr = os.fdopen(2, "w", closefd=False)
    from faultdrill.cli import main

    try:
        rc = main(["validate", path])
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # as the interpreter would: the traceback, status 1
        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return rc


def drive(manifest: Path) -> None:
    import faultdrill.cli
    import faultdrill.engine.run  # noqa: F401

    cases = json.loads(manifest.read_text())
    for case in cases:
        out_dir = Path(case["out"])
        out_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _run_one(case["file"], out_dir)
            finally:
                os._exit(code)
        rc: int | None = None
        while time.monotonic() - started < TIMEOUT_S:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.005)
        if rc is None:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        result = {
            "name": case["name"],
            "rc": rc,
            "hang": rc is None,
            "seconds": round(time.monotonic() - started, 3),
            "stdout": (out_dir / "stdout").read_text(errors="replace"),
            "stderr": (out_dir / "stderr").read_text(errors="replace"),
        }
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    drive(Path(sys.argv[1]))
