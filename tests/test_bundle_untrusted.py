"""A bundle is untrusted input: ``bundle verify`` streams its members (no MemoryError on a
multi-GB member, under a memory cap), refuses a member stored twice (a second manifest
appended), names that climb out, links and devices; signed bundles (Ed25519 over the
manifest) prove who vouches for them, and a consistent forgery fails ``verify --key``.

Bundles are made from the recorded 0.1.0 fixture run (no drill runs here); hostile
archives are rebuilt from a real bundle's members with :mod:`tarfile`, the sparse
multi-GB member with GNU tar (``--sparse``: a few hundred bytes on disk)."""

from __future__ import annotations

import hashlib
import io
import json
import resource
import shutil
import stat
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from faultdrill.archive.bundle import extract_bundle, make_bundle, verify_bundle
from faultdrill.archive.signing import SigningKeyError, keygen
from faultdrill.errors import RunDirError

FIXTURE = Path(__file__).parent / "fixtures" / "run-0.1.0-kill-worker.tar.xz"
GIB = 1 << 30
#: Address-space cap of the verifying process: a faultdrill verify needs ~60 MB resident.
CAP = 768 << 20


def _cli(
    *args: str, cap: int | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if cap is not None:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return subprocess.run(
        [sys.executable, "-m", "faultdrill.cli", *args],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
        preexec_fn=limit,
        cwd=cwd,
    )


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture run, a key pair, and a signed and an unsigned bundle of the run."""
    base = tmp_path_factory.mktemp("bundles")
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


def _edit(
    members: list[tuple[tarfile.TarInfo, bytes]], name: str, fn: Callable[[bytes], bytes]
) -> list[tuple[tarfile.TarInfo, bytes]]:
    return [(m, fn(d) if m.name.endswith("/" + name) else d) for m, d in members]


def _forged(signed: Path, out: Path) -> Path:
    """The consistent forgery: report.json edited and its hash updated in the manifest
    (manifest.sig left as it was)."""
    members = _members(signed)
    forged_report = b""

    def edit_report(data: bytes) -> bytes:
        nonlocal forged_report
        report = json.loads(data)
        report["summary"]["passed"] = 999  # a claim the run never made
        forged_report = (json.dumps(report, indent=2) + "\n").encode()
        return forged_report

    members = _edit(members, "report.json", edit_report)

    def edit_manifest(data: bytes) -> bytes:
        manifest = json.loads(data)
        manifest["files"]["report.json"] = {
            "sha256": hashlib.sha256(forged_report).hexdigest(),
            "size": len(forged_report),
        }
        return (json.dumps(manifest, indent=2) + "\n").encode()

    return _rebuild(_edit(members, "manifest.json", edit_manifest), out)


# --- the archive is written, never through a link ---------------------------------------------


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "run"


@pytest.fixture()
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "victim.txt"
    path.parent.mkdir()
    path.write_text("not yours\n")
    return path


def test_bundle_does_not_write_through_a_link_at_its_temporary_name(
    run: Path, victim: Path
) -> None:
    """The archive used to be written to ``OUT.part`` (a name anyone could predict)."""
    out = run.parent / "run.bundle.tar.gz"
    Path(f"{out}.part").symlink_to(victim)
    done = _cli("bundle", str(run))
    assert victim.read_text() == "not yours\n", "bundle wrote through OUT.part"
    assert done.returncode == 0, done.stderr
    assert out.is_file() and not out.is_symlink()


def test_bundle_refuses_a_link_at_its_output(run: Path, victim: Path) -> None:
    out = run.parent / "out.tar.gz"
    out.symlink_to(victim)
    done = _cli("bundle", str(run), "--out", str(out))
    assert victim.read_text() == "not yours\n"
    assert done.returncode == 2 and "symbolic link" in done.stderr, done.stderr


# --- keys ----------------------------------------------------------------------------------


def test_keygen_makes_a_private_key_only_its_owner_reads_and_never_overwrites(
    tmp_path: Path,
) -> None:
    done = _cli("keygen", "--out", str(tmp_path / "k"))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in (tmp_path / "k").read_bytes()
    assert b"PUBLIC KEY" in (tmp_path / "k.pub").read_bytes()
    assert "key id" in done.stdout
    before = (tmp_path / "k").read_bytes()
    again = _cli("keygen", "--out", str(tmp_path / "k"))
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr
    assert (tmp_path / "k").read_bytes() == before
    (tmp_path / "only.pub").write_text("someone's\n")
    with pytest.raises(SigningKeyError, match=r"only\.pub exists"):
        keygen(tmp_path / "only")
    assert not (tmp_path / "only").exists()


def test_a_signing_key_readable_by_others_is_refused(work: Path, tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    shutil.copy(work / "signer", loose)
    loose.chmod(0o644)
    done = _cli(
        "bundle", str(work / "run"), "--out", str(tmp_path / "b.tar.gz"), "--sign", str(loose)
    )
    assert done.returncode == 2 and "chmod 600" in done.stderr, done.stderr
    assert not (tmp_path / "b.tar.gz").exists()


# --- signatures ----------------------------------------------------------------------------


def test_a_signed_untouched_bundle_verifies_with_its_key(work: Path) -> None:
    done = _cli("bundle", "verify", str(work / "signed.tar.gz"), "--key", str(work / "signer.pub"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "origin: signed by key" in done.stdout


def test_the_signer_is_recorded_in_the_dossier_and_the_manifest(work: Path, tmp_path: Path) -> None:
    run = extract_bundle(work / "signed.tar.gz", tmp_path / "x", key=work / "signer.pub")
    dossier = json.loads((run / "baseline" / "dossier.json").read_text())
    manifest = json.loads((run / "manifest.json").read_text())
    kid = manifest["signature"]["key_id"]
    signature = dossier["responsibility"]["bundle_signature"]
    assert signature["key_id"] == kid and signature["algorithm"] == "ed25519"
    assert (
        signature["signer"]
        == json.loads((run / "report.json").read_text())["plan"]["responsibility"]["signer"]
    )
    original = json.loads((work / "run" / "baseline" / "dossier.json").read_text())
    assert "bundle_signature" not in original.get("responsibility", {}), "the run was written"


def test_without_a_key_verification_says_origin_was_not_checked(work: Path) -> None:
    for name in ("plain.tar.gz", "signed.tar.gz"):
        done = _cli("bundle", "verify", str(work / name))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "origin NOT checked" in done.stdout


def test_a_consistent_forgery_passes_integrity_but_fails_verify_key(
    work: Path, tmp_path: Path
) -> None:
    forged = _forged(work / "signed.tar.gz", tmp_path / "forged.tar.gz")
    integrity = verify_bundle(forged)
    assert integrity.ok, "precondition: the forgery is consistent (hashes match)"
    done = _cli("bundle", "verify", str(forged), "--key", str(work / "signer.pub"))
    assert done.returncode == 1, done.stdout
    assert "does not match the manifest" in done.stdout


def test_a_forgery_without_the_signature_fails_verify_key(work: Path, tmp_path: Path) -> None:
    forged = _forged(work / "signed.tar.gz", tmp_path / "forged.tar.gz")
    stripped = [(m, d) for m, d in _members(forged) if not m.name.endswith("/manifest.sig")]
    out = _rebuild(stripped, tmp_path / "stripped.tar.gz")
    res = verify_bundle(out, work / "signer.pub")
    assert not res.ok and any("not signed" in p for p in res.problems)


def test_another_key_does_not_vouch(work: Path, tmp_path: Path) -> None:
    keygen(tmp_path / "other")
    res = verify_bundle(work / "signed.tar.gz", tmp_path / "other.pub")
    assert not res.ok and any("not by the given key" in p for p in res.problems)


def test_a_second_manifest_appended_is_refused(work: Path, tmp_path: Path) -> None:
    members = _members(work / "signed.tar.gz")
    info, data = next((m, d) for m, d in members if m.name.endswith("/manifest.json"))
    manifest = json.loads(data)
    manifest["summary"]["passed"] = 999  # the manifest's own claims, forged
    second = tarfile.TarInfo(info.name)
    appended = _rebuild(
        [*members, (second, json.dumps(manifest).encode())], tmp_path / "two.tar.gz"
    )
    for key in (None, work / "signer.pub"):
        res = verify_bundle(appended, key)
        assert not res.ok and any("manifest.json: stored twice" in p for p in res.problems)
    with pytest.raises(RunDirError, match="stored twice"):
        extract_bundle(appended, tmp_path / "x", verify=False)


# --- hostile members -------------------------------------------------------------------------


def _with(work: Path, tmp_path: Path, extra: tarfile.TarInfo, data: bytes = b"") -> Path:
    members = _members(work / "plain.tar.gz")
    return _rebuild([*members, (extra, data)], tmp_path / "hostile.tar.gz")


@pytest.mark.parametrize(
    ("what", "make"),
    [
        ("..", lambda root: tarfile.TarInfo(f"{root}/../../escaped.txt")),
        ("absolute", lambda root: tarfile.TarInfo("/tmp/faultdrill-escaped.txt")),
        ("symlink", lambda root: _link(f"{root}/evil", tarfile.SYMTYPE, "/etc/passwd")),
        ("hard link", lambda root: _link(f"{root}/evil", tarfile.LNKTYPE, "/etc/passwd")),
        ("device", lambda root: _link(f"{root}/evil", tarfile.CHRTYPE, "")),
        ("fifo", lambda root: _link(f"{root}/evil", tarfile.FIFOTYPE, "")),
    ],
)
def test_unsafe_members_are_refused_and_never_unpacked(
    work: Path, tmp_path: Path, what: str, make: Callable[[str], tarfile.TarInfo]
) -> None:
    root = _members(work / "plain.tar.gz")[0][0].name.split("/")[0]
    hostile = _with(work, tmp_path, make(root), b"x" if what in ("..", "absolute") else b"")
    res = verify_bundle(hostile)
    assert not res.ok and res.problems, res.lines()
    dest = tmp_path / "dest"
    run = extract_bundle(hostile, dest, verify=False)
    assert (
        not (tmp_path / "escaped.txt").exists() and not Path("/tmp/faultdrill-escaped.txt").exists()
    )
    assert not (run / "evil").exists() and not (run / "evil").is_symlink()
    with pytest.raises(RunDirError, match="failed verification"):
        extract_bundle(hostile, tmp_path / "dest2")


def _link(name: str, kind: bytes, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


# --- bombs -----------------------------------------------------------------------------------


def _sparse_bundle(work: Path, tmp_path: Path, size: int, *, listed: bool) -> Path:
    """The plain bundle plus ``bomb.bin``: ``size`` bytes of zeros stored sparse (GNU tar),
    last; ``listed``: the manifest lists it with its true hash and size (a consistent
    bundle whose verification must read it all)."""
    tree = tmp_path / "tree"
    with tarfile.open(work / "plain.tar.gz") as tar:
        tar.extractall(tree, filter="data")
    (root,) = list(tree.iterdir())
    with open(root / "bomb.bin", "wb") as f:
        f.truncate(size)
    if listed:
        h = hashlib.sha256()
        zeros = bytes(1 << 20)
        for _ in range(size >> 20):
            h.update(zeros)
        manifest = json.loads((root / "manifest.json").read_text())
        manifest["files"]["bomb.bin"] = {"sha256": h.hexdigest(), "size": size}
        (root / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    names = ["manifest.json", *sorted(
        str(p.relative_to(root)) for p in root.rglob("*")
        if p.is_file() and p.name not in ("manifest.json", "bomb.bin")
    ), "bomb.bin"]  # fmt: skip
    out = tmp_path / "bomb.tar.gz"
    subprocess.run(
        ["tar", "-czSf", str(out), "-C", str(tree), *[f"{root.name}/{n}" for n in names]],
        check=True,
        timeout=120,
    )
    assert out.stat().st_size < 5 << 20
    return out


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs GNU tar for a sparse member")
def test_an_unlisted_multi_gb_member_is_not_even_read(work: Path, tmp_path: Path) -> None:
    bomb = _sparse_bundle(work, tmp_path, 4 * GIB, listed=False)
    done = _cli("bundle", "verify", str(bomb), cap=CAP)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "added:    bomb.bin" in done.stdout
    assert "MemoryError" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs GNU tar for a sparse member")
def test_a_listed_gb_member_is_streamed_under_a_memory_cap(work: Path, tmp_path: Path) -> None:
    bomb = _sparse_bundle(work, tmp_path, GIB + (256 << 20), listed=True)
    done = _cli("bundle", "verify", str(bomb), cap=CAP)
    assert "MemoryError" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{verify_bundle(work / 'plain.tar.gz').checked + 1} file(s) checked" in done.stdout
