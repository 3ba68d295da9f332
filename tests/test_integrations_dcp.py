"""DCP directories (saved for real with ``torch.distributed.checkpoint``, one process) and
``StatefulDataLoader`` positions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from faultdrill.integrations import dcp as fd_dcp
from faultdrill.probe import Probe


def _save(path: Path, scale: float = 1.0) -> dict[str, Any]:
    state = {"w": torch.arange(64.0) * scale, "b": torch.ones(8)}
    dcp_save(state, checkpoint_id=str(path))
    return state


def _events(events: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (events / "probe-rank0.jsonl").read_text().splitlines()]


def test_a_saved_dcp_directory_is_complete_and_reported_once_sealed(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    path = root / "step-000010"
    _save(path)
    assert fd_dcp.is_complete(path) == (True, "")
    probe = Probe(tmp_path / "events", rank=0)
    manifest = fd_dcp.report_saved(probe, path, step=10, data_position=160)
    assert manifest is not None and manifest.file == ".metadata"
    assert (root / "latest").read_text().split()[0] == "step-000010"
    [saved] = _events(tmp_path / "events")
    assert (saved["kind"], saved["id"], saved["step"], saved["data_position"]) == (
        "ckpt_save",
        "step-000010",
        10,
        160,
    )
    assert saved["path"] == str(path / ".metadata") and saved["sha256"] == manifest.sha256
    assert fd_dcp.verify_for_load(path)[0] == manifest
    state: dict[str, Any] = {"w": torch.zeros(64), "b": torch.zeros(8)}
    dcp_load(state, checkpoint_id=str(manifest.target))  # what a resume then does
    assert torch.equal(state["w"], torch.arange(64.0))


def test_a_dcp_directory_without_metadata_or_with_a_short_file_is_incomplete(
    tmp_path: Path,
) -> None:
    path = tmp_path / "step-000020"
    _save(path)
    [data] = [p for p in path.iterdir() if p.suffix == ".distcp"]
    data.write_bytes(data.read_bytes()[:10])
    ok, why = fd_dcp.is_complete(path)
    assert not ok and why.startswith(f"step-000020: {data.name} is shorter than .metadata says (")
    data.unlink()
    assert fd_dcp.is_complete(path) == (
        False,
        f"step-000020: {data.name} listed in .metadata is missing",
    )
    (path / ".metadata").unlink()
    assert fd_dcp.is_complete(path) == (
        False,
        "step-000020: no .metadata: the save never completed",
    )


def test_an_incomplete_directory_is_reported_as_a_failed_save_never_as_saved(
    tmp_path: Path,
) -> None:
    path = tmp_path / "step-000030"
    _save(path)
    (path / ".metadata").unlink()
    probe = Probe(tmp_path / "events", rank=0)
    with pytest.raises(fd_dcp.IncompleteCheckpointError):
        fd_dcp.report_saved(probe, path, step=30, data_position=480)
    [failed] = _events(tmp_path / "events")
    assert failed["kind"] == "ckpt_save_failed" and "no .metadata" in failed["error"]
    assert not (tmp_path / "latest").exists()


def test_the_newest_loadable_directory_skips_incomplete_and_changed_ones(tmp_path: Path) -> None:
    probe = Probe(tmp_path / "events", rank=0)
    for step in (10, 20, 30):
        _save(tmp_path / f"step-{step:06d}", scale=step)
        fd_dcp.report_saved(probe, tmp_path / f"step-{step:06d}", step=step, data_position=step)
    (tmp_path / "step-000030" / ".metadata").unlink()
    [data] = list((tmp_path / "step-000020").glob("*.distcp"))
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 1
    data.write_bytes(bytes(raw))
    found, rejected = fd_dcp.newest_loadable(tmp_path, prefix="step-")
    assert found is not None and found.id == "step-000010"
    assert [(r["id"], r["reason"].split(": ", 1)[1]) for r in rejected] == [
        ("step-000030", "no .metadata: the save never completed"),
        ("step-000020", f"{data.name} sha256 differs from the manifest's"),
    ]


def test_the_data_position_comes_from_the_loaders_own_state() -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    data: Any = list(range(64))  # any sized indexable will do
    sampler: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
        data, num_replicas=2, rank=1, shuffle=True, seed=3
    )
    loader = stateful.StatefulDataLoader(data, batch_size=4, sampler=sampler)
    batches = iter(loader)
    for _ in range(3):
        next(batches)
    state = loader.state_dict()
    assert fd_dcp.loader_position(state) == 12
    assert fd_dcp.data_position(state, epoch=2, epoch_len=64, world_size=2) == 2 * 64 + 24
    assert fd_dcp.loader_position({"_num_yielded": 5}, batch_size=4) == 20
    with pytest.raises(ValueError, match="pass batch_size"):
        fd_dcp.loader_position({"_num_yielded": 5})


def test_the_parts_saved_come_back_with_the_load(tmp_path: Path) -> None:
    path = tmp_path / "step-000010"
    saved = _save(path)
    probe = Probe(tmp_path / "events", rank=0)
    parts = fd_dcp.state_components(saved)
    fd_dcp.report_saved(probe, path, step=10, data_position=160, components=parts)
    [save, digests] = _events(tmp_path / "events")
    assert save["kind"] == "ckpt_save"
    assert (digests["kind"], digests["id"], digests["phase"]) == (
        "ckpt_components",
        "step-000010",
        "saved",
    )
    assert sorted(digests["components"]) == ["b", "w"]
    state: dict[str, Any] = {"w": torch.zeros(64), "b": torch.zeros(8)}
    assert fd_dcp.state_components(state) != digests["components"]
    dcp_load(state, checkpoint_id=str(path))
    assert fd_dcp.state_components(state) == digests["components"]


def test_without_faultdrill_nothing_is_written_and_a_complete_directory_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FAULTDRILL_EVENTS_DIR", raising=False)
    for step in (10, 20):
        _save(tmp_path / f"step-{step:06d}")
        assert fd_dcp.report_saved(Probe(None), tmp_path / f"step-{step:06d}", step=step,
                                   data_position=step) is None  # fmt: skip
    (tmp_path / "step-000020" / ".metadata").unlink()
    assert (
        sorted(p.name for p in tmp_path.rglob("*") if "manifest" in p.name or p.name == "latest")
        == []
    )
    found, rejected = fd_dcp.newest_loadable(tmp_path, prefix="step-")
    assert found is not None and (found.id, found.step) == ("step-000010", 10)
    assert [r["id"] for r in rejected] == ["step-000020"]
