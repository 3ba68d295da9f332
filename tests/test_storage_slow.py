"""``storage-slow``: the plan's bounds and errors, refusal where a platform cannot, the plug-in
on the fake platform, and the FUSE mirror's delay for real (root, FUSE): writes answered late
while reads are not (``ops: write``), the pointer watched while it moves, the delay gone on
revert and on a cleanup from the ledger file."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from faultdrill.admit import load_plan, parse_plan
from faultdrill.errors import PlanError
from faultdrill.events import EventSink
from faultdrill.faults.api import FaultContext, make_fault
from faultdrill.faults.storage import StorageSlow, StorageSlowSpec
from faultdrill.host import procfs
from faultdrill.host.fuse_mirror import MAX_DELAY_MS, delay_file, read_delay
from faultdrill.host.mounts import MIRROR_FSTYPE, mounts_at, read_status
from faultdrill.host.storage import fuse_missing
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources
from faultdrill.platforms import PLATFORMS, Ability
from faultdrill.platforms.local.platform import LocalPlatform
from faultdrill.platforms.slurm.platform import SlurmPlatform
from tests.drillkit import demo_raw
from tests.slurmkit import example_raw

fuse = pytest.mark.skipif(
    os.geteuid() != 0 or bool(fuse_missing()), reason=f"needs root and FUSE: {fuse_missing()}"
)

# --- the plan -------------------------------------------------------------------------------


def _scenario(fault: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "storage-slow",
        "fault": fault,
        "trigger": {"at_step": 18},
        "expected": {"resume": "no-restart"},
    }


def _plan_file(tmp_path: Path, fault: dict[str, Any]) -> Path:
    raw = demo_raw()
    raw["rounds"] = [{"round": 3, "name": "storage", "scenarios": [_scenario(fault)]}]
    raw["controls"] = []
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_a_plan_names_the_kind_and_gets_defaults(tmp_path: Path) -> None:
    plan = load_plan(_plan_file(tmp_path, {"kind": "storage-slow", "latency_ms": 200, "for_s": 6}))
    spec = plan.scenarios()[0].fault
    assert isinstance(spec, StorageSlowSpec)
    assert (spec.latency_ms, spec.for_s, spec.ops, spec.duration_s) == (200, 6.0, "write", 6.0)
    assert StorageSlow.requires_for(spec) == {Ability.STORAGE_SLOW, Ability.CHECKPOINT_FILES}


@pytest.mark.parametrize(
    ("bad", "field", "says"),
    [
        ({"latency_ms": 0}, "latency_ms", "greater than or equal to 1"),
        ({"latency_ms": 10_001}, "latency_ms", "less than or equal to 10000"),
        ({"latency_ms": "slow"}, "latency_ms", "must be a number, not the string 'slow'"),
        ({"for_s": 0}, "for_s", "greater than 0"),
        ({"for_s": 601}, "for_s", "less than or equal to 600"),
        ({"ops": "read"}, "ops", "'write' or 'all'"),
        ({"latency_ms": None}, "latency_ms", "valid integer"),
        ({"server": "hang"}, "server", "unknown key 'server'; remove it"),
    ],
)
def test_bad_params_are_named_with_their_field(
    tmp_path: Path, bad: dict[str, Any], field: str, says: str
) -> None:
    fault = {"kind": "storage-slow", "latency_ms": 200, "for_s": 6, **bad}
    with pytest.raises(PlanError) as err:
        load_plan(_plan_file(tmp_path, fault))
    where = [(loc, msg) for loc, msg in err.value.problems if field in loc]
    assert where and says in where[0][1], err.value.problems
    assert "plan.yaml" in str(err.value)


def test_a_missing_latency_is_named(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as err:
        load_plan(_plan_file(tmp_path, {"kind": "storage-slow", "for_s": 6}))
    assert any("latency_ms" in loc for loc, _ in err.value.problems), err.value.problems


def test_spec_bounds_directly() -> None:
    assert StorageSlowSpec(latency_ms=10_000, for_s=600, ops="all").ops == "all"
    for bad in ({"latency_ms": -5}, {"for_s": -1}, {"ops": ""}):
        with pytest.raises(ValidationError):
            StorageSlowSpec(**{"latency_ms": 100, "for_s": 1, **bad})


def test_a_real_slurm_cluster_refuses_it_at_validation_with_the_fix() -> None:
    raw = example_raw()
    raw["resources"] = {"platform": "slurm", "isolation": "none", "nodes": 2, "spares": 0}
    raw["resources"]["slurm"] = {"shared_dir": "/nfs/drills"}
    raw["rounds"] = [{"round": 3, "name": "storage", "scenarios": [_scenario(
        {"kind": "storage-slow", "latency_ms": 200, "for_s": 6})]}]  # fmt: skip
    raw["controls"] = []
    with pytest.raises(PlanError) as err:
        parse_plan(raw, source="p.yaml")
    found = [m for _, m in err.value.problems if "storage-slow" in m]
    assert found and "needs ability storage-slow" in found[0], err.value.problems
    assert "set resources.slurm.embedded: true" in found[0]


def test_who_declares_it() -> None:
    assert Ability.STORAGE_SLOW in LocalPlatform.abilities_for(Resources())
    embedded = Resources(platform="slurm", isolation="netns", nodes=2, slurm={"embedded": True})
    assert Ability.STORAGE_SLOW in SlurmPlatform.abilities_for(embedded)
    real = Resources(platform="slurm", nodes=2, slurm={"shared_dir": "/nfs"})
    assert Ability.STORAGE_SLOW not in SlurmPlatform.abilities_for(real)
    ray_by_address = Resources(platform="ray", ray={"address": "10.0.0.1:6379"})
    assert Ability.STORAGE_SLOW not in PLATFORMS["ray"].abilities_for(ray_by_address)


def test_delay_file_is_read_bounded_and_malformed_means_none(tmp_path: Path) -> None:
    status = tmp_path / "m.json"
    f = delay_file(status)
    assert f.parent == tmp_path and f.name == "m.json.delay"
    assert read_delay(f) == (0.0, frozenset())  # missing
    f.write_text('{"ms": 250, "ops": "write"}')
    seconds, ops = read_delay(f)
    assert seconds == 0.25 and ops is not None and {"write", "fsync", "rename"} <= ops
    assert "read" not in ops and "getattr" not in ops
    f.write_text('{"ms": 250, "ops": "all"}')
    assert read_delay(f) == (0.25, None)
    f.write_text(f'{{"ms": {10 * MAX_DELAY_MS}}}')
    assert read_delay(f)[0] == MAX_DELAY_MS / 1000
    for bad in ('{"ms": "9"}', '{"ms": true}', '{"ms": -1}', '{"ms": 5, "ops": "x"}', "[", "[]"):
        f.write_text(bad)
        assert read_delay(f) == (0.0, frozenset()), bad


# --- the FUSE mirror, slowed for real ---------------------------------------------------------


@dataclass
class Slowed:
    fault: StorageSlow
    ctx: FaultContext
    ckpt: Path
    under: Path
    pid: int
    start: int
    tag: str


def _ours(tag: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [ln.split()[4] for ln in f if f" - {MIRROR_FSTYPE} {tag} " in ln]


@pytest.fixture()
def slowed(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Slowed]:
    """A mirror prepared for storage-slow over ``tmp_path/ckpt`` (ops as the test's param,
    default write; 300 ms), and everything undone afterwards, whatever the test left."""
    ops = getattr(request, "param", "write")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    fd = os.open(ckpt, os.O_RDONLY | os.O_DIRECTORY)
    fault = make_fault(StorageSlowSpec(latency_ms=300, for_s=5, ops=ops))
    assert isinstance(fault, StorageSlow)
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id=f"t-{os.getpid()}")
    sink = EventSink(tmp_path / "events", "t")
    ctx = FaultContext(
        platform=LocalPlatform(Resources(), tmp_path, ledger, sink),
        ledger=ledger,
        sink=sink,
        scenario_id="s",
        ckpt_dir=ckpt,
        latest_file="latest",
    )
    facts = fault.prepare(ctx)
    assert facts["mode"] == "slow"
    pid, tag = int(facts["daemon_pid"]), str(facts["source"])
    start = procfs.start_time(pid)
    assert start is not None
    try:
        yield Slowed(fault, ctx, ckpt, Path(f"/proc/self/fd/{fd}"), pid, start, tag)
    finally:
        fault.revert(ctx)
        assert ctx.ledger.revert_all() == []
        assert _ours(tag) == [], "a FUSE mount was left behind"
        assert not procfs.alive(pid, start), "the mirror daemon was left running"
        os.close(fd)


def _timed_write(path: Path, data: bytes) -> float:
    began = time.monotonic()
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return time.monotonic() - began


def _timed_read(path: Path) -> float:
    began = time.monotonic()
    path.read_bytes()
    return time.monotonic() - began


@fuse
def test_writes_are_late_reads_are_not_and_the_revert_ends_it(slowed: Slowed) -> None:
    s = slowed
    (s.ckpt / "old").write_bytes(b"o" * 4096)
    fast = _timed_write(s.ckpt / "w0", b"x" * 4096)
    facts = s.fault.inject(s.ctx)
    assert facts["latency_ms"] == 300 and facts["ops"] == "write"
    assert facts["probe_write_s"] >= 0.9  # create, write, fsync, unlink: 4 x 300 ms
    assert read_status(str(delay_file(Path(s.ctx.ledger.pending()[0].data["status"]))))
    late = _timed_write(s.ckpt / "w1", b"y" * 4096)
    assert late >= 0.6 > fast, (late, fast)  # create + write + fsync, each 300 ms late
    assert _timed_read(s.ckpt / "old") < 0.25  # reads are not delayed with ops: write
    assert (s.under / "w1").read_bytes() == b"y" * 4096  # late, but there
    s.fault.revert(s.ctx)
    assert _timed_write(s.ckpt / "w2", b"z" * 4096) < 0.25
    assert read_status(str(s.ctx.ledger.entries[next(iter(s.ctx.ledger.entries))].data["status"]))[
        "state"
    ] in ("serving", "mounted")


@fuse
@pytest.mark.parametrize("slowed", ["all"], indirect=True)
def test_ops_all_delays_reads_too(slowed: Slowed) -> None:
    s = slowed
    (s.ckpt / "old").write_bytes(b"o" * 4096)
    os.posix_fadvise(os.open(s.under / "old", os.O_RDONLY), 0, 0, os.POSIX_FADV_DONTNEED)
    s.fault.inject(s.ctx)
    assert _timed_read(s.ckpt / "old") >= 0.3


@fuse
def test_the_pointer_is_watched_while_it_moves(slowed: Slowed) -> None:
    s = slowed
    (s.ckpt / "latest").write_text("step-000010\n")
    s.fault.inject(s.ctx)
    (s.under / "step-000020").mkdir()  # a checkpoint without its state yet
    (s.under / "step-000020" / "manifest.json").write_text(
        '{"file": "state.pt", "bytes": 4, "sha256": "00"}'
    )
    (s.under / "step-000020" / "state.pt").write_bytes(b"")
    (s.ckpt / "latest").write_text("step-000020\n")  # slowly, through the mirror
    time.sleep(0.5)
    s.fault.revert(s.ctx)
    seen = [
        ev
        for ev in map(
            __import__("json").loads,
            (s.ctx.sink.events_dir / "fault.jsonl").read_text().splitlines(),
        )
        if ev["kind"] == "storage_observed"
    ]
    assert [e["when"] for e in seen] == ["start", "during", "end"]
    assert all(e["fault"] == "storage-slow" for e in seen)
    during = seen[1]
    assert during["latest"] == "step-000020" and during["latest_verifies"] is False
    assert "state.pt has 0 bytes" in during["latest_problem"]


@fuse
def test_cleanup_from_the_ledger_file_mid_slowdown_frees_everything(slowed: Slowed) -> None:
    """As ``faultdrill cleanup`` would after a crash: a fresh ledger read from the file."""
    s = slowed
    s.fault.inject(s.ctx)
    again = Ledger(s.ctx.ledger.path, run_id="cleanup")
    assert {e.kind for e in again.pending()} == {"fuse-mirror", "fuse-slow"}
    assert again.revert_all() == []
    assert mounts_at(s.ckpt, resolve=False) == []
    assert not procfs.alive(s.pid, s.start)
    assert _timed_write(s.ckpt / "after", b"a") < 0.25
    s.fault._stop.set()  # the watcher of the fault object the "crash" left behind
    s.ctx.ledger = again  # the fixture's revert_all finds nothing left


@fuse
def test_undo_of_the_delay_alone_restores_full_speed(slowed: Slowed) -> None:
    s = slowed
    s.fault.inject(s.ctx)
    again = Ledger(s.ctx.ledger.path, run_id="cleanup")
    slow = next(e for e in again.pending() if e.kind == "fuse-slow")
    again.revert(slow.id)
    assert read_status(str(slow.data["status"]))["state"] == "serving"
    assert _timed_write(s.ckpt / "after", b"a") < 0.25
    again.revert(slow.id)  # twice is fine
