"""faultdrill's benchmarks, in one command: ``python bench/run.py``.

Measures, in one run on this machine (see ``bench/README.md``):

(a) the probe's cost per training step and rank (``Probe.step`` with 64 sample ids,
    written to a real file), and the same as a fraction of a real reference-workload step
    measured in the same run;
(b) every registered check over a synthetic 1,024-rank x 10,000-step drill (~10 M step
    events) and over 64 ... 512 ranks to show how time and memory grow, each size in a
    fresh process; and, separately, what loading JSON-lines events costs per million.

Prints a table and writes ``bench/results.json``. ``--quick`` runs tiny sizes (seconds; the
smoke test uses it). Run heavy benchmarks alone: they use both cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(ROOT))

from bench.load_cost import load_cost  # noqa: E402
from bench.probe_cost import probe_step_cost, reference_step_time  # noqa: E402

PROBE_TARGET_US = 100.0
CHECKS_TARGET_S = 30.0
CHECKS_TARGET_BYTES = 2 * 1024**3
GIB = 1024**3


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


def checks_at(ranks: int, steps: int) -> dict[str, Any]:
    """One size of the checks benchmark, in a fresh process (its own peak RSS)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.checks_scale", f"--ranks={ranks}", f"--steps={steps}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"checks at {ranks} ranks failed: {proc.stderr.strip()[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    out: dict[str, Any] = {
        "command": " ".join(["python", "bench/run.py", *args.argv]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
    }
    # (a) probe, then the reference step it is compared with
    probe = probe_step_cost(args.probe_iterations, args.probe_repeats)
    steps = [reference_step_time(args.lm_steps, gb, args.lm_warmup) for gb in args.lm_batches]
    typical = probe["shapes"]["range(64)"]["median_us"]
    worst = max(v["median_us"] for v in probe["shapes"].values())
    for s in steps:
        s["probe_share"] = round(typical / s["median_step_us"], 5)
        s["probe_share_worst_case"] = round(worst / s["median_step_us"], 5)
    out["probe"] = {
        **probe,
        "reference_steps": steps,
        "target_us": PROBE_TARGET_US,
        "meets_target": worst <= PROBE_TARGET_US,
    }
    # (b) checks at scale, one fresh process per size
    sizes = [checks_at(r, args.steps) for r in args.ranks]
    first = sizes[0]
    for s in sizes:
        s["s_per_million_step_events"] = round(s["judge_s"] / s["step_events"] * 1e6, 3)
        s["growth_events"] = round(s["step_events"] / first["step_events"], 2)
        s["growth_time"] = round(s["judge_s"] / first["judge_s"], 2) if first["judge_s"] else None
    biggest = sizes[-1]
    out["checks"] = {
        "sizes": sizes,
        "target_s": CHECKS_TARGET_S,
        "target_peak_rss_bytes": CHECKS_TARGET_BYTES,
        "meets_target": biggest["judge_s"] <= CHECKS_TARGET_S
        and biggest["peak_rss_bytes"] <= CHECKS_TARGET_BYTES,
    }
    # loading JSON lines, separately
    loads = [load_cost(args.load_ranks, n // args.load_ranks) for n in args.load_events]
    out["load"] = {"sizes": loads}
    out["total_wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def table(res: dict[str, Any]) -> str:
    m = res["machine"]
    lines = [
        f"machine: {m['cpus']} cpus ({m['cpu_model']}), {m['memory_bytes'] / GIB:.1f} GiB, "
        f"Python {m['python']}, numpy {m['numpy']}, torch {m['torch']}",
        "",
        "(a) probe cost per step and rank (Probe.step, 64 sample ids, real file)",
        f"  {'ids given as':34s} {'median us':>10s} {'best us':>9s} {'line bytes':>11s}",
    ]
    probe = res["probe"]
    for shape, v in probe["shapes"].items():
        lines.append(
            f"  {shape:34s} {v['median_us']:10.2f} {v['best_us']:9.2f} {v['line_bytes']:11d}"
        )
    lines.append(f"  {'probe disabled (no events dir)':34s} {probe['disabled_us']:10.3f}")
    for s in probe["reference_steps"]:
        lines.append(
            f"  reference step (lm, global_batch {s['global_batch']}, world 1): "
            f"{s['median_step_us'] / 1000:.2f} ms median; probe = "
            f"{100 * s['probe_share']:.3f} % of it (worst case "
            f"{100 * s['probe_share_worst_case']:.3f} %)"
        )
    lines.append(
        f"  target <= {probe['target_us']:.0f} us: {'met' if probe['meets_target'] else 'MISSED'}"
    )
    lines += [
        "",
        "(b) every registered check over a synthetic kill-and-resume drill (fresh process per size)",
        f"  {'ranks':>5s} {'steps':>6s} {'step events':>12s} {'derive s':>9s} {'checks s':>9s} "
        f"{'total s':>8s} {'s/M ev':>7s} {'peak RSS':>9s} {'x events':>8s} {'x time':>7s}",
    ]
    for s in res["checks"]["sizes"]:
        lines.append(
            f"  {s['ranks']:5d} {s['steps']:6d} {s['step_events']:12,d} {s['derive_s']:9.2f} "
            f"{s['checks_s'] + s['analysis_s']:9.2f} {s['judge_s']:8.2f} "
            f"{s['s_per_million_step_events']:7.3f} {s['peak_rss_bytes'] / GIB:7.2f}Gi "
            f"{s['growth_events']:8.2f} {s['growth_time'] or 0:7.2f}"
        )
    c = res["checks"]
    lines.append(
        f"  target at the largest size: <= {c['target_s']:.0f} s and <= "
        f"{c['target_peak_rss_bytes'] / GIB:.0f} GiB: {'met' if c['meets_target'] else 'MISSED'}"
    )
    lines += ["", "loading JSON-lines events (Timeline.load, fresh process; not in the target)"]
    for ld in res["load"]["sizes"]:
        lines.append(
            f"  {ld['step_events']:,d} step events ({ld['file_bytes'] / 1e6:.0f} MB): "
            f"{ld['load_s']:.2f} s = {ld['s_per_million_events']:.2f} s per million events; "
            f"peak RSS {ld['peak_rss_bytes'] / GIB:.2f} GiB"
            + (
                f" (+ {ld['readers']} readers of {ld['reader_peak_rss_bytes'] / GIB:.2f} GiB"
                " peak each at most)"
                if ld.get("readers", 1) > 1
                else ""
            )
        )
    lines.append(f"\ntotal {res['total_wall_s']} s")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (seconds)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json")
    ap.add_argument("--ranks", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--steps", type=int)
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.quick:
        defaults: dict[str, Any] = {
            "ranks": [4, 8],
            "steps": 40,
            "probe_iterations": 300,
            "probe_repeats": 2,
            "lm_steps": 12,
            "lm_warmup": 2,
            "lm_batches": [8],
            "load_ranks": 2,
            "load_events": [200],
        }
    else:
        defaults = {
            "ranks": [64, 128, 256, 512, 1024],
            "steps": 10_000,
            "probe_iterations": 20_000,
            "probe_repeats": 5,
            "lm_steps": 300,
            "lm_warmup": 20,
            "lm_batches": [8, 64],
            "load_ranks": 16,
            "load_events": [250_000, 1_000_000],
        }
    for key, value in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    res = run(args)
    print(table(res))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {args.out}")
    ok = res["probe"]["meets_target"] and res["checks"]["meets_target"]
    return 0 if ok or args.quick else 1


if __name__ == "__main__":
    raise SystemExit(main())
