"""The evidence bundle of the shared recorded drill: contents, manifest, tamper detection.

Every test works on the bundle the demo itself wrote (or on copies of it); verification must
catch a flipped byte, a removed file and an added file, and the unpacked bundle must be a run
directory the checks judge exactly as the original.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from faultdrill.archive.bundle import (
    BundleError,
    extract_bundle,
    make_bundle,
    read_member,
    verify_bundle,
)
from faultdrill.cli import main
from tests.recorded_run import RecordedDemo

pytestmark = pytest.mark.drill


@pytest.fixture(scope="module")
def bundle(recorded_demo: RecordedDemo) -> Path:
    assert recorded_demo.rc == 0, recorded_demo.stdout + recorded_demo.stderr
    path = recorded_demo.printed("bundle")
    assert path.is_file() and path.name.endswith(".bundle.tar.gz")
    return path


def _rewrite(src: Path, dest: Path, change: str, name: str = "") -> None:
    """Copy a bundle member by member, modifying one member, dropping it, or adding one."""
    with tarfile.open(src, "r:gz") as tin, tarfile.open(dest, "w:gz") as tout:
        root = ""
        for m in tin:
            root = m.name.split("/")[0]
            data = tin.extractfile(m).read() if m.isfile() else None  # type: ignore[union-attr]
            if m.name.endswith("/" + name) and change == "drop":
                continue
            if data is not None and m.name.endswith("/" + name) and change == "flip":
                i = len(data) // 2
                data = data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]
                m.size = len(data)
            tout.addfile(m, io.BytesIO(data) if data is not None else None)
        if change == "add":
            info = tarfile.TarInfo(f"{root}/{name}")
            payload = b"#!/bin/sh\necho not part of the evidence\n"
            info.size = len(payload)
            tout.addfile(info, io.BytesIO(payload))


def test_demo_printed_where_the_deliverables_are(recorded_demo: RecordedDemo) -> None:
    html = recorded_demo.printed("report")
    assert html == recorded_demo.run_dir / "report.html" and html.is_file()
    assert recorded_demo.printed("report (Markdown)").is_file()
    assert recorded_demo.printed("junit").is_file()
    assert "manifest sha256" in recorded_demo.stdout


def test_bundle_holds_every_attachment(bundle: Path, recorded_demo: RecordedDemo) -> None:
    res = verify_bundle(bundle)
    assert res.ok, res.lines()
    m = res.manifest
    files = m["files"]
    assert m["tool"] == {"name": "faultdrill", "version": "0.1.0"}
    report = json.loads(read_member(bundle, "report.json"))
    assert m["plan_digest"] == report["plan_digest"]
    env = m["environment"]
    for side in ("recorded", "bundled_on"):
        assert env[side]["python"] and env[side]["torch"] and env[side]["host"]
    # every file is listed with its sha256, and the hashes are right
    for name in ("plan.yaml", "plan.json", "baseline/dossier.json", "report.json"):
        assert name in files
        assert files[name]["sha256"] == hashlib.sha256(read_member(bundle, name)).hexdigest()
    for lang in ("en", "zh"):
        assert f"report.{lang}.html" in files and f"report.{lang}.md" in files
    assert "runbook.md" in files and "runbook.zh.md" in files
    c = m["contents"]
    assert any(n.startswith("scenarios/kill-worker/events/") for n in c["event_export"])
    assert "scenarios/kill-worker/ledger.jsonl" in c["ledgers"]
    # the fault script carries the command actually run, from the fault event
    script = read_member(bundle, "faults/scenario-kill-worker.sh").decode()
    assert "kill -KILL " in script and "signal: SIGKILL pid" in script
    inv = json.loads(read_member(bundle, "checkpoint-inventory.json"))
    ids = [c["id"] for c in inv["scenario/kill-worker"]["checkpoints"]]
    assert "step-000010" in ids and inv["scenario/kill-worker"]["latest"]["target"] == "step-000025"
    # checkpoint files and torchrun temp folders stay out; their inventory is in
    assert not any("/ckpt/" in n or "/tmp/" in n for n in files)
    runbook = read_member(bundle, "runbook.md").decode()
    for heading in (
        "kill-worker",
        "ctl-optimizer-lost",
        "Stop conditions",
        "Expected observations",
    ):
        assert heading in runbook
    assert "python -m faultdrill.platforms.local.agent" in runbook


@pytest.mark.parametrize(
    ("change", "name", "field"),
    [
        ("flip", "scenarios/kill-worker/events/probe-rank1.jsonl", "modified"),
        ("flip", "report.json", "modified"),
        ("drop", "faults/scenario-kill-worker.sh", "missing"),
        ("drop", "baseline/dossier.json", "missing"),
        ("add", "faults/extra.sh", "added"),
    ],
)
def test_verify_catches_tampering(
    bundle: Path, tmp_path: Path, change: str, name: str, field: str
) -> None:
    bad = tmp_path / "bad.tar.gz"
    _rewrite(bundle, bad, change, name)
    res = verify_bundle(bad)
    assert not res.ok
    assert getattr(res, field) == [name]
    assert main(["bundle", "verify", str(bad)]) == 1
    with pytest.raises(BundleError, match=name.replace(".", r"\.")):
        extract_bundle(bad, tmp_path / "out")


def test_verify_catches_a_flipped_byte_in_the_archive_itself(bundle: Path, tmp_path: Path) -> None:
    raw = bytearray(bundle.read_bytes())
    # inside the compressed stream: gzip's CRC or tar's checksums must notice
    raw[len(raw) // 2] ^= 0x01
    bad = tmp_path / "flipped.tar.gz"
    bad.write_bytes(bytes(raw))
    res = verify_bundle(bad)
    assert not res.ok, res.lines()
    # and the same byte flipped in an uncompressed copy names the file it hit
    plain = tmp_path / "plain.tar"
    plain.write_bytes(gzip.decompress(bundle.read_bytes()))
    with tarfile.open(plain) as tar:
        member = next(
            m for m in tar if m.name.endswith("/scenarios/kill-worker/events/fault.jsonl")
        )
        offset = member.offset_data + member.size // 2
    data = bytearray(plain.read_bytes())
    data[offset] ^= 0x01
    plain.write_bytes(bytes(data))
    res = verify_bundle(plain)
    assert res.modified == ["scenarios/kill-worker/events/fault.jsonl"]


def test_unpacked_bundle_is_a_run_that_judges_the_same(
    bundle: Path, recorded_demo: RecordedDemo, tmp_path: Path
) -> None:
    from faultdrill.judge.evaluate import evaluate_run

    run = extract_bundle(bundle, tmp_path / "x")
    original = json.loads((recorded_demo.run_dir / "report.json").read_text())
    again = evaluate_run(run).to_report().to_json()
    got = {
        s["id"]: (s["verdict"], s["recovery_class"], s.get("caught")) for s in again["scenarios"]
    }
    want = {
        s["id"]: (s["verdict"], s["recovery_class"], s.get("caught")) for s in original["scenarios"]
    }
    assert got == want
    # re-bundling the unpacked run works too (generated files are regenerated, not doubled)
    again_path, manifest = make_bundle(run, tmp_path / "again.tar.gz")
    assert verify_bundle(again_path).ok
    assert set(manifest["files"]) >= {"runbook.md", "report.en.html", "plan.yaml"}


def test_bundle_cli_and_bad_input(recorded_demo: RecordedDemo, tmp_path: Path) -> None:
    out = tmp_path / "b.tar.gz"
    copy = tmp_path / "run"
    shutil.copytree(recorded_demo.run_dir, copy, ignore=shutil.ignore_patterns("ckpt", "tmp"))
    assert main(["bundle", str(copy), "--out", str(out), "--lang", "zh"]) == 0
    assert "恢复手册" in read_member(out, "runbook.md").decode()
    assert main(["bundle", "verify", str(out)]) == 0
    assert main(["bundle", str(tmp_path / "nope")]) == 2
    assert main(["bundle", "verify", str(tmp_path / "nope.tar.gz")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["bundle", str(tmp_path / "empty")]) == 2  # no report.json: clear message
