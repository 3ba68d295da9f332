"""A bounded fuzzer of ``bundle verify`` (and ``diff``) over hostile archives (issue 21).

A few hundred cases made from one real bundle of the recorded fixture run, with a fixed
seed: truncations, byte flips, member renames, JSON nested past any sane depth, FIFOs (as
the archive, the key, a member), links and devices as members. Every case must end in exit
1 (verification failed, with the verdict's FAILED line) or 2 (bad input, one
``faultdrill:`` message), never a traceback, never a hang: each case runs in-process under
a 10-second alarm, the whole set in well under a minute.

Not fuzzed: bytes 4-9 of the gzip header (modification time, extra flags, operating
system). No checksum covers them and they change no member's content: an archive differing
only there holds the same files, which is what verification proves.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest

from faultdrill.archive.bundle import make_bundle
from faultdrill.archive.signing import keygen
from faultdrill.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "run-0.1.0-kill-worker.tar.xz"
SEED = 21
CASE_TIMEOUT_S = 10
#: Bytes of the gzip header no checksum covers (see the module docstring).
_UNCOVERED = range(4, 10)


class _HangError(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    def fire(_signum: int, _frame: FrameType | None) -> None:
        raise _HangError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("fuzz")
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(base, filter="data")
    keygen(base / "signer")
    make_bundle(base / "run", base / "signed.tar.gz", sign=base / "signer")
    return base


def _members(archive: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(archive) as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar]  # type: ignore[union-attr]


def _pack(members: list[tuple[tarfile.TarInfo, bytes]], out: Path) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return out


Case = tuple[str, Callable[[Path], Path]]


def _byte_cases(original: bytes, rng: random.Random) -> list[Case]:
    def truncated(n: int) -> Callable[[Path], Path]:
        def make(out: Path) -> Path:
            out.write_bytes(original[:n])
            return out

        return make

    def flipped(at: int) -> Callable[[Path], Path]:
        def make(out: Path) -> Path:
            data = bytearray(original)
            data[at] ^= 0xFF
            out.write_bytes(bytes(data))
            return out

        return make

    size = len(original)
    cuts = sorted({0, 1, 10, 512, size - 1, size - 4, size - 8, *rng.sample(range(size), 60)})
    flips = [0, 1, 2, 3, size - 1, size - 5, size - 8]
    flips += [i for i in rng.sample(range(10, size), 160) if i not in _UNCOVERED][:150]
    return [(f"truncated at {n}", truncated(n)) for n in cuts] + [
        (f"byte {i} flipped", flipped(i)) for i in sorted(set(flips))
    ]


def _renamed(
    members: list[tuple[tarfile.TarInfo, bytes]], i: int, new: str
) -> Callable[[Path], Path]:
    def make(out: Path) -> Path:
        copy = [(tarfile.TarInfo(m.name), d) for m, d in members]
        for (info, _d), (m, _x) in zip(copy, members, strict=True):
            info.type, info.mode = m.type, m.mode
        copy[i][0].name = new
        return _pack(copy, out)

    return make


def _rename_cases(members: list[tuple[tarfile.TarInfo, bytes]], rng: random.Random) -> list[Case]:
    root = members[0][0].name.split("/")[0]
    files = [i for i, (m, _d) in enumerate(members) if m.isfile()]
    out: list[Case] = []
    for i in rng.sample(files, 8):
        name = members[i][0].name
        rel = name.split("/", 1)[1]
        for new in (
            name + ".x",
            f"{root}/moved/{rel}",
            f"other-root/{rel}",
            f"{root}/{rel.upper()}" if rel.upper() != rel else f"{root}/{rel}~",
            f"{root}/../{rel}",
            f"/{name}",
        ):
            out.append((f"{name} renamed {new}", _renamed(members, i, new)))
    return out


def _json_cases(members: list[tuple[tarfile.TarInfo, bytes]]) -> list[Case]:
    def replaced(suffix: str, data: bytes) -> Callable[[Path], Path]:
        def make(out: Path) -> Path:
            return _pack([(m, data if m.name.endswith(suffix) else d) for m, d in members], out)

        return make

    out: list[Case] = []
    for name in ("/manifest.json", "/manifest.sig", "/report.json"):
        for depth in (65, 1_000, 200_000):
            for open_, close in ((b"[", b"]"), (b'{"a":', b"}")):
                out.append(
                    (f"{name} nested {depth}", replaced(name, open_ * depth + close * depth))
                )
        out.append((f"{name} not JSON", replaced(name, b"\xff\xfe garbage")))
    return out


def _special_cases(members: list[tuple[tarfile.TarInfo, bytes]]) -> list[Case]:
    root = members[0][0].name.split("/")[0]

    def with_member(kind: bytes, **attrs: object) -> Callable[[Path], Path]:
        def make(out: Path) -> Path:
            info = tarfile.TarInfo(f"{root}/special")
            info.type = kind
            for k, v in attrs.items():
                setattr(info, k, v)
            return _pack([*members, (info, b"")], out)

        return make

    def fifo(out: Path) -> Path:
        os.mkfifo(out)
        return out

    def link_to_dir(out: Path) -> Path:
        out.symlink_to(out.parent)
        return out

    return [
        ("FIFO member", with_member(tarfile.FIFOTYPE)),
        ("symlink member", with_member(tarfile.SYMTYPE, linkname="/etc/shadow")),
        ("hard link member", with_member(tarfile.LNKTYPE, linkname="/etc/shadow")),
        ("char device member", with_member(tarfile.CHRTYPE, devmajor=1, devminor=3)),
        ("the archive is a FIFO", fifo),
        ("the archive is a link to a directory", link_to_dir),
    ]


def _check(argv: list[str], capsys: pytest.CaptureFixture[str], case: str) -> None:
    with _deadline(CASE_TIMEOUT_S):
        rc = main(argv)
    out, err = capsys.readouterr()
    assert rc in (1, 2), f"{case}: exit {rc}\n{out}{err}"
    if rc == 1:
        assert out.count("FAILED") == 1 and "Traceback" not in out, f"{case}:\n{out}{err}"
    else:
        assert err.startswith("faultdrill: ") and "Traceback" not in err, f"{case}:\n{err}"


def test_hostile_archives_fail_clearly(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(SEED)
    signed = base / "signed.tar.gz"
    members = _members(signed)
    cases = [
        *_byte_cases(signed.read_bytes(), rng),
        *_rename_cases(members, rng),
        *_json_cases(members),
        *_special_cases(members),
    ]
    assert len(cases) > 250
    key = str(base / "signer.pub")
    for n, (case, make) in enumerate(cases):
        archive = make(tmp_path / f"case-{n}.tar.gz")
        _check(["bundle", "verify", str(archive)], capsys, case)
        if n % 5 == 0:
            _check(["bundle", "verify", str(archive), "--key", key], capsys, case + " --key")
        if "JSON" in case or "nested" in case or "renamed" in case:
            _check(["diff", str(signed), str(archive)], capsys, case + " (diff)")


def test_a_fifo_as_the_key_fails_clearly(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "key.pub"
    os.mkfifo(fifo)
    _check(["bundle", "verify", str(base / "signed.tar.gz"), "--key", str(fifo)], capsys, "key")


def test_the_untouched_bundle_verifies(base: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The fuzzer's baseline: the same command on the bundle as made exits 0."""
    key = str(base / "signer.pub")
    assert main(["bundle", "verify", str(base / "signed.tar.gz"), "--key", key]) == 0
    assert json.dumps(capsys.readouterr().out).count("OK") >= 1
