"""faultdrill's benchmark targets, and each run's figures against them and against the
previous run's (``bench/run.py`` prints them; ``bench/readme.py`` writes them)."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "DEMO_TARGET_S",
    "ENGINE_TARGET_BYTES",
    "EVENTS_RATE_TARGET",
    "FLEET_RANKS",
    "JSON_READER",
    "JSON_READER_BEFORE",
    "OVERHEAD_TARGET_S",
    "PRECISION_TARGET_MS",
    "PROBE_TARGET_US",
    "SCALE_TARGET_BYTES",
    "SCALE_TARGET_S",
    "Compared",
    "Target",
    "compare",
    "scale_target_bytes",
    "targets",
]

PROBE_TARGET_US = 100.0
PRECISION_TARGET_MS = 10.0
OVERHEAD_TARGET_S = 2.0
SCALE_TARGET_S = 60.0
SCALE_TARGET_BYTES = 4 * 1024**3
#: issue 24: a 16,384-rank drill on one machine in <= 60 s and <= 8 GiB
ENGINE_TARGET_BYTES = 8 * 1024**3
#: Step events per CPU second of one core, loading and writing the step store.
EVENTS_RATE_TARGET = 1_000_000
#: The name of the JSON reader's load rate in one process (``Timeline.load``, one reader)
#: in a results file's ``rates`` (bench/load_cost.py), and the name before its fast path.
JSON_READER = "json lines: faultdrill's reader (one process)"
JSON_READER_BEFORE = "json (faultdrill regex reader)"
DEMO_TARGET_S = 240.0
#: The scale benchmark's sizes of this many ranks or more are held to the fleet target
#: (:data:`ENGINE_TARGET_BYTES`), the smaller ones to :data:`SCALE_TARGET_BYTES`.
FLEET_RANKS = 16_384
GIB = 1024**3


class Target(NamedTuple):
    """One target and what a run measured for it."""

    #: What is measured, at which size: two runs' rows with the same ``what`` compare.
    what: str
    target: str
    measured: str
    #: None: not measured in this run.
    met: bool | None
    #: The number judged against the target (in ``unit``); None: not measured.
    value: float | None
    unit: str


class Compared(NamedTuple):
    """A target of this run beside the same row of the previous run."""

    now: Target
    #: The previous run's value of the same row; None: not measured then, or no such row.
    previous: float | None
    #: now / previous; None where either is missing or previous is 0.
    ratio: float | None


def targets(res: dict[str, Any]) -> list[Target]:
    """Every target with what ``res`` (a results file's content) measured for it."""
    probe, prec, over, scale = res["probe"], res["precision"], res["overhead"], res["scale"]
    worst = max(probe["shapes"].values(), key=lambda v: v["median_cpu_us"])
    rows = [
        Target(
            "probe: Probe.step, 64 ids, worst shape (CPU)",
            f"<= {PROBE_TARGET_US:.0f} us",
            f"{worst['median_cpu_us']:.1f} us CPU ({worst['median_us']:.1f} us wall here)",
            probe["meets_target"],
            worst["median_cpu_us"],
            "us",
        )
    ]
    for key in prec["targeted"]:
        t = prec["times"][key]
        rows.append(
            Target(
                f"precision: {key.replace('_', ' ')} (max of {prec['rounds']})",
                f"<= {PRECISION_TARGET_MS:.0f} ms",
                f"{t['max_ms']:.2f} ms (median {t['median_ms']:.2f})",
                abs(t["max_ms"]) <= PRECISION_TARGET_MS,
                t["max_ms"],
                "ms",
            )
        )
    target_s = f"<= {OVERHEAD_TARGET_S:.0f} s"
    if over is None:
        rows.append(Target("harness overhead per item", target_s, "-", None, None, "s"))
    else:
        for item, v in over["items"].items():
            rows.append(
                Target(
                    f"harness overhead: {item}",
                    target_s,
                    f"{v['overhead_s']:.2f} s (job {v['job_s']:.1f} s, {v['verdict']})",
                    v["overhead_s"] <= OVERHEAD_TARGET_S and v["verdict"] == "pass",
                    v["overhead_s"],
                    "s",
                )
            )
    sizes = scale["sizes"]
    fleet = [s for s in sizes if s["ranks"] >= FLEET_RANKS]
    below = [s for s in sizes if s["ranks"] < FLEET_RANKS]
    if below:  # the largest size under a fleet's, against the in-memory target
        rows += _judge_rows(below[-1], SCALE_TARGET_BYTES)
    return [
        *rows,
        *_rate_rows(res),
        *_engine_rows(res.get("engines"), fleet[-1] if fleet else None),
        _demo_row(res.get("demo")),
    ]


def scale_target_bytes(ranks: int) -> int:
    """The peak RSS a size of the scale benchmark is held to."""
    return ENGINE_TARGET_BYTES if ranks >= FLEET_RANKS else SCALE_TARGET_BYTES


def _judge_rows(size: dict[str, Any], target_bytes: int) -> list[Target]:
    """Loading from the store and every check at one size: CPU seconds (judged: the work
    is one process; the wall clock here also measures everyone else's load, so it is shown
    beside) and peak RSS."""
    what = f"{size['ranks']:,} x {size['steps']:,} ({size['step_events'] / 1e6:.1f} M events)"
    return [
        Target(
            f"load + every check, {what}: CPU",
            f"<= {SCALE_TARGET_S:.0f} s",
            f"{size['judge_cpu_s']:.1f} s CPU ({size['judge_s']:.1f} s wall here)",
            size["judge_cpu_s"] <= SCALE_TARGET_S,
            size["judge_cpu_s"],
            "s",
        ),
        Target(
            f"load + every check, {what}: peak RSS",
            f"<= {target_bytes / GIB:.0f} GiB",
            f"{size['peak_rss_bytes'] / GIB:.2f} GiB",
            size["peak_rss_bytes"] <= target_bytes,
            size["peak_rss_bytes"] / GIB,
            "GiB",
        ),
    ]


def _engine_rows(eng: dict[str, Any] | None, fleet: dict[str, Any] | None) -> list[Target]:
    """The chosen out-of-core engine against the fleet-scale target (its rivals' figures
    are in the table, not targets), and the judge itself at a fleet's size (``fleet``: the
    scale benchmark's largest size of :data:`FLEET_RANKS` ranks or more; None: not run)."""
    rows = []
    if eng is not None:
        size = f"{eng['ranks']:,} x {eng['steps']:,} ({eng['rows'] / 1e6:.1f} M events)"
        target = f"<= {SCALE_TARGET_S:.0f} s, <= {ENGINE_TARGET_BYTES / GIB:.0f} GiB"
        chosen = next(r for r in eng["engines"] if r["engine"] == eng["chosen"])
        rss = chosen["peak_rss_bytes"] / GIB
        rows.append(
            Target(
                f"per-rank questions out of core ({eng['chosen']}), {size}",
                target,
                f"{chosen['wall_s']:.1f} s wall, {rss:.2f} GiB",
                chosen["wall_s"] <= SCALE_TARGET_S
                and chosen["peak_rss_bytes"] <= ENGINE_TARGET_BYTES,
                chosen["wall_s"],
                "s",
            )
        )
    if fleet is None:  # shown as not measured, never left out
        unrun = "- (not run: no size of --ranks is a fleet's)"
        what = f"load + every check, {FLEET_RANKS:,} ranks"
        rows += [
            Target(f"{what}: CPU", f"<= {SCALE_TARGET_S:.0f} s", unrun, None, None, "s"),
            Target(
                f"{what}: peak RSS",
                f"<= {ENGINE_TARGET_BYTES / GIB:.0f} GiB",
                unrun,
                None,
                None,
                "GiB",
            ),
        ]
    else:
        rows += _judge_rows(fleet, ENGINE_TARGET_BYTES)
    return rows


def _rate_rows(res: dict[str, Any]) -> list[Target]:
    """Loading step events, and writing the step store, from JSON lines (the evidence of
    record: the reader in one process) and from binary step records, at the largest load
    size, against :data:`EVENTS_RATE_TARGET`. A results file from before binary records
    measured none; one from before the fast path names the reader as it then was."""
    sizes = (res.get("load") or {}).get("sizes") or [{}]
    rates = sizes[-1].get("rates")
    events = sizes[-1].get("step_events", 0)
    target = f">= {EVENTS_RATE_TARGET / 1e6:g} M events/s/core"
    rows = []
    for key, what, source, names in (
        ("load", "load", "JSON lines", (JSON_READER, JSON_READER_BEFORE)),
        ("store_write", "step store write", "JSON lines", ("from JSON lines",)),
        ("load", "load", "binary step records", ("binary records",)),
        ("store_write", "step store write", "binary step records", ("from binary records",)),
    ):
        found = [rates[key][n] for n in names if rates is not None and n in rates[key]]
        value = found[0] if found else None
        rows.append(
            Target(
                f"{what}, {source}, {events / 1e6:.2f} M events",
                target,
                "-" if value is None else f"{value / 1e6:.2f} M events/s (one core)",
                None if value is None else value >= EVENTS_RATE_TARGET,
                None if value is None else value / 1e6,
                "M events/s",
            )
        )
    return rows


def _demo_row(demo: dict[str, Any] | None) -> Target:
    """The demo's wall time (a results file from before it was measured: not measured)."""
    target = f"<= {DEMO_TARGET_S:.0f} s"
    if demo is None:
        return Target("demo wall time: faultdrill demo", target, "-", None, None, "s")
    per = demo["per_phase_s"]
    top = sorted(per, key=lambda n: -per[n])[:3]
    verdicts = [v["verdict"] for v in demo["items"].values()]
    bad = [v for v in verdicts if v not in ("pass", "caught")]
    return Target(
        f"demo wall time: {demo['command']}",
        target,
        f"{demo['wall_s']:.0f} s, {len(verdicts)} items ("
        + ", ".join(f"{n} {per[n]:.0f} s" for n in top)
        + (f"; {len(bad)} not pass/caught" if bad else "")
        + ")",
        demo["wall_s"] <= DEMO_TARGET_S and not bad,
        demo["wall_s"],
        "s",
    )


def compare(res: dict[str, Any], previous: dict[str, Any] | None) -> list[Compared]:
    """Each target of ``res`` beside the same row (same ``what``: same measure, same size)
    of ``previous`` (None: no previous run)."""
    before = {t.what: t.value for t in targets(previous)} if previous is not None else {}
    out = []
    for t in targets(res):
        prev = before.get(t.what)
        ratio = t.value / prev if t.value is not None and prev else None
        out.append(Compared(t, prev, ratio))
    return out
