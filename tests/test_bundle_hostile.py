"""Issue 21 (items 4, 5, 6, 7, 8, 13): bundles, keys and reports someone else wrote.

faultdrill runs as root; a bundle's plan names the programs ``replay`` runs. Each test is
the reported case (or a smaller one) and failed before the fix: a tampered bundle replayed
without a key, a malformed signature accepted without one, a link out of the run published
in the runbook, a GNU long-name header that makes tarfile allocate a gigabyte, a FIFO that
hangs ``verify --key`` and ``diff``, a bundle re-packed with ``tar -C DIR .`` that crashed
every reader, JSON nested past the recursion limit, a damaged gzip CRC trailer and an
unlisted directory member that verified. Bundles come from the recorded 0.1.0 fixture run;
no drill runs here.
"""

from __future__ import annotations

import base64
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from faultdrill.archive.bundle import extract_bundle, make_bundle, read_member, verify_bundle
from faultdrill.archive.replay import Trust, _open_source, replay_bundle
from faultdrill.archive.signing import keygen
from faultdrill.boundedjson import TooDeepError, loads
from faultdrill.errors import DrillError
from faultdrill.report.model import read_report
from faultdrill.report.runbook import render_runbook

FIXTURE = Path(__file__).parent / "fixtures" / "run-0.1.0-kill-worker.tar.xz"
SECRET = "root:$6$not-for-the-bundle$:19000:0:99999:7:::"


def _cli(
    *args: str, cap: int | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if cap is not None:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return subprocess.run(
        [sys.executable, "-m", "faultdrill.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=limit,
    )


def _one_clear_failure(done: subprocess.CompletedProcess[str], *rcs: int) -> None:
    assert done.returncode in (rcs or (1, 2)), done.stdout + done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert done.stdout.strip() or done.stderr.strip(), "failed without a word"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("hostile")
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(base, filter="data")
    keygen(base / "signer")
    make_bundle(base / "run", base / "plain.tar.gz")
    make_bundle(base / "run", base / "signed.tar.gz", sign=base / "signer")
    return base


def _members(archive: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(archive) as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar]  # type: ignore[union-attr]


def _rebuild(members: list[tuple[tarfile.TarInfo, bytes]], out: Path) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return out


def _replace(archive: Path, name: str, data: bytes, out: Path) -> Path:
    members = [(m, data if m.name.endswith("/" + name) else d) for m, d in _members(archive)]
    return _rebuild(members, out)


def _manifest_hash(archive: Path, name: str, data: bytes, out: Path) -> Path:
    """``name`` replaced by ``data`` and its hash updated in the manifest (the old
    manifest.sig kept): consistent, but not what the signer signed."""
    import hashlib

    manifest = json.loads(read_member(archive, "manifest.json"))
    manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    step = _replace(archive, name, data, out.with_suffix(".step.gz"))
    return _replace(step, "manifest.json", json.dumps(manifest, indent=2).encode(), out)


# --- item 4: replay verifies first; a bad signature fails without --key ---------------------


def _forged(work: Path, tmp_path: Path) -> Path:
    report = json.loads((work / "run" / "report.json").read_text())
    report["summary"]["passed"] = 999
    data = (json.dumps(report, indent=2) + "\n").encode()
    return _manifest_hash(work / "signed.tar.gz", "report.json", data, tmp_path / "f.tar.gz")


def test_replay_refuses_a_tampered_bundle_before_drilling(work: Path, tmp_path: Path) -> None:
    forged = _forged(work, tmp_path)
    assert verify_bundle(forged).ok, "precondition: integrity holds (the manifest re-hashed)"
    out = tmp_path / "replay"
    with pytest.raises(DrillError, match=r"--key PUB.*--unsigned"):
        replay_bundle(forged, "second-operator", out)  # no key, no waiver: refused
    with pytest.raises(DrillError, match="does not match the manifest"):
        replay_bundle(forged, "second-operator", out, trust=Trust(key=work / "signer.pub"))
    assert not out.exists(), "nothing was drilled"


def test_replay_of_an_unsigned_bundle_or_run_directory_needs_unsigned(
    work: Path, tmp_path: Path
) -> None:
    with pytest.raises(DrillError, match=r"not signed.*--unsigned"):
        replay_bundle(work / "plain.tar.gz", "op", tmp_path / "a")
    with pytest.raises(DrillError, match="run directory carries no signature"):
        replay_bundle(work / "run", "op", tmp_path / "b")
    run, _manifest, trust = _open_source(
        work / "signed.tar.gz", tmp_path, Trust(key=work / "signer.pub")
    )
    assert (run / "report.json").is_file() and "verified with key" in trust["origin"]
    (tmp_path / "u").mkdir()
    _run, _m, waived = _open_source(work / "plain.tar.gz", tmp_path / "u", Trust(unsigned=True))
    assert waived["unsigned"] is True and "NOT checked" in waived["origin"]


def _sig(work: Path) -> dict[str, object]:
    sig: dict[str, object] = json.loads(read_member(work / "signed.tar.gz", "manifest.sig"))
    return sig


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("signature", "TRUNCATED", "not the base64"),
        ("signature", "!!not base64!!" * 6 + "====", "not the base64"),
        ("signature", base64.b64encode(b"x" * 63).decode(), "not the base64"),
        ("key_id", ["x"], "key_id"),
        ("key_id", "zz", "key_id"),
        ("algorithm", "rsa", "algorithm"),
    ],
)
def test_a_malformed_signature_fails_verify_without_a_key(
    work: Path, tmp_path: Path, field: str, value: object, needle: str
) -> None:
    sig = _sig(work)
    sig[field] = value
    bad = _replace(
        work / "signed.tar.gz", "manifest.sig", json.dumps(sig).encode(), tmp_path / "b.tar.gz"
    )
    done = _cli("bundle", "verify", str(bad))
    _one_clear_failure(done, 1)
    assert needle in done.stdout and "manifest.sig is malformed" in done.stdout


def test_another_keys_well_formed_signature_is_said_to_be_unchecked(
    work: Path, tmp_path: Path
) -> None:
    """Without --key nothing can tell whose signature it is: exit 0, and the verdict says
    the origin was not checked; with the signer's key it fails."""
    keygen(tmp_path / "other")
    other = tmp_path / "other-run.tar.gz"
    make_bundle(work / "run", other, sign=tmp_path / "other")
    sig = read_member(other, "manifest.sig")
    swapped = _replace(work / "signed.tar.gz", "manifest.sig", sig, tmp_path / "s.tar.gz")
    done = _cli("bundle", "verify", str(swapped))
    assert done.returncode == 0 and "origin NOT checked" in done.stdout, done.stdout
    keyed = _cli("bundle", "verify", str(swapped), "--key", str(work / "signer.pub"))
    _one_clear_failure(keyed, 1)


def test_a_signature_removed_from_a_signed_bundle_fails(work: Path, tmp_path: Path) -> None:
    members = [(m, d) for m, d in _members(work / "signed.tar.gz") if not m.name.endswith(".sig")]
    res = verify_bundle(_rebuild(members, tmp_path / "nosig.tar.gz"))
    assert not res.ok and any("no manifest.sig" in p for p in res.problems)


# --- item 5: nothing from outside the run goes into the runbook or the bundle ----------------


def test_a_linked_workload_config_is_not_published(work: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(work / "run", run, symlinks=True)
    secret = tmp_path / "shadow"
    secret.write_text(SECRET + "\n")
    wl = run / "scenarios" / "kill-worker" / "workload.json"
    assert wl.is_file()
    wl.unlink()
    wl.symlink_to(secret)
    assert SECRET not in render_runbook(read_report(run), run)
    archive, _ = make_bundle(run, tmp_path / "b.tar.gz")
    for m, data in _members(archive):
        assert SECRET.encode() not in data, m.name


def test_a_recorded_workload_config_still_appears(work: Path) -> None:
    text = render_runbook(read_report(work / "run"), work / "run")
    assert "workload.json <<EOF" in text


# --- item 6: tar headers are bounded before tarfile allocates them -------------------------


def _long_name_bomb(path: Path, claimed: int) -> Path:
    """A GNU long-name header claiming ``claimed`` bytes, with a few KB of data behind it."""
    header = tarfile.TarInfo("././@LongLink")
    header.type = tarfile.GNUTYPE_LONGNAME
    header.size = claimed
    raw = header.tobuf(format=tarfile.GNU_FORMAT)
    import gzip

    with gzip.open(path, "wb") as f:
        f.write(raw + b"a" * 4096)
    return path


def test_a_gigabyte_long_name_header_is_refused_under_a_memory_cap(tmp_path: Path) -> None:
    bomb = _long_name_bomb(tmp_path / "bomb.tar.gz", 1 << 30)
    done = _cli("bundle", "verify", str(bomb), cap=768 << 20)
    _one_clear_failure(done, 1)
    assert "extended header" in done.stdout and "MemoryError" not in done.stdout


def test_a_chain_of_extended_headers_is_bounded(tmp_path: Path) -> None:
    buf = io.BytesIO()
    for _ in range(2000):  # tarfile reads a chain by recursion: RecursionError before
        h = tarfile.TarInfo("././@LongLink")
        h.type, h.size = tarfile.GNUTYPE_LONGNAME, 10
        buf.write(h.tobuf(format=tarfile.GNU_FORMAT) + b"x" * 10 + b"\0" * 502)
    path = tmp_path / "chain.tar"
    path.write_bytes(buf.getvalue() + b"\0" * 1024)
    res = verify_bundle(path)
    assert not res.ok and any("extended headers in a row" in p for p in res.problems)


# --- item 7: a FIFO never hangs a reader ----------------------------------------------------


def test_a_fifo_key_or_report_is_refused_at_once(work: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done = _cli("bundle", "verify", str(work / "signed.tar.gz"), "--key", str(fifo), timeout=60)
    _one_clear_failure(done, 2)
    assert "not a regular file" in done.stderr
    run = tmp_path / "run"
    shutil.copytree(work / "run", run, symlinks=True)
    (run / "report.json").unlink()
    os.mkfifo(run / "report.json")
    done = _cli("diff", str(work / "run"), str(run), timeout=60)
    _one_clear_failure(done, 2)
    assert "not a regular file" in done.stderr
    done = _cli("bundle", "verify", str(fifo), timeout=60)
    _one_clear_failure(done, 1)


# --- item 8: re-packed bundles, deep JSON, no traceback -------------------------------------


def test_a_bundle_repacked_with_tar_dot_is_accepted(work: Path, tmp_path: Path) -> None:
    """``tar czf r.tar.gz -C unpacked .`` stores ``./`` first and ``./run/...``: the same
    files, so it verifies (and its signature still holds: the manifest is unchanged)."""
    if shutil.which("tar") is None:
        pytest.skip("needs tar")
    unpacked = tmp_path / "unpacked"
    extract_bundle(work / "signed.tar.gz", unpacked)
    repacked = tmp_path / "r.tar.gz"
    subprocess.run(["tar", "czf", str(repacked), "-C", str(unpacked), "."], check=True)
    assert any(m.name in (".", "./") for m, _d in _members(repacked))
    res = verify_bundle(repacked, work / "signer.pub")
    assert res.ok, res.lines()
    assert json.loads(read_member(repacked, "report.json"))["task_id"]
    run = extract_bundle(repacked, tmp_path / "x")
    assert (run / "report.json").is_file()
    done = _cli("diff", str(work / "plain.tar.gz"), str(repacked))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr


@pytest.mark.parametrize("name", ["manifest.json", "manifest.sig", "report.json"])
def test_deeply_nested_json_is_a_clear_failure(work: Path, tmp_path: Path, name: str) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    bad = _replace(work / "signed.tar.gz", name, deep, tmp_path / "deep.tar.gz")
    done = _cli("bundle", "verify", str(bad))
    _one_clear_failure(done, 1)
    if name == "report.json":
        consistent = _manifest_hash(work / "plain.tar.gz", name, deep, tmp_path / "c.tar.gz")
        done = _cli("diff", str(work / "plain.tar.gz"), str(consistent))
        _one_clear_failure(done, 2)
        assert "nested" in done.stderr


def test_bounded_json_measures_nesting_outside_strings() -> None:
    assert loads('{"a": "[[[[", "b": [[1]]}', max_depth=3) == {"a": "[[[[", "b": [[1]]}
    with pytest.raises(TooDeepError):
        loads("[[[[1]]]]", max_depth=3)
    with pytest.raises(ValueError):
        loads(b"[" * 1_000_000)
    assert loads(r'["\\", "\"[[", [1]]', max_depth=2) == ["\\", '"[[', [1]]
    start = time.monotonic()  # escapes and unterminated strings cost linear time
    with pytest.raises(ValueError):
        loads(b'"\\' * 500_000)
    with pytest.raises(ValueError):
        loads(b'"' * 500_001)
    assert time.monotonic() - start < 5


# --- item 13: every byte counts, and every member is listed --------------------------------


def test_a_flipped_gzip_crc_trailer_fails(work: Path, tmp_path: Path) -> None:
    data = bytearray((work / "plain.tar.gz").read_bytes())
    data[-6] ^= 0x01  # inside the CRC32 of the trailer
    bad = tmp_path / "crc.tar.gz"
    bad.write_bytes(bytes(data))
    done = _cli("bundle", "verify", str(bad))
    _one_clear_failure(done, 1)
    assert "CRC" in done.stdout


def test_an_unlisted_directory_member_fails(work: Path, tmp_path: Path) -> None:
    members = _members(work / "plain.tar.gz")
    extra = tarfile.TarInfo(members[0][0].name.split("/")[0] + "/stowaway")
    extra.type = tarfile.DIRTYPE
    res = verify_bundle(_rebuild([*members, (extra, b"")], tmp_path / "d.tar.gz"))
    assert not res.ok and res.added == ["stowaway/ (a directory)"]


def test_data_after_the_end_of_the_archive_fails(work: Path, tmp_path: Path) -> None:
    import gzip

    raw = gzip.decompress((work / "plain.tar.gz").read_bytes())
    bad = tmp_path / "tail.tar.gz"
    bad.write_bytes(gzip.compress(raw + b"#!/bin/sh\nrm -rf /\n" + b"\0" * 512))
    res = verify_bundle(bad)
    assert not res.ok and any("after the end" in p for p in res.problems)


@pytest.mark.parametrize(
    ("trust", "en", "zh"),
    [
        ({"unsigned": True, "key_id": None}, "NOT checked", "--unsigned"),
        ({"unsigned": False, "key_id": "0123456789abcdef"}, "0123456789abcdef", "0123456789abcdef"),
        ({"unsigned": True, "no_verify": True}, "NOT verified", "--no-verify"),
    ],
)
def test_the_replay_report_says_what_was_checked_of_the_bundle(
    trust: dict[str, object], en: str, zh: str
) -> None:
    from faultdrill.i18n import translator
    from faultdrill.report.html.sections import replay_html
    from faultdrill.report.model import Report
    from tests.report_data import synthetic_report

    data = synthetic_report()
    dossier = data["baseline"].setdefault("dossier", {}) or {}
    dossier["replay"] = {"operator": "op", "bundle": "b.tar.gz", "source_trust": trust}
    data["baseline"]["dossier"] = dossier
    report = Report.from_json(data)
    assert en in replay_html(translator("en"), report, None)
    assert zh in replay_html(translator("zh"), report, None)
