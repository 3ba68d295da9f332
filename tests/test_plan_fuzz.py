"""Bad input gets a clear error, never a traceback or a hang (issue 11).

The fuzz corpus (:mod:`tests.plan_fuzz`) is run through ``faultdrill validate``, one process
per case: no traceback, no hang, every bad plan refused (exit 2) with the file and the
place named, no error that prints an expanded value; the good ones accepted. Beside it:
every number of the schema has both bounds, a 5,000-scenario plan validates in well under
a second per thousand items with the machine probed once, and ``faultdrill schema | head``
ends quietly.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.admit import load_plan, plan_schema
from faultdrill.engine.run import machine_problems
from tests.drillkit import DEMO
from tests.plan_fuzz import ALWAYS_BAD, SITES, Case, corpus, demo_raw, numeric_fields

ROOT = Path(__file__).resolve().parents[1]
#: No error message may be longer than this (an alias bomb once printed 9 MB).
MAX_MESSAGE = 20_000
#: fuzz drivers run at once, each on its share of the cases
DRIVERS = 2


def run_corpus(cases: list[Case], tmp_path: Path) -> dict[str, dict[str, Any]]:
    manifest = []
    for i, case in enumerate(cases):
        # a directory per case: the files a plan names (a FIFO script...) sit beside it
        path = tmp_path / "plans" / f"{i:04d}-{case.name[:60]}" / "plan.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        for name in case.fifos:
            os.mkfifo(path.parent / name)
        if "plan.yaml" not in case.fifos:
            path.write_bytes(case.data)
        manifest.append(
            {"name": case.name, "file": str(path), "out": str(tmp_path / "out" / str(i))}
        )
    # two drivers side by side (CI has two cores), each a half of the cases
    procs = []
    for part in range(DRIVERS):
        half = tmp_path / f"manifest-{part}.json"
        half.write_text(json.dumps(manifest[part::DRIVERS]))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.plan_fuzz", str(half)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, stderr[-3000:]
        results += [json.loads(line) for line in stdout.splitlines()]
    assert len(results) == len(cases)
    by_name = {r["name"]: r for r in results}
    for case, entry in zip(cases, manifest, strict=True):
        by_name[case.name]["file"] = entry["file"]
    return by_name


def test_the_corpus_covers_every_numeric_field_of_the_schema() -> None:
    fields = list(numeric_fields(plan_schema()))
    assert {model for model, _, _ in fields} <= set(SITES)
    names = {c.name for c in corpus()}
    for model, field, _ in fields:
        assert f"num-{model}-{field.removesuffix('[*]')}-inf" in names


def test_every_number_of_the_plan_has_both_bounds() -> None:
    """Every numeric field (fault specs included) declares a lowest and a highest value."""
    schema = plan_schema()
    models = {"Plan": schema, **schema["$defs"]}
    unbounded = []
    for model, field, _ in numeric_fields(schema):
        name = field.removesuffix("[*]")
        prop = models[model]["properties"][name]
        alts = [a.get("additionalProperties", a) for a in prop.get("anyOf", [prop])]
        numeric = [a for a in alts if a.get("type") in ("integer", "number")]
        if model == "Plan" and name == "version":
            continue  # a literal: exactly 1
        for alt in numeric:
            low = "minimum" in alt or "exclusiveMinimum" in alt
            high = "maximum" in alt or "exclusiveMaximum" in alt
            if not (low and high):
                unbounded.append(f"{model}.{field}")
    assert unbounded == []


def default_corpus(cases: list[Case]) -> list[Case]:
    """The default run's share of the corpus: every case but the bad numbers, and of those
    one per numeric field, the bad value turning round from field to field, so that every
    field and every bad value is still tried (the whole corpus: the slow set)."""
    # longest first: "-inf" is tried before "inf", which it ends with
    labels = sorted([label for label, _ in ALWAYS_BAD] + ["1e-300"], key=len, reverse=True)
    kept: list[Case] = []
    fields: dict[str, list[Case]] = {}
    for case in cases:
        label = next((x for x in labels if case.name.endswith(f"-{x}")), None)
        if case.name.startswith("num-") and label is not None:
            fields.setdefault(case.name.removesuffix(f"-{label}"), []).append(case)
        else:
            kept.append(case)
    for i, per_field in enumerate(fields.values()):
        kept.append(per_field[i % len(per_field)])
    return kept


def test_the_default_corpus_tries_every_field_and_every_bad_number() -> None:
    cases = corpus()
    default = default_corpus(cases)
    assert len(default) >= 400
    numbers = {c.name for c in cases if c.name.startswith("num-")}
    assert {c.name for c in cases} - numbers <= {c.name for c in default}
    tried = [c.name for c in default if c.name in numbers]
    for model, field, _ in numeric_fields(plan_schema()):
        prefix = f"num-{model}-{field.removesuffix('[*]')}-"
        assert sum(name.startswith(prefix) for name in tried) >= 1, prefix
    for label, _ in ALWAYS_BAD:
        assert any(name.endswith(f"-{label}") for name in tried), label


def test_fuzz_corpus_no_traceback_no_hang_every_refusal_named(tmp_path: Path) -> None:
    """The default share of the corpus (:func:`default_corpus`)."""
    fuzz_and_judge(default_corpus(corpus()), tmp_path)


@pytest.mark.slow
def test_the_whole_fuzz_corpus_no_traceback_no_hang_every_refusal_named(tmp_path: Path) -> None:
    cases = corpus()
    assert len(cases) >= 1000
    fuzz_and_judge(cases, tmp_path)


def fuzz_and_judge(cases: list[Case], tmp_path: Path) -> None:
    """Each case through ``faultdrill validate``: no traceback, no hang, every refusal
    named, every good plan accepted."""
    assert len(cases) >= 400
    results = run_corpus(cases, tmp_path)
    problems = []
    for case in cases:
        r = results[case.name]
        out = r["stdout"] + r["stderr"]
        if r["hang"]:
            problems.append(f"{case.name}: hang (> 20 s)")
            continue
        if "Traceback" in out or r["rc"] not in (0, 2):
            problems.append(f"{case.name}: rc {r['rc']}: {out[-800:]}")
            continue
        if len(out) > MAX_MESSAGE:
            problems.append(f"{case.name}: {len(out)} characters of output")
        if case.expect == "accept" and r["rc"] != 0:
            problems.append(f"{case.name}: refused a good plan: {out[-800:]}")
        if case.expect == "refuse":
            if r["rc"] != 2:
                problems.append(f"{case.name}: accepted: {out[-300:]}")
            elif r["file"] not in r["stderr"] or case.where not in r["stderr"]:
                problems.append(f"{case.name}: error does not name {case.where!r}: {out[-800:]}")
            else:
                missed = [w for w in case.also if f"  - {w}: " not in r["stderr"]]
                if missed:
                    problems.append(f"{case.name}: error does not also name {missed}: {out[-800:]}")
    refused = sum(results[c.name]["rc"] == 2 for c in cases)
    print(f"fuzz corpus: {len(cases)} plans, {refused} refused, 0 tracebacks expected")
    assert problems == []


def test_cross_field_errors_name_their_paths_and_come_all_at_once(tmp_path: Path) -> None:
    raw = demo_raw()
    raw["controls"][1]["id"] = raw["controls"][0]["id"]
    raw["controls"][2]["expected_check"] = "progress.nope"
    raw["rounds"][0]["scenarios"][0]["fault"]["target"] = {"rank": 7}
    raw["rounds"][0]["scenarios"][1]["fault"]["target"] = {"node": "n9"}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw))
    from faultdrill.errors import PlanError

    with pytest.raises(PlanError) as info:
        load_plan(path)
    where = [loc for loc, _ in info.value.problems]
    assert where == [
        "controls[1].id",
        "rounds[0].scenarios[0].fault",
        "rounds[0].scenarios[1].fault",
        "controls[2].expected_check",
    ]
    assert "(top level)" not in str(info.value)


def big_plan(n: int) -> dict[str, Any]:
    """The demo plan with ``n`` scenarios in round 1 (half of them storage outages of the
    unreachable mode, which ask the machine about FUSE)."""
    raw = demo_raw()
    kill = raw["rounds"][0]["scenarios"][0]
    unreachable = {
        **copy.deepcopy(raw["rounds"][2]["scenarios"][1]),
        "fault": {"kind": "storage-outage", "mode": "unreachable", "server": "hang", "for_s": 2},
    }
    raw["rounds"][0]["scenarios"] = [
        {**copy.deepcopy(kill if i % 2 else unreachable), "id": f"s{i}"} for i in range(n)
    ]
    return raw


def test_a_5000_scenario_plan_validates_fast_and_probes_the_machine_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultdrill.platforms.local import platform as local

    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(big_plan(5000), sort_keys=False))
    started = time.process_time()
    plan = load_plan(path)
    probes: list[int] = []
    real = local.fuse_missing

    def counted() -> list[str]:
        probes.append(1)
        return real()

    monkeypatch.setattr(local, "fuse_missing", counted)
    machine_problems(plan, [i.id for i in plan.items()])
    cpu = time.process_time() - started
    items = len(plan.items())
    print(f"5,000-scenario plan: {cpu:.2f} s CPU for {items} items")
    demo = load_plan(DEMO)
    assert items == 5000 + len(demo.scenarios()) - 2 + len(demo.controls)  # 2 replaced
    assert len(probes) <= 2  # once to know the ability, once to say what is missing


def test_schema_into_a_closed_pipe_ends_quietly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultdrill.cli", "schema"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head` does once it has read enough
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err
