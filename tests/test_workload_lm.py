"""The reference workload: config, checkpoint store, bad modes, and real torchrun runs.

In-process runs (world size 1, no torchrun) cover the logic cheaply; the ``drill`` tests
start real torchrun jobs (2 workers, gloo, CPU) and clean up every process they start.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from faultdrill.errors import DrillError
from faultdrill.workloads import _ckpt, lm

SRC = str(Path(lm.__file__).resolve().parents[2])

# --- helpers -------------------------------------------------------------------------


def read_events(events_dir: Path, rank: int) -> list[dict[str, Any]]:
    """One rank's events; a torn line (a writer killed mid-write) is skipped."""
    path = events_dir / f"probe-rank{rank}.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["kind"] for e in events if e["kind"] != "step"]


def steps(events: list[dict[str, Any]]) -> list[tuple[int, list[list[int]], float]]:
    return [(e["step"], e["samples"], e["loss"]) for e in events if e["kind"] == "step"]


def one(events: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [e for e in events if e["kind"] == kind]
    assert len(found) == 1, (kind, found)
    return found[0]


# --- (a) config ----------------------------------------------------------------------


def write_config(path: Path, raw: object) -> Path:
    path.write_text(json.dumps(raw))
    return path


def test_defaults_and_digest_fields(tmp_path: Path) -> None:
    cfg = lm.load_config(write_config(tmp_path / "c.json", {"ckpt_dir": "ck"}))
    assert cfg == lm.LMConfig(ckpt_dir="ck")
    assert (cfg.steps, cfg.global_batch, cfg.lr, cfg.save_error, cfg.bad_mode) == (
        40,
        8,
        3e-3,
        "skip",
        None,
    )
    operational = lm.config_from_dict(
        {"ckpt_dir": "other", "bad_mode": "skip-ahead", "step_sleep_s": 1, "ckpt_every": 3}
    )
    assert lm.config_digest(operational) == lm.config_digest(cfg)
    assert lm.config_digest(
        lm.config_from_dict({"ckpt_dir": "ck", "lr": 0.01})
    ) != lm.config_digest(cfg)
    # An integer where a float is expected is the same config.
    assert lm.config_from_dict({"ckpt_dir": "ck", "dropout": 0}).dropout == 0.0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"ckpt_dir": "c", "stpes": 3}, "unknown field 'stpes'"),
        ({"steps": 3}, "field 'ckpt_dir' is required"),
        ({"ckpt_dir": "c", "steps": "10"}, "field 'steps': must be an integer (got '10')"),
        ({"ckpt_dir": "c", "steps": True}, "field 'steps': must be an integer"),
        ({"ckpt_dir": "c", "steps": 0}, "field 'steps': must be >= 1 (got 0)"),
        ({"ckpt_dir": "c", "lr": -1}, "field 'lr': must be > 0"),
        ({"ckpt_dir": "c", "dropout": 1.5}, "field 'dropout': must be in [0, 1)"),
        (
            {"ckpt_dir": "c", "save_error": "ignore"},
            "field 'save_error': must be one of skip, crash",
        ),
        ({"ckpt_dir": "c", "bad_mode": "typo"}, "field 'bad_mode': must be null or one of"),
        ({"ckpt_dir": "c", "d_model": 30, "n_heads": 4}, "field 'n_heads': must divide d_model"),
        ({"ckpt_dir": ""}, "field 'ckpt_dir': must be a non-empty string"),
        ([1, 2], "must be a JSON object (got list)"),
    ],
)
def test_config_errors_name_file_and_field(tmp_path: Path, raw: object, expected: str) -> None:
    path = write_config(tmp_path / "bad.json", raw)
    with pytest.raises(DrillError) as err:  # a lm.ConfigError, under faultdrill's root error
        lm.load_config(path)
    assert isinstance(err.value, lm.ConfigError)
    assert str(err.value).startswith(f"{path}: ")
    assert expected in str(err.value)


def test_every_number_of_the_config_has_both_bounds() -> None:
    """A full config (what Ray Train hands each worker: every field) is read back; a field
    without an upper bound failed with a KeyError instead."""
    import dataclasses

    from faultdrill.workloads import lm_config

    ints = lm_config._INT_FIELDS
    assert set(lm_config._MIN_INT) == ints and set(lm_config._MAX_INT) == ints
    assert set(lm_config._MAX_FLOAT) == lm_config._FLOAT_FIELDS
    full = dataclasses.asdict(lm_config.LMConfig(ckpt_dir="/x"))
    assert lm_config.config_from_dict(full) == lm_config.LMConfig(ckpt_dir="/x")


def test_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(lm.ConfigError, match="cannot read"):
        lm.load_config(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(lm.ConfigError, match="not valid JSON"):
        lm.load_config(tmp_path / "broken.json")


def test_world_size_must_divide_global_batch() -> None:
    cfg = lm.LMConfig(ckpt_dir="c", global_batch=8)
    lm.check_world_size(cfg, 4)
    with pytest.raises(lm.ConfigError, match="8 is not divisible by world size 3"):
        lm.check_world_size(cfg, 3)


def test_main_reports_config_error_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path / "c.json", {"ckpt_dir": "c", "colour": "red"})
    assert lm.main([f"--workload-config={path}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "config error" in err and "'colour'" in err


def test_module_entry_point_config_error(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.json", {"ckpt_dir": "c", "steps": -1})
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.run(
        [sys.executable, "-m", "faultdrill.workloads.lm", f"--workload-config={path}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "field 'steps': must be >= 1" in proc.stderr


# --- data ----------------------------------------------------------------------------


def test_corpus_is_deterministic_and_sample_depends_only_on_seed_and_index() -> None:
    small = lm.Corpus(lm.LMConfig(ckpt_dir="c", dataset_size=16))
    large = lm.Corpus(lm.LMConfig(ckpt_dir="c", dataset_size=64))
    assert torch.equal(small.samples, large.samples[:16])
    again = lm.Corpus(lm.LMConfig(ckpt_dir="c", dataset_size=16))
    assert small.indices(range(0, 40)) == again.indices(range(0, 40))
    # Each epoch is a permutation of the dataset, and epochs differ.
    assert sorted(small.indices(range(16, 32))) == list(range(16))
    assert small.indices(range(0, 16)) != small.indices(range(16, 32))
    inputs, targets = small.batch(range(3, 7))
    assert inputs.shape == targets.shape == (4, 16)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])


# --- (b) checkpoint store ------------------------------------------------------------


def fake_state(step: int) -> dict[str, Any]:
    return {"step": step, "data_position": step * 8, "w": torch.full((64, 64), float(step))}


def save(ckpt_dir: Path, step: int, keep: int = 5, **kw: Any) -> _ckpt.Saved:
    return _ckpt.save(
        str(ckpt_dir),
        step=step,
        state=fake_state(step),
        data_position=step * 8,
        world_size=2,
        written_by={"rank": 0, "pid": os.getpid(), "restart_count": 0},
        keep=keep,
        **kw,
    )


def test_save_writes_manifest_and_latest(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    saved = save(ck, 20)
    assert saved.id == "step-000020" and saved.path == str(ck / "step-000020" / "state.pt")
    manifest = json.loads((ck / "step-000020" / "manifest.json").read_text())
    data = (ck / "step-000020" / "state.pt").read_bytes()
    assert manifest["sha256"] == saved.sha256 and manifest["bytes"] == len(data) == saved.size
    assert manifest["step"] == 20 and manifest["data_position"] == 160
    assert manifest["world_size"] == 2 and manifest["written_by"]["pid"] == os.getpid()
    assert (ck / "latest").read_text() == "step-000020\n"
    result = _ckpt.load(str(ck))
    assert result.rejected == [] and result.loaded is not None
    assert (
        result.loaded.verified and result.loaded.step == 20 and result.loaded.data_position == 160
    )
    assert torch.equal(result.loaded.state["w"], fake_state(20)["w"])


def test_prune_keeps_newest_and_removes_leftovers(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / ".tmp-step-000007-crashed").mkdir()
    for step in (5, 10, 15, 20):
        save(ck, step, keep=2)
    assert sorted(os.listdir(ck)) == ["latest", "step-000015", "step-000020"]
    # Redoing a step that was saved before replaces it.
    saved = save(ck, 15, keep=2)
    assert _ckpt.read_latest(str(ck)) == "step-000015"
    result = _ckpt.load(str(ck))
    assert result.loaded is not None and result.loaded.id == "step-000015"
    assert result.loaded.path == saved.path


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def drop_manifest(path: Path) -> None:
    (path.parent / "manifest.json").unlink()


def garble_manifest(path: Path) -> None:
    (path.parent / "manifest.json").write_text('{"id": "step-0000')


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (flip_byte, "sha256"),
        (truncate, "state.pt has 100 bytes, manifest says"),
        (drop_manifest, "missing manifest.json"),
        (garble_manifest, "unparseable manifest.json"),
        (lambda p: shutil.rmtree(p.parent), "missing directory"),
        (lambda p: p.unlink(), "missing state.pt"),
    ],
)
def test_damaged_newest_falls_back(tmp_path: Path, damage: Any, reason: str) -> None:
    ck = tmp_path / "ck"
    for step in (10, 20, 30):
        save(ck, step)
    damage(ck / "step-000030" / "state.pt")
    result = _ckpt.load(str(ck))
    assert result.loaded is not None and result.loaded.id == "step-000020"
    assert [r["id"] for r in result.rejected] == ["step-000030"]
    assert reason in result.rejected[0]["reason"]


def test_latest_naming_missing_dir_falls_back_to_older_only(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    for step in (10, 20):
        save(ck, step)
    save(ck, 40)
    (ck / "latest").write_text("step-000030\n")  # step-000040 exists but was never published
    result = _ckpt.load(str(ck))
    assert result.loaded is not None and result.loaded.id == "step-000020"
    assert result.rejected == [{"id": "step-000030", "reason": "missing directory"}]


def test_nothing_verifies_means_start_from_scratch(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    for step in (10, 20):
        save(ck, step)
    flip_byte(ck / "step-000020" / "state.pt")
    truncate(ck / "step-000010" / "state.pt")
    result = _ckpt.load(str(ck))
    assert result.loaded is None
    assert [r["id"] for r in result.rejected] == ["step-000020", "step-000010"]
    assert _ckpt.load(str(tmp_path / "never-written")) == _ckpt.LoadResult(None, [])


def test_without_latest_every_directory_is_a_candidate(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    for step in (10, 20):
        save(ck, step)
    (ck / "latest").unlink()
    result = _ckpt.load(str(ck))
    assert result.loaded is not None and result.loaded.id == "step-000020"
    (ck / "latest").write_text("garbage\n")
    result = _ckpt.load(str(ck))
    assert result.loaded is not None and result.loaded.id == "step-000020"
    assert result.rejected == [
        {"id": "garbage", "reason": "latest names 'garbage', not a checkpoint id"}
    ]


def test_load_unverified_accepts_a_flipped_byte(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    save(ck, 10)
    flip_byte(ck / "step-000010" / "state.pt")  # lands in the tensor's bytes: unpickles fine
    assert _ckpt.load(str(ck)).loaded is None
    result = _ckpt.load_unverified(str(ck))
    assert result.loaded is not None and not result.loaded.verified
    assert not torch.equal(result.loaded.state["w"], fake_state(10)["w"])


class SimulatedCrashError(Exception):
    """Stands for the process dying right after ``latest`` moved."""


@pytest.mark.parametrize("publish_before_durable", [False, True])
def test_crash_right_after_latest_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, publish_before_durable: bool
) -> None:
    ck = tmp_path / "ck"
    save(ck, 10)
    real = _ckpt.publish_latest

    def publish_then_die(ckpt_dir: str, cid: str) -> None:
        real(ckpt_dir, cid)
        raise SimulatedCrashError

    monkeypatch.setattr(_ckpt, "publish_latest", publish_then_die)
    with pytest.raises(SimulatedCrashError):
        save(ck, 20, publish_before_durable=publish_before_durable)
    assert _ckpt.read_latest(str(ck)) == "step-000020"
    result = _ckpt.load(str(ck))
    assert result.loaded is not None
    if publish_before_durable:  # latest names an empty state.pt: the good loader falls back
        assert result.loaded.id == "step-000010"
        assert "state.pt has 0 bytes" in result.rejected[0]["reason"]
        with pytest.raises(EOFError):  # the known-bad loader crashes instead
            _ckpt.load_unverified(str(ck))
    else:
        assert result.loaded.id == "step-000020" and result.rejected == []


def test_failed_durable_save_leaves_latest_and_no_leftovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ck = tmp_path / "ck"
    save(ck, 10)

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match="No space"):
        save(ck, 20)
    assert sorted(os.listdir(ck)) == ["latest", "step-000010"]
    assert _ckpt.read_latest(str(ck)) == "step-000010"


# --- in-process runs (world size 1) --------------------------------------------------


@dataclass
class Local:
    """A single-process run of the workload in this process."""

    tmp: Path
    n: int = 0
    base: dict[str, Any] = field(default_factory=dict)

    def run(self, **overrides: Any) -> list[dict[str, Any]]:
        self.n += 1
        events = self.tmp / f"ev{self.n}"
        os.environ["FAULTDRILL_EVENTS_DIR"] = str(events)
        cfg = lm.config_from_dict({**self.base, **overrides})
        lm.run(cfg)
        return read_events(events, 0)

    def restart_from(self, step: int) -> None:
        """Leave the checkpoint directory as a crash after ``step`` would have."""
        ck = Path(self.base["ckpt_dir"])
        for cid in _ckpt.list_checkpoints(str(ck)):
            if int(cid.split("-")[1]) > step:
                shutil.rmtree(ck / cid)
        (ck / "latest").write_text(_ckpt.ckpt_id(step) + "\n")


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Local]:
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FAULTDRILL_EVENTS_DIR", str(tmp_path / "ev0"))
    base = {"ckpt_dir": str(tmp_path / "ck"), "steps": 6, "ckpt_every": 3, "warmup_steps": 2}
    yield Local(tmp_path, base=base)


def test_local_run_events(local: Local) -> None:
    ev = local.run()
    saved = ["ckpt_save", "evaluation"]
    assert kinds(ev) == ["run_start", "ckpt_none", *saved, *saved, "run_end"]
    assert [(s, r) for s, r, _ in steps(ev)] == [(s, [[(s - 1) * 8, s * 8]]) for s in range(1, 7)]
    losses = [loss for _, _, loss in steps(ev)]
    assert losses[-1] < losses[0]
    saves = [e for e in ev if e["kind"] == "ckpt_save"]
    assert [(e["id"], e["data_position"]) for e in saves] == [
        ("step-000003", 24),
        ("step-000006", 48),
    ]
    assert one(ev, "run_end")["final_step"] == 6


def test_local_resume_is_bitwise_identical(local: Local) -> None:
    base = steps(local.run(dropout=0.1))
    digest = one(read_events(local.tmp / "ev1", 0), "run_end")["model_digest"]
    local.restart_from(3)
    ev = local.run(dropout=0.1)
    load = one(ev, "ckpt_load")
    assert (load["id"], load["verified"], load["data_position"]) == ("step-000003", True, 24)
    assert steps(ev) == base[3:]
    assert one(ev, "run_end")["model_digest"] == digest


def test_save_error_skip_and_crash(
    local: Local, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def read_only(*args: Any, **kwargs: Any) -> _ckpt.Saved:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(_ckpt, "save", read_only)
    ev = local.run(save_error="skip")
    failed = ["ckpt_save_failed", "evaluation"] * 2  # a failed save is still evaluated
    assert kinds(ev) == ["run_start", "ckpt_none", *failed, "run_end"]
    first = next(e for e in ev if e["kind"] == "ckpt_save_failed")
    assert (first["step"], first["errno"]) == (3, 30) and first["duration_s"] >= 0
    assert "checkpoint at step 3 not saved: [Errno 30] Read-only" in capfd.readouterr().err
    with pytest.raises(OSError, match="Read-only"):
        local.run(save_error="crash")
    crashed_events = read_events(local.tmp / f"ev{local.n}", 0)
    crashed = kinds(crashed_events)
    # what stopped training is recorded before the process goes
    assert crashed == ["run_start", "ckpt_none", "ckpt_save_failed", "worker_error"]
    assert "Read-only" in crashed_events[-1]["error"]


def samples_after_restart(local: Local, mode: str) -> tuple[list[dict[str, Any]], list[Any]]:
    good = steps(local.run())
    local.restart_from(3)
    ev = local.run(bad_mode=mode)
    return ev, good


def test_bad_mode_resume_ignored(local: Local) -> None:
    ev, good = samples_after_restart(local, "resume-ignored")
    assert kinds(ev)[:2] == ["run_start", "ckpt_none"]
    assert steps(ev) == good  # from step 1 and sample 0 again


def test_bad_mode_data_position_not_restored(local: Local) -> None:
    ev, _ = samples_after_restart(local, "data-position-not-restored")
    assert one(ev, "ckpt_load")["data_position"] == 24  # what the checkpoint says...
    assert [(s, r) for s, r, _ in steps(ev)] == [(4, [[0, 8]]), (5, [[8, 16]]), (6, [[16, 24]])]


def test_bad_mode_skip_ahead(local: Local) -> None:
    ev, _ = samples_after_restart(local, "skip-ahead")
    assert one(ev, "ckpt_load")["data_position"] == 24
    assert [(s, r) for s, r, _ in steps(ev)] == [(4, [[32, 40]]), (5, [[40, 48]]), (6, [[48, 56]])]


def test_bad_mode_optimizer_not_restored(local: Local) -> None:
    ev, good = samples_after_restart(local, "optimizer-not-restored")
    after = steps(ev)
    assert [(s, r) for s, r, _ in after] == [(s, r) for s, r, _ in good[3:]]
    assert after[0][2] == good[3][2]  # the first loss is computed before the optimizer runs
    assert after[1][2] != good[4][2]


def test_bad_mode_load_unverified(local: Local) -> None:
    local.run()
    local.restart_from(3)
    flip_byte(Path(local.base["ckpt_dir"]) / "step-000003" / "state.pt")
    ev = local.run(bad_mode="load-unverified")
    load = one(ev, "ckpt_load")
    assert (load["id"], load["verified"], load["data_position"]) == ("step-000003", False, 24)
    local.restart_from(3)  # step-000003 is still the damaged one: the good loader refuses it
    rejected = one(local.run(), "ckpt_none")["rejected"]
    assert [r["id"] for r in rejected] == ["step-000003"]


def evaluations(ev: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    return {e["step"]: e["metrics"] for e in ev if e["kind"] == "evaluation"}


def test_held_out_evaluation_export_and_data_identity(local: Local) -> None:
    export = local.tmp / "out" / "model.pt"
    ev = local.run(export_path=str(export))
    evals = evaluations(ev)
    assert sorted(evals) == [3, 6]  # at every checkpoint, the last step included
    for metrics in evals.values():
        assert set(metrics) == {"loss", "accuracy"} and 0.0 <= metrics["accuracy"] <= 1.0
    assert evals[6]["loss"] < evals[3]["loss"]  # it learns what it never trained on
    art = one(ev, "artifact")
    assert (art["name"], art["path"], art["step"]) == ("final-model", str(export), 6)
    assert hashlib.sha256(export.read_bytes()).hexdigest() == art["sha256"]
    assert art["bytes"] == export.stat().st_size
    assert kinds(ev)[-2:] == ["artifact", "run_end"]
    start = one(ev, "run_start")
    assert start["uid"] == os.getuid() and start["user"]
    cfg = lm.config_from_dict(local.base)
    assert start["data_digest"] == lm.Corpus(cfg).digest()
    assert lm.Corpus(dataclasses.replace(cfg, eval_size=8)).digest() != start["data_digest"]
    assert lm.config_digest(dataclasses.replace(cfg, eval_size=8)) != lm.config_digest(cfg)
    assert not list(export.parent.glob(".tmp-*"))  # written durably, nothing left behind
    # without export_path nothing is exported
    assert "artifact" not in kinds(local.run())


def test_resumed_evaluation_is_bitwise_identical(local: Local) -> None:
    good = evaluations(local.run())
    local.restart_from(3)
    assert evaluations(local.run()) == {6: good[6]}


def test_bad_mode_stale_eval_model(local: Local) -> None:
    good_ev = local.run()
    good = evaluations(good_ev)
    local.restart_from(3)
    ev = local.run(bad_mode="stale-eval-model")
    # training, its losses and the final model are exactly right ...
    assert steps(ev) == steps(good_ev)[3:]
    assert one(ev, "run_end")["model_digest"] == one(good_ev, "run_end")["model_digest"]
    # ... but the evaluation after the restart is of the model as loaded at step 3
    assert evaluations(ev) == {6: good[3]} and good[3] != good[6]


def test_bad_mode_stale_eval_model_is_harmless_without_a_restore(local: Local) -> None:
    good = evaluations(local.run())
    (Path(local.base["ckpt_dir"]) / "latest").unlink()
    for cid in _ckpt.list_checkpoints(local.base["ckpt_dir"]):
        shutil.rmtree(Path(local.base["ckpt_dir"]) / cid)
    assert evaluations(local.run(bad_mode="stale-eval-model")) == good


def test_bad_mode_publish_before_durable_is_harmless_without_a_fault(local: Local) -> None:
    good = local.run()
    local.restart_from(3)
    ev = local.run(bad_mode="publish-before-durable")
    assert one(ev, "ckpt_load")["verified"] and steps(ev) == steps(good)[3:]


def _process_state(pid: int) -> tuple[str, int] | None:
    """(state letter, session id) of a process, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[3])


def test_bad_mode_stale_replica_spawns_a_detached_replica(local: Local) -> None:
    ev = local.run(bad_mode="stale-replica", step_sleep_s=0.1)
    starts = [e for e in ev if e["kind"] == "run_start"]
    assert len(starts) == 2 and starts[0]["pid"] == os.getpid()
    stale = starts[1]["pid"]
    assert {e["pid"] for e in ev if e["kind"] == "step"} <= {os.getpid(), stale}
    # The job ended cleanly, so it told the replica to go; it went, from its own session.
    deadline = time.monotonic() + 5
    while (state := _process_state(stale)) is not None and state[0] != "Z":
        assert state[1] == stale, "the stale replica must lead its own session"
        assert time.monotonic() < deadline
        time.sleep(0.02)


# --- the stale replica process -------------------------------------------------------


def start_stale(tmp_path: Path, lifetime: int = 30) -> tuple[subprocess.Popen[bytes], int]:
    read_fd, write_fd = os.pipe()
    env = dict(os.environ, PYTHONPATH=SRC, FAULTDRILL_EVENTS_DIR=str(tmp_path / "ev"), RANK="1")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "faultdrill.workloads._stale", "--rank=1", "--world-size=2",
            "--global-batch=8", "--start-step=4", "--vocab=32", f"--parent-fd={read_fd}",
            "--interval=0.05", f"--lifetime={lifetime}",
        ],
        env=env,
        pass_fds=(read_fd,),
        start_new_session=True,
    )  # fmt: skip
    os.close(read_fd)
    return proc, write_fd


def wait_for_steps(events_dir: Path, n: int, timeout: float = 10) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ev = read_events(events_dir, 1)
        if len(steps(ev)) >= n:
            return ev
        time.sleep(0.02)
    raise AssertionError(f"fewer than {n} steps in {timeout} s")


def test_stale_replica_outlives_its_parent_and_dies_on_sigterm(tmp_path: Path) -> None:
    proc, parent_end = start_stale(tmp_path)
    try:
        os.write(parent_end, b"s7\n")  # the parent reached step 7...
        time.sleep(0.3)
        os.close(parent_end)  # ...and died without a clean end
        ev = wait_for_steps(tmp_path / "ev", 3)
        assert ev[0]["kind"] == "run_start" and ev[0]["pid"] == proc.pid
        assert [(s, r) for s, r, _ in steps(ev)][:3] == [
            (8, [[60, 64]]),
            (9, [[68, 72]]),
            (10, [[76, 80]]),
        ]
        listening = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout
        assert f"pid={proc.pid}," in listening
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=2) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_stale_replica_ends_with_a_clean_parent_or_its_lifetime(tmp_path: Path) -> None:
    proc, parent_end = start_stale(tmp_path / "a")
    timed = None
    try:
        os.write(parent_end, b"s3\n")
        time.sleep(0.5)
        # it lurks while the parent lives: no step of its own yet
        assert steps(read_events(tmp_path / "a" / "ev", 1)) == []
        os.write(parent_end, b"end\n")
        assert proc.wait(timeout=2) == 0
        timed, other_end = start_stale(tmp_path / "b", lifetime=1)
        assert timed.wait(timeout=5) == 0
        os.close(other_end)
    finally:
        os.close(parent_end)
        for p in (proc, timed):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


# --- the probe example ---------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_train.py"


def test_docs_show_the_complete_example() -> None:
    docs = (ROOT / "docs" / "probe.md").read_text()
    assert f"```python\n{EXAMPLE.read_text()}```" in docs


def test_example_runs_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def run_example(events: str) -> list[dict[str, Any]]:
        monkeypatch.setenv("FAULTDRILL_EVENTS_DIR", str(tmp_path / events))
        monkeypatch.setattr(sys, "argv", [str(EXAMPLE), str(tmp_path / "ck")])
        runpy.run_path(str(EXAMPLE), run_name="__main__")
        return read_events(tmp_path / events, 0)

    first = run_example("ev1")
    saved = ["ckpt_save", "evaluation"] * 3
    assert kinds(first) == ["run_start", "ckpt_none", *saved, "artifact", "run_end"]
    art = one(first, "artifact")
    assert hashlib.sha256(Path(art["path"]).read_bytes()).hexdigest() == art["sha256"]
    sha = hashlib.sha256((tmp_path / "ck" / "step-000020.pt").read_bytes()).hexdigest()
    (tmp_path / "ck" / "latest").write_text(f"step-000020.pt {sha}")  # as if killed at 25
    again = run_example("ev2")
    assert one(again, "ckpt_load")["data_position"] == 320
    assert steps(again) == steps(first)[20:]
    assert one(again, "run_end")["model_digest"] == one(first, "run_end")["model_digest"]
    evals = {e["step"]: e["metrics"] for e in first if e["kind"] == "evaluation"}
    assert [e["metrics"] for e in again if e["kind"] == "evaluation"] == [evals[30]]


# --- (c) real torchrun runs ----------------------------------------------------------


@dataclass
class TorchrunResult:
    rc: int
    events: dict[int, list[dict[str, Any]]]
    ckpt_dir: Path
    killed_at: int | None
    wall_s: float


def _live_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"faultdrill.workloads" in f.read()
    except OSError:
        return False


def torchrun(
    rundir: Path,
    cfg: dict[str, Any],
    *,
    kill_rank: int | None = None,
    kill_step: int = 0,
    timeout: float = 90,
) -> TorchrunResult:
    """Run the workload under real torchrun (1 agent, 2 workers), optionally SIGKILLing
    one worker once it reports ``kill_step``; kills whatever is left when it returns."""
    (rundir / "tmp").mkdir(parents=True)
    events_dir = rundir / "ev"
    ckpt_dir = rundir / "ck"
    config = write_config(rundir / "cfg.json", {"ckpt_dir": str(ckpt_dir), **cfg})
    env = dict(
        os.environ,
        PYTHONPATH=SRC,
        FAULTDRILL_EVENTS_DIR=str(events_dir),
        FAULTDRILL_TASK_ID=rundir.name,
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
        TMPDIR=str(rundir / "tmp"),
    )
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
        "--standalone", "--max-restarts=2", "--monitor-interval=0.1",
        "-m", "faultdrill.workloads.lm", f"--workload-config={config}",
    ]  # fmt: skip
    start = time.monotonic()
    killed_at = None
    with open(rundir / "torchrun.log", "wb") as log:
        agent = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        while agent.poll() is None and time.monotonic() - start < timeout:
            if kill_rank is not None and killed_at is None:
                ev = read_events(events_dir, kill_rank)
                done = steps(ev)
                if done and done[-1][0] >= kill_step:
                    os.kill([e for e in ev if e["kind"] == "run_start"][-1]["pid"], signal.SIGKILL)
                    killed_at = done[-1][0]
            time.sleep(0.02)
        rc = agent.wait(timeout=1)
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
        # Workers run in their own sessions: kill any the agent left behind.
        for rank in (0, 1):
            for e in read_events(events_dir, rank):
                if e["kind"] == "run_start" and _live_worker(e["pid"]):
                    os.kill(e["pid"], signal.SIGKILL)
    events = {rank: read_events(events_dir, rank) for rank in (0, 1)}
    return TorchrunResult(rc, events, ckpt_dir, killed_at, time.monotonic() - start)


DRILL_CFG = {"steps": 20, "ckpt_every": 10}


def per_rank_losses(result: TorchrunResult) -> dict[int, dict[int, set[float]]]:
    out: dict[int, dict[int, set[float]]] = {}
    for rank, ev in result.events.items():
        for step, _, loss in steps(ev):
            out.setdefault(rank, {}).setdefault(step, set()).add(loss)
    return out


@pytest.fixture(scope="module")
def fresh_runs(tmp_path_factory: pytest.TempPathFactory) -> list[TorchrunResult]:
    """Two fault-free runs of the same config, side by side (they share nothing but cores)."""
    dirs = [tmp_path_factory.mktemp(f"fresh{n}") for n in (0, 1)]
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda d: torchrun(d, DRILL_CFG), dirs))


@pytest.mark.drill
def test_torchrun_events(fresh_runs: list[TorchrunResult]) -> None:
    run = fresh_runs[0]
    assert run.rc == 0, (run.ckpt_dir.parent / "torchrun.log").read_text()
    digest = lm.config_digest(lm.config_from_dict({"ckpt_dir": "x", **DRILL_CFG}))
    for rank, ev in run.events.items():
        start = one(ev, "run_start")
        assert (start["world_size"], start["local_rank"], start["restart_count"]) == (2, rank, 0)
        assert start["config_digest"] == digest and start["task"] == run.ckpt_dir.parent.name
        assert one(ev, "ckpt_none")["rejected"] == []
        assert [(s, r) for s, r, _ in steps(ev)] == [
            (s, [[(s - 1) * 8 + rank * 4, (s - 1) * 8 + rank * 4 + 4]]) for s in range(1, 21)
        ]
        assert one(ev, "run_end")["final_step"] == 20
    saves = [e for e in run.events[0] if e["kind"] == "ckpt_save"]
    assert [(e["id"], e["step"], e["data_position"]) for e in saves] == [
        ("step-000010", 10, 80),
        ("step-000020", 20, 160),
    ]
    for e in saves:
        manifest = json.loads((Path(e["path"]).parent / "manifest.json").read_text())
        assert hashlib.sha256(Path(e["path"]).read_bytes()).hexdigest() == e["sha256"]
        assert (manifest["sha256"], manifest["bytes"]) == (e["sha256"], e["bytes"])
    assert not [e for e in run.events[1] if e["kind"] == "ckpt_save"]
    ends = {one(ev, "run_end")["model_digest"] for ev in run.events.values()}
    assert len(ends) == 1
    assert (run.ckpt_dir / "latest").read_text() == "step-000020\n"
    state = torch.load(io.BytesIO((run.ckpt_dir / "step-000020" / "state.pt").read_bytes()))
    assert len(state["rng"]) == 2 and state["data_position"] == 160


@pytest.mark.drill
def test_torchrun_fresh_runs_are_bitwise_identical(fresh_runs: list[TorchrunResult]) -> None:
    first, second = fresh_runs
    assert second.rc == 0
    assert per_rank_losses(first) == per_rank_losses(second)
    assert (
        one(first.events[0], "run_end")["model_digest"]
        == one(second.events[1], "run_end")["model_digest"]
    )


@pytest.mark.drill
def test_torchrun_kill_and_resume_is_bitwise_identical(
    tmp_path: Path, fresh_runs: list[TorchrunResult]
) -> None:
    run = torchrun(tmp_path, {**DRILL_CFG, "step_sleep_s": 0.05}, kill_rank=0, kill_step=12)
    assert run.rc == 0, (tmp_path / "torchrun.log").read_text()
    assert run.killed_at is not None and 12 <= run.killed_at < 20
    for ev in run.events.values():
        assert [e["restart_count"] for e in ev if e["kind"] == "run_start"] == [0, 1]
        load = one(ev, "ckpt_load")
        assert (load["id"], load["verified"], load["rejected"]) == ("step-000010", True, [])
    # Steps 11..killed_at ran twice, with the same losses as the fault-free run.
    assert per_rank_losses(run) == per_rank_losses(fresh_runs[0])
    assert (
        one(run.events[1], "run_end")["model_digest"]
        == one(fresh_runs[0].events[1], "run_end")["model_digest"]
    )
