"""faultdrill's benchmarks, in one command: ``python bench/run.py``.

Measures, in one run on this machine (see ``bench/README.md``), each against its target:

(a) the probe's cost per training step and rank (``Probe.step`` with 64 sample ids,
    written to a real file), and the same as a fraction of a real reference-workload step
    measured in the same run;
(b) timing precision: the error of the injection, process exit, old-replica-stopped and
    first-new-step times on the timeline against known ground truth (``bench.precision``);
(c) the harness's own time per drill item beyond the job's, by phase, on a real drill of
    the local platform (``bench.overhead``);
(d) loading a run from its columnar step store and every registered check, from 256 to
    16,384 ranks x 10,000 steps (164 M step events, plus a 164 M-event baseline), each size
    written by one fresh process and measured by another (``bench.checks_scale``), the
    sizes below 16,384 ranks against 4 GiB, 16,384 against the fleet's 8 GiB; and what
    loading JSON lines and writing the store cost per million events;
(e) the per-rank questions of a 16,384-rank x 10,000-step drill (164 M step events) out of
    core, by each candidate engine in a fresh process (``bench.engines``): the measured
    comparison that chose the engine for fleet-sized drills.
(f) the demo's wall time (``faultdrill demo`` in a fresh process, every item) and where
    each item's time goes, per phase (``bench.demo_time``).

Prints a table with every target, its measured value, the previous run's value (from
``--previous``, by default the results file this run replaces) and the ratio now /
previous; writes ``bench/results.json`` and, after a full run there, ``bench/README.md``
(``bench.readme``; ``--readme`` writes the page alone from the results file); exits 1 if
a target is missed. ``--quick`` runs every part at tiny sizes (the overhead: the baseline
alone, 12 steps; the demo: its baseline and ``kill-worker``, no controls) and judges
nothing; ``--no-drill`` leaves out the parts that run real drills (the smoke test runs
``--quick --no-drill``; the overhead's tiny size is a drill test of its own). Run heavy benchmarks alone: they use both cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(ROOT))

from bench import engines  # noqa: E402
from bench.load_cost import load_cost  # noqa: E402
from bench.probe_cost import probe_step_cost, reference_step_time  # noqa: E402
from bench.readme import render  # noqa: E402
from bench.targets import (  # noqa: E402
    ENGINE_TARGET_BYTES,
    EVENTS_RATE_TARGET,
    FLEET_RANKS,
    PROBE_TARGET_US,
    SCALE_TARGET_BYTES,
    SCALE_TARGET_S,
    compare,
    scale_target_bytes,
    targets,
)

__all__ = ["main", "overhead", "targets"]

GIB = 1024**3
RESULTS = ROOT / "bench" / "results.json"
README = ROOT / "bench" / "README.md"


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    mem = 0
    with contextlib.suppress(ValueError, OSError):
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory_bytes": mem,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": version("numpy"),
        "torch": version("torch"),
        "faultdrill": version("faultdrill"),
    }


def _module(args: list[str], timeout: int = 3600) -> dict[str, Any]:
    """Run ``python -m <args>`` in a fresh process; its JSON output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr.strip()[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def checks_at(ranks: int, steps: int) -> dict[str, Any]:
    """One size: the drill written by one fresh process, loaded and judged by another (so
    the peak RSS is that of loading and judging alone)."""
    tmp = Path(tempfile.mkdtemp(prefix="faultdrill-bench-scale-"))
    try:
        size = ["--ranks", str(ranks), "--steps", str(steps)]
        written = _module(["bench.checks_scale", *size, "--write", str(tmp / "run")])
        result = _module(["bench.checks_scale", *size, "--store", str(tmp / "run")])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {**result, "written": written}


def overhead(only: str, steps: int | None) -> dict[str, Any]:
    """``bench.overhead`` in a fresh process: the baseline and the scenarios in ``only``
    (comma-separated ids, empty: none), ``steps`` long (None: the demo plan's)."""
    size = [] if steps is None else [f"--steps={steps}"]
    return _module(["bench.overhead", f"--only={only}", *size], timeout=1800)


def demo_time(extra: list[str]) -> dict[str, Any]:
    """``bench.demo_time`` in a fresh process: ``faultdrill demo`` with ``extra`` arguments
    (none: the whole demo), its wall time and each item's split."""
    return _module(["bench.demo_time", *extra], timeout=1800)


def run(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    out: dict[str, Any] = {
        "command": " ".join(["python", "bench/run.py", *args.argv]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "load_average_at_start": os.getloadavg(),
    }
    # (a) probe, then the reference step it is compared with
    probe = probe_step_cost(args.probe_iterations, args.probe_repeats)
    steps = [reference_step_time(args.lm_steps, gb, args.lm_warmup) for gb in args.lm_batches]
    typical = probe["shapes"]["range(64)"]["median_cpu_us"]
    worst = max(v["median_cpu_us"] for v in probe["shapes"].values())
    for s in steps:
        s["probe_share"] = round(typical / s["median_step_us"], 5)
        s["probe_share_worst_case"] = round(worst / s["median_step_us"], 5)
    out["probe"] = {
        **probe,
        "reference_steps": steps,
        "target_us": PROBE_TARGET_US,
        "meets_target": worst <= PROBE_TARGET_US,
    }
    # (b) timing precision against ground truth
    out["precision"] = _module(["bench.precision", f"--rounds={args.precision_rounds}"])
    # (c) the harness's own time on a real drill
    out["overhead"] = None if args.no_drill else overhead(args.overhead_only, args.overhead_steps)
    # (d) load + checks at scale, one pair of fresh processes per size
    sizes = [checks_at(r, args.steps) for r in args.ranks]
    first = sizes[0]
    for s in sizes:
        s["cpu_s_per_million_step_events"] = round(s["judge_cpu_s"] / s["step_events"] * 1e6, 3)
        s["growth_events"] = round(s["step_events"] / first["step_events"], 2)
        s["growth_cpu"] = (
            round(s["judge_cpu_s"] / first["judge_cpu_s"], 2) if first["judge_cpu_s"] else None
        )
    below = [s for s in sizes if s["ranks"] < FLEET_RANKS]
    judged = [*below[-1:], *(s for s in sizes if s["ranks"] >= FLEET_RANKS)]
    out["scale"] = {
        "sizes": sizes,
        "target_s": SCALE_TARGET_S,
        "target_peak_rss_bytes": SCALE_TARGET_BYTES,
        # judged on CPU seconds: the work is one process, one thread; on this shared machine
        # the wall clock also measures everyone else's load (both are reported)
        "target_peak_rss_bytes_fleet": ENGINE_TARGET_BYTES,
        # the largest size below a fleet's and every fleet size, each against its target
        "meets_target": all(
            s["judge_cpu_s"] <= SCALE_TARGET_S
            and s["peak_rss_bytes"] <= scale_target_bytes(s["ranks"])
            for s in judged
        ),
    }
    # (e) the out-of-core engine for fleet-sized drills, chosen by measurement
    out["engines"] = {
        **engines.compare(args.engine_ranks, args.engine_steps, block=args.engine_block),
        "chosen": engines.CHOSEN,
        "target_s": SCALE_TARGET_S,
        "target_peak_rss_bytes": ENGINE_TARGET_BYTES,
    }
    # loading JSON lines, and the store's cost, separately
    out["load"] = {
        "sizes": [load_cost(args.load_ranks, n // args.load_ranks) for n in args.load_events]
    }
    # (f) the demo's wall time and its split, last: it keeps both cores busy for minutes
    out["demo"] = None if args.no_drill else demo_time(args.demo_args)
    out["load_average_at_end"] = os.getloadavg()
    out["total_wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def engines_table(eng: dict[str, Any] | None) -> list[str]:
    """(e): each engine's wall, CPU and peak RSS on the same data, or why it gave none."""
    if eng is None:
        return ["", "(e) out-of-core engines: not in this results file"]
    lines = [
        "",
        f"(e) per-rank questions out of core, {eng['ranks']:,} ranks x {eng['steps']:,} steps "
        f"({eng['rows'] / 1e6:.1f} M step events; written in {eng['write_s']:.0f} s), "
        "fresh process per engine",
        f"  {'engine':16s} {'wall s':>7s} {'CPU s':>6s} {'peak RSS':>9s}  answer",
    ]
    for r in eng["engines"]:
        if "error" in r:
            lines.append(f"  {r['engine']:16s} {'-':>7s} {'-':>6s} {'-':>9s}  {r['error']}")
            continue
        lines.append(
            f"  {r['engine']:16s} {r['wall_s']:7.2f} {r['cpu_s']:6.2f} "
            f"{r['peak_rss_bytes'] / GIB:7.2f}Gi  stragglers {r['stragglers']}, "
            f"{r['bad_advances']} bad advance(s), digest {r['digest']}"
        )
    return lines


def table(res: dict[str, Any]) -> str:
    m = res["machine"]
    load = res["load_average_at_start"]
    lines = [
        f"machine: {m['cpus']} cpus ({m['cpu_model']}), {m['memory_bytes'] / GIB:.1f} GiB, "
        f"Python {m['python']}, numpy {m['numpy']}, torch {m['torch']}; load average at "
        f"start {load[0]:.1f} (others' work on a shared machine inflates wall times)",
        "",
        "(a) probe cost per step and rank (Probe.step, 64 sample ids, real file)",
        f"  {'ids given as':34s} {'median us':>10s} {'best us':>9s} {'CPU us':>8s} "
        f"{'line bytes':>11s}",
    ]
    probe = res["probe"]
    for shape, v in probe["shapes"].items():
        lines.append(
            f"  {shape:34s} {v['median_us']:10.2f} {v['best_us']:9.2f} "
            f"{v['median_cpu_us']:8.2f} {v['line_bytes']:11d}"
        )
    lines.append(f"  {'probe disabled (no events dir)':34s} {probe['disabled_us']:10.3f}")
    for s in probe["reference_steps"]:
        lines.append(
            f"  reference step (lm, global_batch {s['global_batch']}, world 1): "
            f"{s['median_step_us'] / 1000:.2f} ms median; probe (CPU) = "
            f"{100 * s['probe_share']:.3f} % of it (worst case "
            f"{100 * s['probe_share_worst_case']:.3f} %)"
        )
    prec = res["precision"]
    lines += [
        "",
        f"(b) timing precision, timeline time minus ground truth ({prec['rounds']} rounds; "
        f"exit clock: {', '.join(prec['exit_clocks'])})",
        f"  {'time':44s} {'median ms':>10s} {'max ms':>9s}",
    ]
    for key, v in prec["times"].items():
        lines.append(f"  {key.replace('_', ' '):44s} {v['median_ms']:10.3f} {v['max_ms']:9.3f}")
    lines += ["", "(c) harness overhead per item on a real drill (local platform)"]
    over = res["overhead"]
    if over is None:
        lines.append("  not measured: --no-drill (a real drill takes a minute or more)")
    else:
        names = list(next(iter(over["items"].values()))["phases_s"])
        lines.append(
            f"  {'item':12s} {'job s':>7s} {'overhead s':>10s}  "
            + " ".join(f"{n:>12s}" for n in names)
        )
        for item, v in over["items"].items():
            lines.append(
                f"  {item:12s} {v['job_s']:7.2f} {v['overhead_s']:10.2f}  "
                + " ".join(f"{v['phases_s'][n]:12.3f}" for n in names)
            )
    lines += [
        "",
        "(d) load from the columnar store + every registered check (fresh process per size)",
        f"  {'ranks':>5s} {'steps':>6s} {'step events':>12s} {'load s':>7s} {'checks s':>8s} "
        f"{'wall s':>7s} {'CPU s':>6s} {'CPU s/M':>7s} {'peak RSS':>9s} {'x events':>8s} "
        f"{'x CPU':>6s}",
    ]
    for s in res["scale"]["sizes"]:
        lines.append(
            f"  {s['ranks']:5d} {s['steps']:6d} {s['step_events']:12,d} {s['load_s']:7.2f} "
            f"{s['checks_s'] + s['analysis_s']:8.2f} {s['judge_s']:7.2f} {s['judge_cpu_s']:6.2f} "
            f"{s['cpu_s_per_million_step_events']:7.3f} {s['peak_rss_bytes'] / GIB:7.2f}Gi "
            f"{s['growth_events']:8.2f} {s['growth_cpu'] or 0:6.2f}"
        )
    lines += engines_table(res.get("engines"))
    lines += ["", "loading JSON lines, and writing the step store (fresh process; not targets)"]
    for ld in res["load"]["sizes"]:
        lines.append(
            f"  {ld['step_events']:,d} step events ({ld['file_bytes'] / 1e6:.0f} MB of JSON): "
            f"JSON {ld['s_per_million_events']:.2f} s/M events (peak RSS "
            f"{ld['peak_rss_bytes'] / GIB:.2f} GiB); writing the store "
            f"{ld['store_write_s_per_million_events']:.2f} s/M (by the harness, while the job "
            f"runs); loading from it {ld['store_load_s_per_million_events']:.3f} s/M"
        )
        lines += _rate_lines(ld)
    lines += ["", *demo_table(res.get("demo"))]
    lines.append(f"\ntotal {res['total_wall_s']} s")
    return "\n".join(lines)


def _rate_lines(ld: dict[str, Any]) -> list[str]:
    """Step events per CPU second of one core, every way of loading them side by side."""
    if "rates" not in ld:
        return []
    lines = [f"    events/s/core (target >= {EVENTS_RATE_TARGET:,d}):"]
    for what, rates in (("load", ld["rates"]["load"]), ("store write", ld["rates"]["store_write"])):
        for name, rate in rates.items():
            shown = "not installed" if rate is None else f"{rate:>12,.0f}"
            lines.append(f"      {what:11s} {name:32s} {shown}")
    return lines


def demo_table(demo: dict[str, Any] | None) -> list[str]:
    """(f): the demo's wall time, each item's split and the sum per phase."""
    if demo is None:
        return ["(f) the demo: not measured (--no-drill, or a results file from before it)"]
    names = list(demo["per_phase_s"])
    short = [n.replace("noticing end", "noticing")[:9] for n in names]
    lines = [
        f"(f) {demo['command']}: {demo['wall_s']} s wall (start-up {demo['startup_s']} s, "
        f"items {demo['items_s']} s, reports and bundle {demo['finish_s']} s); "
        f"{demo['summary'] or 'no summary line'}",
        f"  {'item':32s} {'verdict':10s} {'wall s':>7s} " + " ".join(f"{n:>9s}" for n in short),
    ]
    for item, v in demo["items"].items():
        lines.append(
            f"  {item:32s} {v['verdict']:10s} {v['wall_s']:7.2f} "
            + " ".join(f"{v['phases_s'][n]:9.2f}" for n in names)
        )
    lines.append(
        f"  {'all items':32s} {'':10s} {demo['items_s']:7.1f} "
        + " ".join(f"{demo['per_phase_s'][n]:9.1f}" for n in names)
    )
    return lines


def targets_table(res: dict[str, Any], previous: dict[str, Any] | None, source: str) -> str:
    """Every target: its value now, the previous run's (``source``) and now / previous."""
    lines = [
        f"targets (previous: {source})",
        f"  {'what':62s} {'target':>10s}  {'measured':48s} {'':6s} {'previous':>12s} "
        f"{'now/prev':>8s}",
    ]
    for c in compare(res, previous):
        t = c.now
        verdict = "-" if t.met is None else ("met" if t.met else "MISSED")
        prev = "-" if c.previous is None else f"{c.previous:.4g} {t.unit}"
        ratio = "-" if c.ratio is None else f"{c.ratio:.2f}"
        lines.append(
            f"  {t.what:62s} {t.target:>10s}  {t.measured:48s} {verdict:6s} {prev:>12s} {ratio:>8s}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a minute)")
    ap.add_argument("--no-drill", action="store_true", help="leave out the overhead (a real drill)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="the results file to write")
    ap.add_argument(
        "--previous",
        type=Path,
        default=RESULTS,
        help="the results to compare with (default: bench/results.json, read before --out "
        "is written)",
    )
    ap.add_argument(
        "--readme",
        action="store_true",
        help="only write bench/README.md from the results file (--out) and exit",
    )
    ap.add_argument("--ranks", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--steps", type=int)
    ap.add_argument("--precision-rounds", type=int)
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.quick:
        defaults: dict[str, Any] = {
            "ranks": [4, 8],
            "steps": 40,
            "precision_rounds": 1,
            "probe_iterations": 300,
            "probe_repeats": 2,
            "lm_steps": 12,
            "lm_warmup": 2,
            "lm_batches": [8],
            "load_ranks": 2,
            "load_events": [200],
            "overhead_only": "",
            "overhead_steps": 12,
            "engine_ranks": 8,
            "engine_steps": 40,
            "engine_block": 4,
            "demo_args": ["--only=kill-worker", "--no-controls"],
        }
    else:
        defaults = {
            "ranks": [256, 1024, 4096, 16_384],
            "steps": 10_000,
            "precision_rounds": 10,
            "probe_iterations": 20_000,
            "probe_repeats": 5,
            "lm_steps": 300,
            "lm_warmup": 20,
            "lm_batches": [8, 64],
            "load_ranks": 16,
            "load_events": [250_000, 1_000_000],
            "overhead_only": "kill-worker",
            "overhead_steps": None,
            "engine_ranks": 16_384,
            "engine_steps": 10_000,
            "engine_block": 256,
            "demo_args": [],
        }
    for key, value in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return args


def read_results(path: Path) -> tuple[dict[str, Any] | None, str]:
    """A results file and how to name it; None (and why, in the name) when it is missing
    or not a results file this version can read."""
    try:
        res = json.loads(path.read_text(encoding="utf-8"))
        targets(res)
    except FileNotFoundError:
        return None, f"none ({path} does not exist)"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"none ({path} is not a results file: {type(exc).__name__}: {exc})"
    return res, f"{path} of {res.get('started', '?')}"


def write_readme(results: Path) -> int:
    """``bench/README.md`` from ``results``; 1 with a message when it cannot be read."""
    res, name = read_results(results)
    if res is None:
        print(f"cannot write {README}: results file {name}", file=sys.stderr)
        return 1
    README.write_text(render(res), encoding="utf-8")
    print(f"wrote {README} from {name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.readme:
        return write_readme(args.out)
    previous, source = read_results(args.previous)  # before --out, often the same, is written
    res = run(args)
    print(table(res))
    print()
    print(targets_table(res, previous, source))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {args.out}")
    if not args.quick and args.out.resolve() == RESULTS.resolve():
        write_readme(RESULTS)
    ok = all(t.met is not False for t in targets(res))
    return 0 if ok or args.quick else 1


if __name__ == "__main__":
    raise SystemExit(main())
