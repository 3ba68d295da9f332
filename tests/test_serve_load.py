"""Issue 21 items 8 and 12: ``faultdrill serve`` under load, on 127.0.0.1 only.

The page is rendered once per change of the run's files, not once per request; many
concurrent GETs complete in seconds; slow partial requests (a client that sends half a
request line and waits) do not hold back a normal GET; HEAD is answered; a client that
leaves before reading its answer costs no traceback. Bounded in count and time.
"""

from __future__ import annotations

import os
import socket
import struct
import tarfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from faultdrill.report import serve as serve_mod
from faultdrill.report.serve import make_server

FIXTURE = Path(__file__).parent / "fixtures" / "run-0.1.0-kill-worker.tar.xz"


@pytest.fixture()
def served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, list[int], Path]]:
    """(base URL, one entry per HTML render, the run directory) of a server on loopback."""
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    renders: list[int] = []
    real = serve_mod.render_html  # type: ignore[attr-defined]

    def counting(*args: object, **kwargs: object) -> str:
        renders.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(serve_mod, "render_html", counting)
    server = make_server(tmp_path / "run", "127.0.0.1", 0, request_timeout_s=2.0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", renders, tmp_path / "run"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _get(url: str, method: str = "GET") -> tuple[int, int]:
    req = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, len(r.read())


def test_concurrent_gets_share_one_render(served: tuple[str, list[int], Path]) -> None:
    base, renders, run = served
    start = time.monotonic()
    with ThreadPoolExecutor(50) as pool:
        got = list(pool.map(lambda _i: _get(base + "/"), range(50)))
    took = time.monotonic() - start
    assert all(code == 200 and size > 1000 for code, size in got)
    assert len(renders) == 1, f"{len(renders)} renders for 50 GETs of one unchanged page"
    assert took < 30, f"50 concurrent GETs took {took:.1f} s"
    report = run / "report.json"
    os.utime(report, ns=(time.time_ns(), time.time_ns() + 10**9))  # the run changed
    assert _get(base + "/")[0] == 200 and len(renders) == 2


def test_slow_partial_requests_do_not_block_a_normal_get(
    served: tuple[str, list[int], Path],
) -> None:
    base, _renders, _run = served
    port = int(base.rsplit(":", 1)[1])
    slow = []
    try:
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET / HT")  # and nothing more
            slow.append(s)
        start = time.monotonic()
        assert _get(base + "/report.json")[0] == 200
        assert time.monotonic() - start < 5, "a normal GET waited behind slow clients"
        slow[0].settimeout(8)
        assert slow[0].recv(1) == b"", "a silent client was not let go after its timeout"
    finally:
        for s in slow:
            s.close()


def test_head_is_answered_without_a_body(served: tuple[str, list[int], Path]) -> None:
    base, _renders, _run = served
    assert _get(base + "/", "HEAD") == (200, 0)
    assert _get(base + "/report.md", "HEAD")[0] == 200


def test_a_client_that_leaves_costs_no_traceback(
    served: tuple[str, list[int], Path], capfd: pytest.CaptureFixture[str]
) -> None:
    base, _renders, _run = served
    port = int(base.rsplit(":", 1)[1])
    for _ in range(10):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # reset: the server's write of the page fails
    assert _get(base + "/report.json")[0] == 200  # still serving
    time.sleep(0.5)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
