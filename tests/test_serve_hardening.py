"""``faultdrill serve``: it says so when asked to listen beyond loopback, and a SIGTERM (how
service managers and ``kill`` stop it) removes the temporary folder a bundle was unpacked
into, as Ctrl-C does. Real ``faultdrill serve`` subprocesses on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

import pytest

from faultdrill.archive.bundle import make_bundle
from faultdrill.report.serve import is_loopback

FIXTURE = Path(__file__).parent / "fixtures" / "run-0.1.0-kill-worker.tar.xz"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("serve")
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(base, filter="data")
    archive, _ = make_bundle(base / "run", base / "run.bundle.tar.gz")
    return archive


def _serve(bundle: Path, tmp: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "faultdrill.cli", "serve", str(bundle), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_sigterm_removes_the_temporary_folder(bundle: Path, tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _serve(bundle, tmp, "--port", "0")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving" in line, line + (proc.stderr.read() if proc.stderr else "")
        url = line.split(" at ")[1].split()[0]
        with urllib.request.urlopen(url + "report.json", timeout=30) as r:
            assert r.status == 200 and b'"task_id"' in r.read()
        unpacked = [p.name for p in tmp.iterdir()]
        assert len(unpacked) == 1 and unpacked[0].startswith("faultdrill-serve-")
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert list(tmp.iterdir()) == [], "the unpacked bundle was left behind"
    assert rc == 128 + signal.SIGTERM
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()


def test_a_host_beyond_loopback_is_warned_about(bundle: Path, tmp_path: Path) -> None:
    """An address of no interface here: the warning comes before the bind fails, and the
    failure is a clear message, not a traceback (nothing listens beyond loopback here)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _serve(bundle, tmp, "--host", "192.0.2.1", "--port", "0")
    _out, err = proc.communicate(timeout=120)
    assert "warning" in err and "192.0.2.1" in err and "not loopback" in err, err
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert list(tmp.iterdir()) == []


def test_loopback_hosts() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("") and not is_loopback("::")
    assert not is_loopback("192.0.2.1")
