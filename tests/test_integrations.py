"""The framework-neutral parts of the integrations: observed sample ids, checkpoint
manifests, DCP directories and loader positions, and the import hygiene of the core."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from faultdrill.integrations import ckptdir
from faultdrill.integrations.digest import model_digest
from faultdrill.integrations.observe import (
    SAMPLE_KEY,
    ObservedCollator,
    ObservedDataset,
    StepRecorder,
    TaggedItem,
    take_indices,
)
from faultdrill.probe import Probe

# --- import hygiene -------------------------------------------------------------------


def test_probe_core_and_neutral_integrations_import_without_the_frameworks() -> None:
    # Each framework blocked (None in sys.modules makes its import fail): the probe, the
    # CLI and the framework-neutral integration modules must not need them.
    code = """
import sys
blocked = ("transformers", "accelerate", "pytorch_lightning", "lightning",
           "lightning_fabric", "torchdata")
for name in blocked:
    sys.modules[name] = None
import faultdrill.probe, faultdrill.cli, faultdrill.plan, faultdrill.checks
import faultdrill.integrations, faultdrill.integrations.observe
import faultdrill.integrations.ckptdir, faultdrill.integrations.dcp
import faultdrill.integrations.digest
loaded = [m for m in ("torch", *blocked) if sys.modules.get(m) is not None]
print(",".join(loaded))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == ""  # not even torch: the probe side stays std-lib only


def test_an_integration_without_its_framework_fails_with_an_import_error() -> None:
    code = """
import sys
sys.modules["transformers"] = None
try:
    import faultdrill.integrations.transformers
except ImportError as exc:
    print("ImportError", "transformers" in str(exc))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["ImportError", "True"]


# --- observed sample ids --------------------------------------------------------------


class _Items:
    def __init__(self, n: int, mapping: bool = True) -> None:
        self.n, self.mapping, self.name = n, mapping, "items"

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return {"x": torch.tensor([float(i)])} if self.mapping else torch.tensor([float(i)])


def test_the_dataset_tags_each_item_with_its_index_in_a_mapping_that_is_not_a_dict() -> None:
    ds = ObservedDataset(_Items(5))
    item = ds[3]
    assert isinstance(item, TaggedItem) and not isinstance(item, dict)
    assert item[SAMPLE_KEY] == 3 and set(item) == {"x", SAMPLE_KEY}
    assert len(ds) == 5 and ds.name == "items"  # attributes come from the wrapped dataset
    assert isinstance(ObservedDataset(_Items(5, mapping=False))[1], torch.Tensor)


def test_the_collator_hands_plain_items_to_the_inner_one_and_adds_the_indices() -> None:
    seen: list[Any] = []

    def inner(features: list[Any]) -> dict[str, Any]:
        seen.extend(features)
        return {"x": torch.cat([f["x"] for f in features])}

    ds = ObservedDataset(_Items(8))
    batch = ObservedCollator(inner)([ds[6], ds[2]])
    assert all(type(f) is dict and SAMPLE_KEY not in f for f in seen)
    assert batch[SAMPLE_KEY] == [6, 2]
    assert take_indices(batch) == [6, 2] and SAMPLE_KEY not in batch
    assert take_indices(batch) is None  # popped: the model never sees it
    assert take_indices({SAMPLE_KEY: torch.tensor([4, 5])}) == [4, 5]
    assert take_indices((torch.zeros(1),)) is None


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_the_step_recorder_writes_one_step_per_optimizer_step(tmp_path: Path) -> None:
    probe = Probe(tmp_path, rank=0)
    rec = StepRecorder(probe, size=100, combine="sum")
    rec.micro_batch(0, [7, 3], 0.5)
    rec.micro_batch(0, [4], 0.25)
    rec.step(1)
    rec.micro_batch(2, [7], 1.0)  # epoch 2: a different consumption of index 7
    rec.step(2)
    rec.micro_batch(2, [1], 1.0)
    rec.micro_batch(2, None, 1.0)  # one blind micro-batch: the step carries no ids at all
    rec.step(3)
    steps = [e for e in _events(tmp_path / "probe-rank0.jsonl") if e["kind"] == "step"]
    assert [(e["step"], e["loss"], e["samples"]) for e in steps] == [
        (1, 0.75, [[3, 5], [7, 8]]),
        (2, 1.0, [[207, 208]]),
        (3, 2.0, []),
    ]
    assert (rec.consumed, rec.unobserved) == (4, 1)
    assert "ObservedDataset" in rec.why_unobserved


def test_the_step_recorder_keeps_a_duplicate_inside_a_step_visible(tmp_path: Path) -> None:
    probe = Probe(tmp_path, rank=1)
    rec = StepRecorder(probe, size=10, combine="mean")
    rec.micro_batch(0, [2, 3], 1.0)
    rec.micro_batch(0, [3], 2.0)
    rec.step(1)
    [step] = [e for e in _events(tmp_path / "probe-rank1.jsonl") if e["kind"] == "step"]
    assert (step["loss"], step["samples"]) == (1.5, [[2, 4], [3, 4]])


# --- checkpoint manifests -------------------------------------------------------------


def _checkpoint_dir(root: Path, name: str) -> Path:
    ckpt = root / name
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "model.bin").write_bytes(b"weights" * 100)
    (ckpt / "sub" / "rng.pth").write_bytes(b"rng")
    return ckpt


def test_a_sealed_directory_verifies_until_any_file_changes(tmp_path: Path) -> None:
    ckpt = _checkpoint_dir(tmp_path, "checkpoint-8")
    m = ckptdir.write_manifest(ckpt, main="model.bin", step=8, data_position=128)
    assert (m.id, m.step, m.data_position, m.path) == ("checkpoint-8", 8, 128, ckpt / "model.bin")
    body = json.loads((ckpt / "manifest.json").read_text())
    assert (body["file"], body["bytes"]) == ("model.bin", 700)
    assert sorted(body["files"]) == ["model.bin", "sub/rng.pth"]
    assert ckptdir.verify(ckpt)[0] == m
    (ckpt / "sub" / "rng.pth").write_bytes(b"RNG")
    assert ckptdir.verify(ckpt) == (
        None,
        "checkpoint-8: sub/rng.pth sha256 differs from the manifest's",
    )
    (ckpt / "sub" / "rng.pth").unlink()
    assert ckptdir.verify(ckpt) == (None, "checkpoint-8: sub/rng.pth is missing")


def test_a_directory_without_manifest_never_completed(tmp_path: Path) -> None:
    ckpt = _checkpoint_dir(tmp_path, "checkpoint-16")
    assert ckptdir.verify(ckpt) == (
        None,
        "checkpoint-16: no manifest.json: its save never completed",
    )
    with pytest.raises(FileNotFoundError):
        ckptdir.write_manifest(ckpt, main="absent.bin", step=16, data_position=0)


def test_a_single_file_checkpoint_has_a_sidecar_manifest(tmp_path: Path) -> None:
    file = tmp_path / "step-000008.ckpt"
    file.write_bytes(b"x" * 10)
    m = ckptdir.write_manifest(file, main=file.name, step=8, data_position=64)
    assert ckptdir.manifest_path(file) == tmp_path / "step-000008.ckpt.manifest.json"
    assert (m.id, m.path) == ("step-000008.ckpt", file)
    file.write_bytes(b"x" * 11)
    assert ckptdir.verify(file) == (
        None,
        "step-000008.ckpt: step-000008.ckpt has 11 bytes, the manifest says 10",
    )


def test_the_newest_checkpoint_that_verifies_and_the_ones_refused(tmp_path: Path) -> None:
    for step in (4, 8, 12, 16):
        ckpt = _checkpoint_dir(tmp_path, f"checkpoint-{step}")
        if step != 16:  # the newest never completed its save
            ckptdir.write_manifest(ckpt, main="model.bin", step=step, data_position=step)
    (tmp_path / "checkpoint-12" / "model.bin").write_bytes(b"torn")
    (tmp_path / "latest").write_text("checkpoint-8\n")
    (tmp_path / "runs").mkdir()
    found, rejected = ckptdir.newest_verified(tmp_path, prefix="checkpoint-")
    assert found is not None and found.id == "checkpoint-8"
    assert rejected == [
        {
            "id": "checkpoint-16",
            "reason": "checkpoint-16: no manifest.json: its save never completed",
        },
        {
            "id": "checkpoint-12",
            "reason": "checkpoint-12: model.bin has 4 bytes, the manifest says 700",
        },
    ]
    assert ckptdir.newest_verified(tmp_path / "absent") == (None, [])


def test_publish_moves_the_pointer_durably(tmp_path: Path) -> None:
    ckptdir.publish(tmp_path, "checkpoint-8", sha256="ab12")
    assert (tmp_path / "latest").read_text() == "checkpoint-8 ab12\n"
    ckptdir.publish(tmp_path, "checkpoint-9", latest_file="")
    assert (tmp_path / "latest").read_text() == "checkpoint-8 ab12\n"
    assert not list(tmp_path.glob(".*tmp*"))


def test_the_model_digest_depends_on_every_value_and_key() -> None:
    torch.manual_seed(0)
    a = torch.nn.Linear(3, 2)
    b = torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert model_digest(a) == model_digest(b)
    with torch.no_grad():
        b.bias[0] += 1e-6
    assert model_digest(a) != model_digest(b)
