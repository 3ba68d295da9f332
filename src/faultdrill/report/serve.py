"""``faultdrill serve``: a local viewer of a run's HTML report.

Serves, on loopback by default, the same self-contained HTML the run directory holds,
rendered from ``report.json`` (read through its model) and the event files (``?lang=zh`` or
``?lang=en``), plus ``report.json`` as read, ``report.md`` and ``runbook.md``. Each page is
rendered once and again only when a file of the run changes (mtime, size or inode); GET and
HEAD are answered by a fixed pool of threads, every socket with a timeout, so slow or
many clients cost bounded threads and a client that leaves is not an error. A bundle is verified and unpacked into a temporary folder first; the folder
is removed when the viewer stops, by Ctrl-C or by SIGTERM. Read-only: nothing is written
into the run directory. A host that is not loopback is served as asked, with a warning:
there is no authentication, anyone who reaches the port reads the report.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from faultdrill import rundir
from faultdrill.errors import DrillError, RunDirError
from faultdrill.i18n import LANGS
from faultdrill.report.html import render_html
from faultdrill.report.markdown import render_markdown
from faultdrill.report.model import Report, read_report
from faultdrill.report.runbook import render_runbook

__all__ = ["is_loopback", "make_server", "serve"]


def _page(report: Report, run_dir: Path, path: str, lang: str) -> tuple[str, str] | None:
    """(body, content type) of one path of the viewer, or None (not found)."""
    if path in ("/", "/report.html"):
        return render_html(report, run_dir, lang), "text/html; charset=utf-8"
    if path == "/report.json":
        return json.dumps(report.to_json(), indent=2), "application/json"
    if path == "/report.md":
        return render_markdown(report, lang), "text/markdown; charset=utf-8"
    if path == "/runbook.md":
        return render_runbook(report, run_dir, lang), "text/markdown; charset=utf-8"
    return None


#: Files of the run looked at to tell whether a page must be rendered again.
_MAX_FINGERPRINT_FILES = 50_000


def _fingerprint(run_dir: Path) -> tuple[tuple[str, int, int, int], ...]:
    """(name, mtime ns, size, inode) of every file of the run, links not followed: a
    page is rendered again when any of them changed (the report and the event files it
    draws from)."""
    out: list[tuple[str, int, int, int]] = []
    for top, dirs, files in os.walk(run_dir):
        dirs.sort()
        for name in sorted(files):
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            out.append((os.path.join(top, name), st.st_mtime_ns, st.st_size, st.st_ino))
            if len(out) >= _MAX_FINGERPRINT_FILES:
                return tuple(out)
    return tuple(out)


class _Pages:
    """Rendered pages, each rendered once per change of the run's files (one render at a
    time: concurrent requests for a page wait for the one render, then share it)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._lock = threading.Lock()
        self._key: tuple[tuple[str, int, int, int], ...] | None = None
        self._pages: dict[tuple[str, str], tuple[int, bytes, str]] = {}

    def get(self, path: str, lang: str) -> tuple[int, bytes, str]:
        """(status, body, content type) of ``path`` in ``lang``."""
        with self._lock:
            key = _fingerprint(self.run_dir)
            if key != self._key:
                self._key, self._pages = key, {}
            hit = self._pages.get((path, lang))
            if hit is None:
                hit = self._render(path, lang)
                if hit[0] != 404:
                    self._pages[(path, lang)] = hit
            return hit

    def _render(self, path: str, lang: str) -> tuple[int, bytes, str]:
        try:
            report = read_report(self.run_dir)
        except DrillError as exc:
            return 500, f"cannot read report.json: {exc}".encode(), "text/plain"
        page = _page(report, self.run_dir, path, lang)
        if page is None:
            return 404, b"not found", "text/plain"
        return 200, page[0].encode(), page[1]


#: Requests served at once; more wait in the queue (up to :data:`_QUEUED`), then are shut.
_WORKERS = 32
_QUEUED = 256
#: A client that sends nothing (or receives nothing) for this long is let go.
_REQUEST_TIMEOUT_S = 10.0
#: A client gone mid-answer: nothing to report.
_CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class _PooledServer(HTTPServer):
    """An HTTP server whose requests run on a fixed pool of threads (a flood of
    connections costs a bounded number of threads), each socket with a timeout. A
    client that leaves or stalls is dropped without a word."""

    request_queue_size = 128
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        # Before binding: a failed bind calls server_close, which shuts the pool.
        self._pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="faultdrill-serve")
        self._slots = threading.BoundedSemaphore(_WORKERS + _QUEUED)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # too many waiting: refuse this one
            return
        self._pool.submit(self._serve_one, request, client_address)

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except _CLIENT_GONE:
            pass
        except Exception:  # one request's failure must not end the server
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        kind, exc = sys.exc_info()[:2]
        if kind is not None and issubclass(kind, _CLIENT_GONE):
            return
        print(
            f"faultdrill serve: request from {client_address[0]} failed: {exc!r}", file=sys.stderr
        )

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def make_server(
    run_dir: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    lang: str = "en",
    *,
    request_timeout_s: float = _REQUEST_TIMEOUT_S,
) -> HTTPServer:
    """An HTTP server for ``run_dir`` (not yet serving; ``port`` 0 picks a free one); a
    client silent for ``request_timeout_s`` is disconnected."""
    pages = _Pages(run_dir)

    class Handler(BaseHTTPRequestHandler):
        timeout = request_timeout_s

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, with_body: bool) -> None:
            url = urlparse(self.path)
            want = parse_qs(url.query).get("lang", [lang])[0]
            code, body, ctype = pages.get(url.path, want if want in LANGS else lang)
            try:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                if with_body:
                    self.wfile.write(body)
            except _CLIENT_GONE:
                self.close_connection = True

        def do_GET(self) -> None:
            self._answer(with_body=True)

        def do_HEAD(self) -> None:
            self._answer(with_body=False)

    return _PooledServer((host, port), Handler)


def is_loopback(host: str) -> bool:
    """True if every address ``host`` names is a loopback address (``""`` is every
    interface; a name that does not resolve is not loopback)."""
    try:
        infos = socket.getaddrinfo(host or None, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    if not host:
        return False
    addrs = {str(info[4][0]).split("%")[0] for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a).is_loopback for a in addrs)


@contextmanager
def _sigterm_stops() -> Iterator[None]:
    """While inside, SIGTERM ends the process as ``SystemExit(143)`` raised in the main
    thread, so every ``finally`` (the server's close, the temporary folder's removal) runs.
    A no-op outside the main thread (signal handlers can only be set there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve(
    source: Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    lang: str = "en",
    ready: threading.Event | None = None,
    announce: Any = print,
) -> None:
    """Serve a run directory or bundle until interrupted (Ctrl-C) or terminated (SIGTERM:
    ``SystemExit(143)``). Raises DrillError when the address cannot be bound."""
    from faultdrill.archive.bundle import extract_bundle

    if not is_loopback(host):
        print(
            f"faultdrill: warning: serving on {host or 'every interface'}, which is not "
            "loopback: anyone who can reach this port can read the report (no "
            "authentication); use --host 127.0.0.1 to keep it on this machine",
            file=sys.stderr,
            flush=True,
        )
    with _sigterm_stops(), tempfile.TemporaryDirectory(prefix="faultdrill-serve-") as tmp:
        run_dir = source if source.is_dir() else extract_bundle(source, Path(tmp))
        if not (run_dir / rundir.REPORT_JSON).exists():
            raise RunDirError(f"{source}: no report.json; not a faultdrill run or bundle")
        try:
            server = make_server(run_dir, host, port, lang)
        except OSError as exc:
            raise DrillError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from exc
        host_s, port_n = str(server.server_address[0]), int(server.server_address[1])
        announce(f"serving {source} at http://{host_s}:{port_n}/ (Ctrl-C to stop)")
        if ready is not None:
            ready.set()
        try:
            server.serve_forever()
        finally:
            server.server_close()
