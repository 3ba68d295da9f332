"""``faultdrill serve``: a local viewer of a run's HTML report.

Serves, on loopback by default, the same self-contained HTML the run directory holds,
re-rendered on each request from ``report.json`` (read through its model) and the event
files (``?lang=zh`` or ``?lang=en``), plus ``report.json`` as read, ``report.md`` and
``runbook.md``. A bundle is verified and unpacked into a temporary folder first; the folder
is removed when the viewer stops, by Ctrl-C or by SIGTERM. Read-only: nothing is written
into the run directory. A host that is not loopback is served as asked, with a warning:
there is no authentication, anyone who reaches the port reads the report.
"""

from __future__ import annotations

import ipaddress
import json
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from faultdrill import rundir
from faultdrill.errors import DrillError, RunDirError
from faultdrill.report.html import render_html
from faultdrill.report.i18n import LANGS
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


def make_server(
    run_dir: Path, host: str = "127.0.0.1", port: int = 0, lang: str = "en"
) -> ThreadingHTTPServer:
    """An HTTP server for ``run_dir`` (not yet serving; ``port`` 0 picks a free one)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            url = urlparse(self.path)
            want = parse_qs(url.query).get("lang", [lang])[0]
            use = want if want in LANGS else lang
            try:
                report = read_report(run_dir)
            except DrillError as exc:
                self._send(500, f"cannot read report.json: {exc}".encode(), "text/plain")
                return
            page = _page(report, run_dir, url.path, use)
            if page is None:
                self._send(404, b"not found", "text/plain")
            else:
                self._send(200, page[0].encode(), page[1])

    return ThreadingHTTPServer((host, port), Handler)


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
