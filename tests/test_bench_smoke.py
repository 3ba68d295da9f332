"""Every benchmark module at tiny sizes, so none can rot: ``bench/run.py --quick
--no-drill`` (seconds), every module's command line started, the overhead on one real
drill item and the Slurm experiment (``drill`` tests, well under a minute each); the
comparison with the previous results and ``bench/README.md`` as generated from
``bench/results.json``. And the fast paths the checks take at scale, compared with the
plain computations they replace. No timing is asserted here: speed is measured by
``python bench/run.py`` (see ``bench/README.md``)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest
from bench import run as bench_run
from bench.checks_scale import Drill, measure, synthetic
from bench.engines import ENGINES
from bench.readme import render
from bench.targets import compare

from faultdrill.admit import load_plan
from faultdrill.checks import CheckContext, Verdict, run_checks
from faultdrill.events import read_jsonl
from faultdrill.intervals import merge
from faultdrill.readings.reference import LossLookup, Reference, StepCovers, mean_loss_by_step
from faultdrill.timeline import StepTable, Timeline
from faultdrill.timeline.model import _lookup
from tests.slurmkit import needs_slurm

DEMO_PLAN = Path(str(files("faultdrill") / "plans" / "demo.yaml"))

# --- the benchmark itself ---------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
BENCH_MODULES = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if p.stem != "__init__")


def test_quick_run_measures_everything_and_writes_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    previous = ROOT / "bench" / "results.json"
    argv = ["--quick", "--no-drill", f"--out={out}", f"--previous={previous}"]
    assert bench_run.main(argv) == 0
    res = json.loads(out.read_text())
    assert res["command"] == "python bench/run.py " + " ".join(argv)
    shapes = res["probe"]["shapes"]
    assert set(shapes) == {
        "range(64)",
        "list of 64 consecutive ids",
        "list of 64 non-consecutive ids",
    }
    assert all(v["median_cpu_us"] > 0 for v in shapes.values())
    # one [start, end) pair per line when the ids fold, 64 when they do not
    assert (
        shapes["list of 64 non-consecutive ids"]["line_bytes"]
        > 5 * shapes["range(64)"]["line_bytes"]
    )
    (step,) = res["probe"]["reference_steps"]
    assert step["median_step_us"] > 0 and step["measured_steps"] == 9
    precision = res["precision"]
    assert set(precision["targeted"]) <= set(precision["times"])
    assert {"injection", "kill_to_exit", "exit_self", "first_new_step"} <= set(precision["times"])
    assert precision["exit_clocks"] and set(precision["exit_clocks"]) <= {"kernel", "pidfd"}
    assert res["overhead"] is None  # a real drill: --no-drill (see the drill test below)
    sizes = res["scale"]["sizes"]
    assert [s["ranks"] for s in sizes] == [4, 8]
    assert all(
        s["from_store"] and s["checks"] >= 16 and s["findings"] >= s["checks"] for s in sizes
    )
    assert sizes[1]["step_events"] == Drill(8, 40).step_events
    (load,) = res["load"]["sizes"]
    assert load["step_events"] == 200 and load["other_events"] == 2
    assert load["store_write_s"] >= 0 and load["store_load_s"] >= 0
    # (e) every engine answered the tiny drill, alike and as built in (a straggler, a jump)
    eng = res["engines"]
    assert [r["engine"] for r in eng["engines"]] == list(ENGINES) and eng["chosen"] in ENGINES
    answers = {(r["digest"], tuple(r["stragglers"]), r["bad_advances"]) for r in eng["engines"]}
    assert len(answers) == 1 and next(iter(answers))[1:] == ((3,), 1)
    assert all(r["processes"] == 2 * eng["ranks"] for r in eng["engines"])
    rows = bench_run.targets(res)
    # not measured: the overhead and the demo (--no-drill), the judge at a fleet's size
    # (no size of 16,384 ranks at the quick sizes): shown as such, never left out
    unmeasured = [t.what for t in rows if t.met is None]
    assert len(unmeasured) == 4
    assert unmeasured[1:3] == [
        "load + every check, 16,384 ranks: CPU",
        "load + every check, 16,384 ranks: peak RSS",
    ]
    assert all((t.value is None) == (t.met is None) for t in rows)
    # Against the committed full run: the probe row compares (same measure), the sizes
    # that differ do not; the table says both.
    printed = capsys.readouterr().out
    assert f"targets (previous: {previous} of " in printed and "now/prev" in printed
    compared = {c.now.what: c for c in compare(res, json.loads(previous.read_text()))}
    probe = compared["probe: Probe.step, 64 ids, worst shape (CPU)"]
    before = max(
        v["median_cpu_us"] for v in json.loads(previous.read_text())["probe"]["shapes"].values()
    )
    assert probe.now.value is not None and probe.previous == before
    assert probe.ratio == pytest.approx(probe.now.value / before)
    scale = [c for w, c in compared.items() if w.startswith("load + every check")]
    assert len(scale) == 4 and all(c.previous is None and c.ratio is None for c in scale)
    # the binary step rates: the quick size differs from the full run's, so no ratio
    rates = [c for w, c in compared.items() if "binary step records" in w]
    assert len(rates) == 2 and all(c.now.value and c.previous is None for c in rates)
    # ... and the JSON lines' (the reader in one process, the store written from them)
    json_rates = [c for w, c in compared.items() if ", JSON lines, " in w]
    assert len(json_rates) == 2 and all(c.now.value and c.previous is None for c in json_rates)
    assert "msgspec (Struct)" in printed and "binary records" in printed


def test_a_fleet_size_is_judged_against_the_fleet_target_and_a_miss_is_shown() -> None:
    """A size of 16,384 ranks or more is held to 60 s and 8 GiB (the smaller ones to
    4 GiB); one that misses is a row that says so, not a row left out."""
    res = json.loads((ROOT / "bench" / "results.json").read_text())
    below = next(s for s in reversed(res["scale"]["sizes"]) if s["ranks"] < 16_384)
    fleet = {**below, "ranks": 16_384, "step_events": 164_659_200}
    for cpu, rss, met in ((50.0, 7 * 1024**3, True), (61.0, 7 * 1024**3, False)):
        res["scale"]["sizes"] = [below, {**fleet, "judge_cpu_s": cpu, "peak_rss_bytes": rss}]
        rows = {t.what: t for t in bench_run.targets(res)}
        cpu_row = rows["load + every check, 16,384 x 10,000 (164.7 M events): CPU"]
        rss_row = rows["load + every check, 16,384 x 10,000 (164.7 M events): peak RSS"]
        assert (cpu_row.met, rss_row.met) == (met, True)
        assert rss_row.target == "<= 8 GiB" and cpu_row.target == "<= 60 s"
        small = [t for w, t in rows.items() if w.startswith("load + every check, 4,096")]
        assert [t.target for t in small] == ["<= 60 s", "<= 4 GiB"]
    res["scale"]["sizes"][-1]["peak_rss_bytes"] = 9 * 1024**3
    rows = {t.what: t for t in bench_run.targets(res)}
    assert rows["load + every check, 16,384 x 10,000 (164.7 M events): peak RSS"].met is False


def test_previous_results_are_compared_row_by_row_and_a_bad_file_is_said(
    tmp_path: Path,
) -> None:
    res = json.loads((ROOT / "bench" / "results.json").read_text())
    faster = json.loads(json.dumps(res))
    was = res["scale"]["sizes"][-1]["judge_cpu_s"]
    faster["scale"]["sizes"][-1]["judge_cpu_s"] = was / 2
    rows = {c.now.what: c for c in compare(faster, res)}
    changed = [w for w, c in rows.items() if c.ratio is not None and c.ratio != 1.0]
    assert len(changed) == 1 and changed[0].endswith(": CPU")  # the last size's, alone
    cpu = rows[changed[0]]
    assert (cpu.now.value, cpu.previous, cpu.ratio) == (was / 2, was, 0.5)
    measured = [c for w, c in rows.items() if w != changed[0] and c.now.value is not None]
    assert measured and all(c.ratio == 1.0 for c in measured)
    assert all(c.previous is None for c in compare(res, None))
    bad = tmp_path / "results.json"
    bad.write_text('{"probe": {}}')
    got, name = bench_run.read_results(bad)
    assert got is None and f"{bad} is not a results file: KeyError" in name
    got, name = bench_run.read_results(tmp_path / "absent.json")
    assert got is None and "does not exist" in name


def test_the_readme_is_what_the_generator_makes_of_the_results() -> None:
    """bench/README.md is generated (``python bench/run.py --readme``), never hand-edited:
    every figure in it is the committed results file's."""
    res = json.loads((ROOT / "bench" / "results.json").read_text())
    page = (ROOT / "bench" / "README.md").read_text()
    assert page == render(res), "bench/README.md is stale: run python bench/run.py --readme"
    worst = res["probe"]["shapes"]["list of 64 non-consecutive ids"]["median_cpu_us"]
    assert f"| {worst:.2f} |" in page and res["started"][:10] in page


@pytest.mark.parametrize("module", BENCH_MODULES)
def test_every_bench_module_starts(module: str) -> None:
    """Each module's command line, in a fresh process: a broken import or a changed API
    that breaks the module's imports fails here, also for the modules that take a cluster."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    if 'if __name__ == "__main__":' in (ROOT / "bench" / f"{module}.py").read_text():
        assert "usage:" in done.stdout, done.stdout[-2000:]
    else:  # a library of the others: importing it is the test
        assert done.stdout == ""


@pytest.mark.drill
def test_the_overhead_of_a_real_drill_item_at_its_tiny_size() -> None:
    """``bench.overhead`` as ``bench/run.py --quick`` runs it: the demo's baseline alone,
    12 steps, for real (well under a minute): phases recorded, overhead measured."""
    over = bench_run.overhead("", 12)
    assert over["steps"] == 12 and set(over["items"]) == {"baseline"}
    base = over["items"]["baseline"]
    assert base["verdict"] == "pass" and base["job_s"] > 0
    assert 0 <= base["overhead_s"] == over["max_overhead_s"]
    assert {"bring-up", "teardown", "checks", "report"} <= set(base["phases_s"])
    assert base["overhead_s"] >= sum(base["phases_s"].values()) - 0.01
    res = {**json.loads((ROOT / "bench" / "results.json").read_text()), "overhead": over}
    (row,) = [t for t in bench_run.targets(res) if t.what.startswith("harness overhead")]
    assert row.what == "harness overhead: baseline" and row.value == base["overhead_s"]


@pytest.mark.drill
@pytest.mark.root
@needs_slurm
def test_the_slurm_experiment_runs_at_a_tiny_size(tmp_path: Path) -> None:
    """``bench.slurm_experiments`` on the embedded Slurm cluster: a worker killed at step
    3 of 8, and its report of what Slurm and the job did."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    argv = ["kill-worker", str(tmp_path / "x"), "--steps=8", "--at-step=3", "--restore-s=1"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.slurm_experiments", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "INJECT kill-worker on n" in done.stdout and "at step" in done.stdout


def test_synthetic_drill_is_judged_for_real() -> None:
    """The healthy synthetic drill passes every check (``measure`` insists), and the same
    drill with one replayed sample range fails the sample ledger: the benchmark times
    checks that do their work, not checks that gave up."""
    result = measure(6, 40)
    assert result["step_events"] == 6 * (Drill(6, 40).kill_after + 40 - Drill(6, 40).resume)
    plan = load_plan(DEMO_PLAN)
    task_b, ev_b, st_b = synthetic(6, 40, fault=False)
    ref = Reference.from_timeline(Timeline.from_parts(task_b, ev_b, st_b))
    task, ev, st = synthetic(6, 40, fault=True)
    st.rng_start[-1], st.rng_end[-1] = st.rng_start[0], st.rng_end[0]  # replay step 1's ids
    tl = Timeline.from_parts(task, ev, st)
    evidence = run_checks(
        CheckContext(timeline=tl, plan=plan, item=plan.scenarios()[0], reference=ref)
    )
    ledger = [f for f in evidence["progress"].findings if f.check == "progress.sample-ledger"]
    assert [f.verdict for f in ledger] == [Verdict.FAIL, Verdict.FAIL]
    assert "replayed" in ledger[0].message and "skipped" in ledger[1].message


# --- fast paths == plain computations ----------------------------------------------------


def _random_table(rng: np.random.Generator, n: int, max_ranges: int) -> StepTable:
    counts = rng.integers(0, max_ranges + 1, n)
    samples = [[[int(a), int(a) + 3] for a in rng.integers(0, 1000, c)] for c in counts]
    return StepTable.from_columns(
        np.sort(rng.random(n)),
        rng.integers(0, 4, n),
        rng.integers(100, 110, n),
        rng.integers(1, 50, n),
        rng.random(n),
        samples,
    )


@pytest.mark.parametrize("max_ranges", [1, 3])
def test_ranges_equal_the_ranges_of_take(max_ranges: int) -> None:
    rng = np.random.default_rng(max_ranges)
    for n in (0, 1, 7, 200):
        st = _random_table(rng, n, max_ranges)
        if max_ranges == 1:  # also the one-range-per-row layout of the probe
            full = StepTable.from_columns(
                st.mono,
                st.rank,
                st.pid,
                st.step,
                st.loss,
                rng_off=np.arange(n + 1),
                rng_start=np.arange(n) * 5,
                rng_end=np.arange(n) * 5 + 2,
            )
            for table in (st, full):
                mask = rng.random(n) < 0.5
                sub = table.take(mask)
                got = table.ranges(mask)
                assert np.array_equal(got[0], sub.rng_start) and np.array_equal(got[1], sub.rng_end)
        mask = rng.random(n) < 0.5
        idx = rng.permutation(n)[: n // 2]
        for rows in (mask, idx):
            sub = st.take(rows)
            s, e = st.ranges(rows)
            assert np.array_equal(s, sub.rng_start) and np.array_equal(e, sub.rng_end)
            rows_idx = np.flatnonzero(rows) if rows.dtype == bool else rows
            want = [
                p
                for i in rows_idx
                for p in zip(
                    st.rng_start[st.rng_off[i] : st.rng_off[i + 1]],
                    st.rng_end[st.rng_off[i] : st.rng_off[i + 1]],
                    strict=True,
                )
            ]
            assert list(zip(sub.rng_start, sub.rng_end, strict=True)) == want


def test_take_accepts_negative_row_indices() -> None:
    st = _random_table(np.random.default_rng(7), 20, 3)
    last, also_last = st.take(np.array([-1])), st.take(np.array([19]))
    assert np.array_equal(last.rng_start, also_last.rng_start)
    assert np.array_equal(last.rng_off, also_last.rng_off) and last.step[0] == st.step[19]


def test_merge_is_the_union_whatever_the_order() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 10, 300):
        s = rng.integers(0, 200, n)
        e = s + rng.integers(0, 6, n)
        ids = {i for a, b in zip(s, e, strict=True) for i in range(a, b)}
        for order in (np.arange(n), np.argsort(s, kind="stable"), rng.permutation(n)):
            ms, me = merge(s[order], e[order])
            assert {i for a, b in zip(ms, me, strict=True) for i in range(a, b)} == ids
            assert (ms[1:] > me[:-1]).all()  # disjoint and not adjacent


@pytest.mark.parametrize("spread", [1, 10**9])  # a lookup table, then a sorted search
def test_lookup_maps_keys_like_a_dict(spread: int) -> None:
    rng = np.random.default_rng(spread % 97)
    table = {
        int(k) * spread: int(v)
        for k, v in zip(rng.integers(1, 5000, 50), rng.integers(0, 9, 50), strict=True)
    }
    keys = np.array([*table, 7 * spread + 1, 0, -3, 10**12], dtype=np.int64)
    keys = rng.permutation(np.repeat(keys, 3))
    got = _lookup(table, keys)
    assert got.tolist() == [table.get(int(k), -1) for k in keys]
    assert _lookup({}, keys).tolist() == [-1] * keys.size


@pytest.mark.parametrize("step_gap", [1, 10**6])  # a dense grid, then sorted cells
@pytest.mark.parametrize("low_rank", [0, -2])
def test_baseline_loss_like_a_dict(step_gap: int, low_rank: int) -> None:
    rng = np.random.default_rng(step_gap % 89)
    n = 400
    step = rng.integers(1, 80, n) * step_gap
    rank = rng.integers(low_rank, 5, n)
    loss = rng.random(n)
    pairs: dict[tuple[int, int], float] = {}
    for s, r, v in zip(step, rank, loss, strict=True):
        pairs[(int(s), int(r))] = float(v)
    keep = np.array(
        [pairs[(int(s), int(r))] == v for s, r, v in zip(step, rank, loss, strict=True)]
    )
    lookup = LossLookup.build(step[keep], rank[keep].astype(np.int32), loss[keep])
    assert (lookup.grid is not None) == (step_gap == 1)
    q_step = rng.integers(0, 90, 300) * step_gap
    q_rank = rng.integers(-3, 7, 300).astype(np.int32)
    got, known = lookup.lookup(q_step, q_rank)
    want = [pairs.get((int(s), int(r))) for s, r in zip(q_step, q_rank, strict=True)]
    assert known.tolist() == [w is not None for w in want]
    assert [float(x) for x, k in zip(got, known, strict=True) if k] == [
        w for w in want if w is not None
    ]
    empty = LossLookup.build(step[:0], rank[:0], loss[:0])
    assert not empty.lookup(q_step, q_rank)[1].any()


@pytest.mark.parametrize("max_ranges", [1, 3])
def test_step_covers_are_the_union_of_the_steps_up_to_each(max_ranges: int) -> None:
    """Per step one block where its ranges form one (the usual case: kept as two numbers),
    the ranges as they were for any other step: the union up to any step is exact."""
    rng = np.random.default_rng(max_ranges)
    rows = []
    for step in range(1, 40):
        base = step * 100
        for rank in rng.permutation(4):  # ranks finish in any order
            if step % 7 == 0 and rank == 1:
                continue  # a gap inside this step
            lo = base + 10 * int(rank) - (5 if step % 11 == 0 and rank == 2 else 0)  # overlap
            halves = [[lo, lo + 5], [lo + 5, lo + 10]] + ([[lo, lo + 5]] if step == 13 else [])
            rows.append((step, [[lo, lo + 10]] if max_ranges == 1 else halves))
    st = StepTable.from_columns(
        np.arange(len(rows), dtype=float),
        np.zeros(len(rows)),
        np.zeros(len(rows)),
        [s for s, _r in rows],
        np.zeros(len(rows)),
        [r for _s, r in rows],
    )
    covers = StepCovers.build(st)
    assert covers.odd_step.size and covers.steps.size  # both kinds are there
    for last in (0, 1, 6, 7, 11, 25, 39, 99, None):
        ids = {
            i
            for s, ranges in rows
            if last is None or s <= last
            for a, b in ranges
            for i in range(a, b)
        }
        ms, me = covers.until(last)
        assert {i for a, b in zip(ms, me, strict=True) for i in range(a, b)} == ids, last
        assert (ms[1:] > me[:-1]).all()


def test_mean_loss_by_step_dense_or_not_is_the_same() -> None:
    rng = np.random.default_rng(4)
    step = rng.integers(1, 50, 500)
    loss = rng.random(500)
    loss[::17] = np.nan  # not reported
    dense_s, dense_m = mean_loss_by_step(step, loss)
    sparse_s, sparse_m = mean_loss_by_step(step * 10**9, loss)
    assert (sparse_s == dense_s * 10**9).all() and np.array_equal(dense_m, sparse_m)
    ok = ~np.isnan(loss)
    want = {int(s): float(np.mean(loss[ok][step[ok] == s])) for s in np.unique(step[ok])}
    assert dict(zip(dense_s.tolist(), dense_m.tolist(), strict=True)) == pytest.approx(want)


def test_streaming_load_equals_the_records_it_reads(tmp_path: Path) -> None:
    rnd = random.Random(5)
    for f in range(3):
        lines = []
        for i in range(400):
            r = rnd.random()
            pid = 100 + f + 10 * (i // 150)
            if r < 0.75:
                n = rnd.randint(0, 3)
                samples = [[i * 5 + k, i * 5 + k + rnd.randint(0, 4)] for k in range(n)]
                rec = {
                    "src": "probe",
                    "task": "t",
                    "rank": f,
                    "pid": pid,
                    "ts": 1.0,
                    "mono": rnd.random() * 100,
                    "kind": "step",
                    "step": i,
                    "loss": rnd.random(),
                    "samples": samples,
                }
                lines.append(json.dumps(rec))
            elif r < 0.85:
                lines.append(
                    json.dumps(
                        {
                            "src": "probe",
                            "task": "t",
                            "rank": f,
                            "pid": pid,
                            "mono": rnd.random() * 100,
                            "kind": "run_start",
                        }
                    )
                )
            elif r < 0.9:
                lines.append("not json {")
            elif r < 0.93:
                lines.append(" " + json.dumps({"src": "sampler", "kind": "proc_seen", "mono": 3.0}))
            elif r < 0.95:
                lines.append(json.dumps([1, 2]))
            elif r < 0.97:
                lines.append(json.dumps({"a": 1}) + json.dumps({"b": 2}))
            else:
                lines.append(
                    json.dumps({"src": "harness", "kind": "x", "mono": 1.5, "n": "é"}) + "  "
                )
        torn = '{"src": "probe", "kind": "step", "mo'
        (tmp_path / f"p{f}.jsonl").write_text("\n".join(lines) + "\n" + torn)
    loaded = Timeline.load(tmp_path)
    paths = sorted(tmp_path.glob("*.jsonl"))
    records = [r for p in paths for r in read_jsonl(p)]
    plain = Timeline.from_records(records)
    total_lines = sum(len(p.read_bytes().splitlines()) for p in paths)
    assert loaded.torn_lines == total_lines - len(records) > 3
    for col in ("mono", "rank", "pid", "step", "loss", "rng_off", "rng_start", "rng_end", "inc"):
        a, b = getattr(loaded.steps, col), getattr(plain.steps, col)
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), col
    assert [e.to_json() for e in loaded.events] == [e.to_json() for e in plain.events]
    assert [i.members for i in loaded.incarnations] == [i.members for i in plain.incarnations]
