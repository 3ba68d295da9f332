"""``data-outage`` below the drill: its spec and plan admission, the reference workload's
file-backed dataset (same ids and batches as in memory; retries, and the known-bad loader
that skips), the data directory's containment, the fault through the fake platform and
through a real FUSE mirror (root), and the checks on tiny literal timelines both ways."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from pydantic import ValidationError

from faultdrill.admit import load_plan
from faultdrill.errors import DrillError, FaultError
from faultdrill.events import EventSink
from faultdrill.faults.api import FaultContext, make_fault
from faultdrill.faults.data import DataOutageSpec
from faultdrill.host.storage import fuse_missing
from faultdrill.ledger import Ledger
from faultdrill.plan import Resources
from faultdrill.platforms.api import Ability
from faultdrill.platforms.fake import FakePlatform
from faultdrill.platforms.kubernetes.platform import KubernetesPlatform
from faultdrill.platforms.kubernetes.testplatform import TEST_CLUSTER_ABILITIES
from faultdrill.platforms.local.platform import LocalPlatform
from faultdrill.workloads import _loader, lm
from faultdrill.workloads.lm_config import ConfigError, config_from_dict
from tests.drillkit import demo_raw
from tests.test_workload_lm import one, read_events, steps
from tests.timelines import OLD, TL, Judge, baseline, finish, first_run, ids

fuse = pytest.mark.skipif(
    os.geteuid() != 0 or bool(fuse_missing()), reason=f"needs root and FUSE: {fuse_missing()}"
)

# --- the spec and the plan --------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"mode": "error", "for_s": 0}, "for_s"),
        ({"mode": "error", "for_s": 601}, "for_s"),
        ({"mode": "unplugged", "for_s": 5}, "mode"),
        ({"for_s": 5}, "mode"),
        ({"mode": "hang", "for_s": 5, "server": "hang"}, "server"),
    ],
)
def test_spec_bounds_and_bad_input(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        DataOutageSpec.model_validate({"kind": "data-outage", **raw})
    assert field in str(info.value)


def _plan(tmp_path: Path, *, data_files: bool | None, platform: str = "local") -> Path:
    raw = demo_raw()
    if data_files is not None:
        raw["task"]["workload"]["data_files"] = data_files
    if platform == "ray":
        raw["resources"] = {**raw["resources"], "platform": "ray", "spares": 0}
    raw["rounds"] = [
        {
            "round": 3,
            "name": "data",
            "scenarios": [
                {
                    "id": "data-error",
                    "title": "the data directory fails",
                    "fault": {"kind": "data-outage", "mode": "error", "for_s": 3},
                    "trigger": {"at_step": 12},
                    "expected": {"job": "completes", "recovery": "automatic"},
                }
            ],
        }
    ]
    raw["controls"] = []
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_plan_with_data_files_is_admitted(tmp_path: Path) -> None:
    plan = load_plan(_plan(tmp_path, data_files=True))
    spec = plan.scenarios()[0].fault
    assert isinstance(spec, DataOutageSpec) and spec.duration_s == 3
    assert plan.workload_config(None, "/c", "/d")["data_dir"] == "/d"


@pytest.mark.parametrize("data_files", [None, False])
def test_plan_without_file_backed_data_is_refused_naming_the_fix(
    tmp_path: Path, data_files: bool | None
) -> None:
    with pytest.raises(DrillError) as info:
        load_plan(_plan(tmp_path, data_files=data_files))
    assert "task.workload.data_files: true" in str(info.value)
    assert "plan.yaml" in str(info.value)


def test_ray_refuses_it_at_validation_naming_where_it_runs(tmp_path: Path) -> None:
    with pytest.raises(DrillError) as info:
        load_plan(_plan(tmp_path, data_files=True, platform="ray"))
    assert "data-outage" in str(info.value) and "platform local" in str(info.value)


def test_abilities() -> None:
    assert Ability.DATA_OUTAGE in LocalPlatform.abilities_for(Resources())
    assert Ability.DATA_OUTAGE in FakePlatform.abilities_for(Resources())
    assert Ability.DATA_OUTAGE not in TEST_CLUSTER_ABILITIES
    why = KubernetesPlatform.why_not(Ability.DATA_OUTAGE, Resources())
    assert "platform local" in why and "slurm.embedded: true" in why


# --- the workload's config and file-backed dataset -----------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"data_files": True}, "field 'data_dir': must name a directory when data_files"),
        ({"data_files": True, "data_dir": 3}, "field 'data_dir': must be a string"),
        ({"data_retry_s": -1}, "field 'data_retry_s': must be >= 0"),
        ({"data_retry_s": 1e9}, "field 'data_retry_s': must be <= 3600"),
        ({"data_files": "yes", "data_dir": "/d"}, "field 'data_files': must be true or false"),
        ({"bad_mode": "skip-unreadable-shard"}, "skip-unreadable-shard needs data_files: true"),
    ],
)
def test_data_config_errors_name_the_field(raw: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        config_from_dict({"ckpt_dir": "/c", **raw}, "w.json")


def _shards(tmp_path: Path, **cfg: Any) -> tuple[lm.Corpus, _loader.ShardFiles, list[Any]]:
    conf = config_from_dict({"ckpt_dir": "/c", "data_files": True, "data_dir": str(tmp_path)})
    corpus = lm.Corpus(conf)
    assert _loader.write_shards(corpus.samples, str(tmp_path)) == 8  # 512 rows / 64
    assert _loader.write_shards(corpus.samples, str(tmp_path)) == 0  # kept when whole
    heard: list[Any] = []
    args = {"retry_s": 5.0, "skip": False, **cfg}
    ds = _loader.ShardFiles(
        corpus, str(tmp_path), conf.seq_len, on_read=lambda w, f: heard.append((w, f)), **args
    )
    return corpus, ds, heard


def test_shard_files_serve_exactly_the_corpus_rows(tmp_path: Path) -> None:
    corpus, ds, heard = _shards(tmp_path)
    mem = _loader.StreamPositions(corpus)
    for p in (0, 1, 63, 64, 511, 512, 1000):
        got, want = ds[p], mem[p]
        assert got[0] == want[0] == p
        assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    assert heard == []


def _hide_shard_of(corpus: lm.Corpus, data: Path, position: int) -> tuple[Path, Path]:
    shard = corpus.indices(range(position, position + 1))[0] // _loader.ROWS_PER_SHARD
    path = data / _loader.shard_name(shard)
    away = data / "away"
    path.rename(away)
    return path, away


def test_a_failed_read_is_retried_until_the_data_is_back(tmp_path: Path) -> None:
    corpus, ds, heard = _shards(tmp_path)
    path, away = _hide_shard_of(corpus, tmp_path, 5)
    threading.Timer(0.8, away.rename, args=(path,)).start()
    got = ds[5]
    assert got[0] == 5 and torch.equal(got[1], _loader.StreamPositions(corpus)[5][1])
    assert [w for w, _ in heard] == ["data_read_failed", "data_read_recovered"]
    assert heard[1][1]["attempts"] >= 2 and heard[1][1]["waited_s"] >= 0.7


def test_a_read_failing_past_the_retry_budget_raises(tmp_path: Path) -> None:
    corpus, ds, heard = _shards(tmp_path, retry_s=0.3)
    _hide_shard_of(corpus, tmp_path, 5)
    started = time.monotonic()
    with pytest.raises(OSError) as info:
        ds[5]
    assert info.value.errno == errno.ENOENT and time.monotonic() - started < 3
    assert [w for w, _ in heard] == ["data_read_failed"]


def test_the_known_bad_loader_serves_another_sample(tmp_path: Path) -> None:
    corpus, ds, heard = _shards(tmp_path, skip=True)
    _hide_shard_of(corpus, tmp_path, 5)
    served = ds[5][0]
    assert served != 5
    assert [w for w, _ in heard] == ["data_read_failed", "data_read_skipped"]
    assert heard[1][1] == {"position": 5, "served": served}


@pytest.fixture
def world1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _run(tmp: Path, name: str, **cfg: Any) -> list[dict[str, Any]]:
    events = tmp / f"ev-{name}"
    os.environ["FAULTDRILL_EVENTS_DIR"] = str(events)
    base = {"ckpt_dir": str(tmp / f"ck-{name}"), "steps": 6, "ckpt_every": 3, "warmup_steps": 2}
    lm.run(config_from_dict({**base, **cfg}))
    return read_events(events, 0)


def test_file_backed_run_is_bitwise_the_in_memory_run(world1: Path) -> None:
    mem = _run(world1, "mem")
    files = _run(world1, "files", data_files=True, data_dir=str(world1 / "data"))
    assert steps(files) == steps(mem)  # ids, and losses bitwise
    assert one(files, "run_end")["model_digest"] == one(mem, "run_end")["model_digest"]
    assert one(files, "run_start")["data_digest"] == one(mem, "run_start")["data_digest"]
    assert one(files, "data_files")["shards_written"] == 8
    assert sorted(p.name for p in (world1 / "data").iterdir())[0] == "shard-00000.bin"


# --- containment and the fault through a platform -------------------------------------------


def _ctx(tmp_path: Path, platform: Any, data: Path) -> FaultContext:
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id=f"t-{os.getpid()}")
    sink = EventSink(tmp_path / "events", "t")
    return FaultContext(
        platform=platform(Resources(), tmp_path, ledger, sink),
        ledger=ledger,
        sink=sink,
        scenario_id="s",
        item_dir=tmp_path / "item",
        data_dir=data,
    )


def test_a_data_directory_outside_the_item_is_refused(tmp_path: Path) -> None:
    (tmp_path / "item").mkdir()
    (tmp_path / "host").mkdir()
    (tmp_path / "item" / "data").symlink_to(tmp_path / "host")
    with pytest.raises(FaultError, match=r"data directory .* not inside the item's directory"):
        _ctx(tmp_path, FakePlatform, tmp_path / "item" / "data")


def test_fault_asks_the_platform_for_a_mirror_then_its_outage(tmp_path: Path) -> None:
    data = tmp_path / "item" / "data"
    ctx = _ctx(tmp_path, FakePlatform, data)
    fault = make_fault(DataOutageSpec(mode="hang", for_s=2))
    fault.prepare(ctx)
    facts = fault.inject(ctx)
    fault.revert(ctx)
    fault.revert(ctx)  # twice is fine
    asked = [(verb, args) for verb, args in ctx.platform.asked]  # type: ignore[attr-defined]
    verbs = [v for v, _ in asked]
    assert verbs[:2] == ["storage_prepare", "storage_unreachable"]
    assert asked[0][1]["mode"] == "unreachable" and asked[0][1]["path"] == str(data.resolve())
    assert asked[1][1]["server"] == "hang"
    assert facts["mode"] == "hang" and facts["path"] == str(data.resolve())
    changes = ctx.platform.changes  # type: ignore[attr-defined]
    assert all(c.recorded_first for c in changes)  # in the ledger before it was made
    # the outage is undone once by the revert; the mirror stays until the end of the item
    assert [(c.action, c.undone) for c in changes] == [
        ("storage_prepare", 0),
        ("storage_unreachable", 1),
    ]


@fuse
def test_error_outage_on_a_real_mirror_fails_reads_with_eio_until_the_revert(
    tmp_path: Path,
) -> None:
    data = tmp_path / "item" / "data"
    data.mkdir(parents=True)
    (data / "shard-00000.bin").write_bytes(b"\1" * 4096)
    ctx = _ctx(tmp_path, LocalPlatform, data)
    fault = make_fault(DataOutageSpec(mode="error", for_s=2))
    try:
        fault.prepare(ctx)
        assert (data / "shard-00000.bin").read_bytes() == b"\1" * 4096  # through the mirror
        facts = fault.inject(ctx)
        assert facts["write_error"] == os.strerror(errno.EIO)
        with pytest.raises(OSError) as info:
            (data / "shard-00000.bin").read_bytes()
        assert info.value.errno == errno.EIO
        fault.revert(ctx)
        assert (data / "shard-00000.bin").read_bytes() == b"\1" * 4096
    finally:
        fault.revert(ctx)
        assert ctx.ledger.revert_all() == []  # the mirror: the end of the item undoes it
    with open("/proc/self/mountinfo") as f:
        assert str(data) not in f.read()


# --- the checks, on literal timelines ------------------------------------------------------


def _outage(*, mode: str = "error", at: float = 5.5, for_s: float = 3.0) -> TL:
    """Steps 1-5 at t=1..5, the data fails at 5.5 for ``for_s``; nothing after yet."""
    tl = TL().job("running", 0.0)
    first_run(tl, 5)
    tl.inject(at, fault="data-outage", target="the job's data directory", mode=mode)
    tl.add("fault", "reverted", at + for_s, fault="data-outage")
    return tl


def _resume(tl: TL, t0: float, *, data_from: int | None = None) -> TL:
    """Step 6 (the baseline's last) after the outage, on the same replicas, then a clean
    end."""
    for rank, pid in enumerate(OLD):
        tl.steps(pid, rank, [6], t0=t0, data_from=data_from)
        tl.proc(pid, rank, 0.05, t0 + 2.5, node=f"n{rank}")
    tl.save(0, OLD[0], "ckpt-6", 6, t0 + 0.5)
    for rank, pid in enumerate(OLD):
        tl.evaluation(rank, pid, 6, t0 + 0.6)
    return finish(tl, 6, t0 + 1.0, OLD, latest="ckpt-6")


def test_check_passes_a_job_that_retried_and_went_on(judge: Judge) -> None:
    tl = _outage()
    for rank, pid in enumerate(OLD):
        # written before the harness's ``injected`` (the apply waits for the mirror)
        tl.add("probe", "data_read_failed", 5.3, rank=rank, pid=pid, position=40)
        tl.add("probe", "data_read_recovered", 8.6, rank=rank, pid=pid, waited_s=3.0)
    verdict, msg = judge.one("progress.data-outage", _resume(tl, 8.7))
    assert verdict == "pass", msg
    assert "retried its reads (2 read(s) failed, the longest wait 3.0 s)" in msg
    assert "+3.2 s after the injection, 0.2 s after the data was readable again" in msg


def test_check_fails_a_job_that_never_went_on(judge: Judge) -> None:
    tl = _outage()
    for rank, pid in enumerate(OLD):
        tl.proc(pid, rank, 0.05, 20.0, node=f"n{rank}")
    verdict, msg = judge.one("progress.data-outage", tl)
    assert verdict == "fail" and "did not recover" in msg


def test_check_retests_an_outage_the_reads_never_felt(judge: Judge) -> None:
    tl = TL().job("running", 0.0)
    first_run(tl, 8)  # steps every second straight through the outage
    tl.inject(2.5, fault="data-outage", mode="error").add("fault", "reverted", 6.5)
    verdict, msg = judge.one("progress.data-outage", tl)
    assert verdict == "retest" and "did not feel it" in msg


def test_check_fails_a_loader_that_said_it_skipped(judge: Judge) -> None:
    tl = _outage()
    tl.add("probe", "data_read_skipped", 8.6, rank=0, pid=OLD[0], position=40, served=52)
    verdict, msg = judge.one("progress.data-outage", _resume(tl, 8.7))
    assert verdict == "fail" and "skipped unreadable data 1 time(s)" in msg


def test_check_is_quiet_for_other_faults(judge: Judge) -> None:
    assert judge.one("progress.data-outage", baseline())[0] == "pass"


def test_sample_ledger_catches_data_skipped_across_the_outage(judge: Judge) -> None:
    """The control's evidence: the same drill, its step 6 reading step 7's samples."""
    healthy = judge.run("progress.sample-ledger", _resume(_outage(), 8.7))
    assert [f.verdict for f in healthy] == ["pass"]
    bad = judge.run("progress.sample-ledger", _resume(_outage(), 8.7, data_from=7))
    assert "fail" in [f.verdict for f in bad]
    assert ids(6, 0) != ids(7, 0)
