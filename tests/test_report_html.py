"""The HTML report: self-contained, rendered from report.json + events, checked in Chromium.

Unit tests render the literal report of ``report_data`` (every case a renderer must handle,
unknown keys included). The browser tests load the report of the shared recorded drill
(``recorded_run``) in a real headless Chromium (Debian's ``chromium``), driven over the
DevTools protocol with a small standard-library WebSocket client: no console error, no
network request besides the file itself, the timeline and loss plot drawn with a real size,
every scenario row and the four answers present. Screenshots are kept as test artifacts
(``$FAULTDRILL_ARTIFACTS_DIR``, else pytest's base temp folder).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from faultdrill.report.html import render_html
from tests.i18n_kit import english_in, finding_texts
from tests.recorded_run import ONLY, RecordedDemo
from tests.report_data import report_of, synthetic_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# --- unit: rendering without a browser -------------------------------------------------------


def test_html_has_every_part_of_the_deliverable() -> None:
    html = render_html(report_of(synthetic_report()), None, "en")
    for sid in ("kill-worker", "node-loss", "ctl-optimizer-lost", "ctl-skip-ahead"):
        assert f"data-scenario='{sid}'" in html and f'id="item-{sid}"' in html
    assert "data-skipped='link-flap'" in html
    for row in ("Preconditions", "Injection", "Expected state", "Actual evidence"):
        assert f"<th>{row}</th>" in html
    assert "<th>Recovery action</th>" in html and "<th>Conclusion</th>" in html
    assert html.count("data-q='4'") == 4  # the four answers of each of the four items
    # the manual restart is a manual dependency, with who, permission and time
    assert "data-manual='node-loss'" in html and "resubmit the job" in html
    # sign-off fields for every role
    for role in ("Injector", "Observer", "Recovery operator", "Signer"):
        assert f"data-role='{role}'" in html
    # to-be-verified list derived from the plan: no spares, loopback network, local storage
    assert "node replacement from spare nodes" in html
    assert "a real multi-host fabric" in html and "shared or remote storage" in html
    # conditions of every measured time
    assert html.count("data-conditions=") == 4 and "not a service level" in html
    # without the event files the pictures are left out, and it says so
    assert "Timeline not available" in html


def test_unknown_keys_are_shown_not_dropped() -> None:
    html = render_html(report_of(synthetic_report()), None, "en")
    assert "data-extra='future_probe'" in html and "48.0" in html  # a list of records: a table
    assert "data-extra='future_flag'" in html and "rdzv_join_s" in html
    assert "data-extra='future_summary'" in html and "lost_s" in html


def test_absent_optional_keys_do_not_break_rendering() -> None:
    rep = synthetic_report()
    for s in rep["scenarios"]:
        for k in ("title", "preconditions", "operator_actions", "conditions", "expected"):
            s.pop(k, None)
    rep.pop("skipped")
    rep["baseline"]["dossier"] = None
    html = render_html(report_of(rep), None, "zh")
    assert "kill-worker" in html and "<html lang='zh-CN'>" in html


def test_html_needs_no_network() -> None:
    html = render_html(report_of(synthetic_report()), None, "en")
    assert "default-src 'none'" in html  # the CSP forbids loading anything
    # no src/href to anything but in-page anchors; the only URL is SVG's XML namespace
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", html)
    assert not re.search(r"""(src|href)\s*=\s*[^\s"'#>]""", html)
    urls = set(re.findall(r"https?://[^\s\"'<>]+", html))
    assert urls <= {"http://www.w3.org/2000/svg"}


def test_values_are_escaped() -> None:
    rep = synthetic_report()
    rep["scenarios"][0]["title"] = "<script>alert(1)</script>"
    html = render_html(report_of(rep), None, "en")
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


# --- a minimal DevTools client (standard library only) ---------------------------------------


class _WebSocket:
    """Just enough RFC 6455 for the DevTools protocol: masked text frames out, any in."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        assert m, url
        self.sock = socket.create_connection((m.group(1), int(m.group(2))), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {m.group(3)} HTTP/1.1\r\nHost: {m.group(1)}:{m.group(2)}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            assert chunk, "websocket handshake: connection closed"
            head += chunk
        assert b" 101 " in head.split(b"\r\n")[0], head

    def _recv_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "websocket closed"
            buf += chunk
        return buf

    def send(self, text: str) -> None:
        data = text.encode()
        head = bytearray([0x81])
        n = len(data)
        if n < 126:
            head.append(0x80 | n)
        elif n < 1 << 16:
            head.append(0x80 | 126)
            head += struct.pack(">H", n)
        else:
            head.append(0x80 | 127)
            head += struct.pack(">Q", n)
        mask = os.urandom(4)
        head += mask
        self.sock.sendall(bytes(head) + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self) -> str:
        parts = []
        while True:
            b0, b1 = self._recv_exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._recv_exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._recv_exact(8))[0]
            payload = self._recv_exact(n)
            op = b0 & 0x0F
            if op == 8:
                raise ConnectionError("websocket closed by the browser")
            if op == 9:  # ping: answer, keep reading
                continue
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts).decode()

    def close(self) -> None:
        self.sock.close()


class _Page:
    """One browser tab over CDP; records console errors and network requests."""

    def __init__(self, ws: _WebSocket) -> None:
        self.ws = ws
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                assert "error" not in msg, msg
                return dict(msg.get("result") or {})
            self.events.append(msg)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        while time.monotonic() < deadline:
            msg: dict[str, Any] = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == method:
                return msg
        raise AssertionError(f"no {method} within {timeout} s")

    def evaluate(self, expr: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        assert "exceptionDetails" not in res, res
        return res["result"].get("value")

    def console_errors(self) -> list[str]:
        out = []
        for ev in self.events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails"))[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args"))[:500])
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(str(p["entry"].get("text"))[:500])
        return out

    def requests(self) -> list[str]:
        return [
            ev["params"]["request"]["url"]
            for ev in self.events
            if ev.get("method") == "Network.requestWillBeSent"
        ]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A headless Chromium with a fresh profile; yields its DevTools HTTP address."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does it)")
    profile = tmp_path_factory.mktemp("chromium-profile")
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-extensions",
            "--disable-default-apps",
            f"--user-data-dir={profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--window-size=1280,900",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(profile)},  # its singleton socket dir goes here too
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            assert proc.poll() is None, "chromium exited at start"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get("FAULTDRILL_ARTIFACTS_DIR")
    out = Path(env) if env else tmp_path_factory.getbasetemp() / "artifacts"
    out.mkdir(parents=True, exist_ok=True)
    return out


def _open(browser: str, html_file: Path) -> _Page:
    with urllib.request.urlopen(f"http://{browser}/json/list", timeout=10) as r:
        targets = json.loads(r.read())
    page = next(t for t in targets if t.get("type") == "page")
    p = _Page(_WebSocket(page["webSocketDebuggerUrl"]))
    for domain in ("Runtime", "Log", "Network", "Page"):
        p.call(f"{domain}.enable")
    p.events.clear()
    p.call("Page.navigate", url=html_file.resolve().as_uri())
    p.wait_event("Page.loadEventFired")
    return p


_LAYOUT = """(() => {
  const size = el => { const r = el.getBoundingClientRect(); return [r.width, r.height]; };
  const items = [...document.querySelectorAll('article.item')].map(a => ({
    id: a.dataset.item,
    answers: [1,2,3,4].map(n => (a.querySelector(`li[data-q='${n}']`) || {}).textContent || ''),
    timeline: [...a.querySelectorAll('svg.timeline')].map(size),
    timeline_marks: a.querySelectorAll('svg.timeline g.question').length,
    replicas: a.querySelectorAll('svg.timeline rect.stepping').length,
    windows: a.querySelectorAll('svg.timeline rect.inject-window').length,
    loss: [...a.querySelectorAll('svg.losscurve')].map(size),
    series: [...a.querySelectorAll('svg.losscurve polyline.series')].map(p => p.dataset.series),
    resume: a.querySelectorAll('svg.losscurve .resume').length,
    levels: [...a.querySelectorAll('table.levels tr[data-level]')].map(r => r.dataset.level),
    layer: (a.querySelector('[data-part=layer] strong, [data-part=layer] b') || {}).textContent || '',
    evals: [...a.querySelectorAll('figure.eval-fig svg.evalcurve')].map(size),
    extra: a.querySelectorAll('details.extra').length,
  }));
  return {
    ready: document.body.dataset.ready,
    rows: [...document.querySelectorAll('tr[data-scenario]')].map(r => r.dataset.scenario),
    items,
    overall: document.querySelector('[data-overall]').dataset.overall,
    summary_levels: [...document.querySelectorAll('tr[data-scenario] a[data-level]')].map(
      x => x.dataset.level),
    signoff: document.querySelectorAll('table.signoff tr[data-role]').length,
  };
})()"""


@pytest.mark.drill
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_report_loads_in_chromium(
    recorded_demo: RecordedDemo,
    browser: str,
    lang: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    run = recorded_demo.run_dir
    assert recorded_demo.rc == 0, recorded_demo.stdout + recorded_demo.stderr
    if lang == "en":
        html_file = run / "report.html"  # exactly what the demo wrote
    else:
        from faultdrill.report import render_reports

        out = tmp_path_factory.mktemp("zh")
        html_file = Path(render_reports(run, "zh", out)["html"])
    page = _open(browser, html_file)
    try:
        info = page.evaluate(_LAYOUT)
        assert info["ready"] == "1"  # the inline script ran
        assert page.console_errors() == []
        assert page.requests() == [html_file.resolve().as_uri()]  # the file, nothing else
        assert info["rows"] == ONLY.split(",")
        assert info["overall"] == "ok" and info["signoff"] == 4
        for item in info["items"]:
            assert all(len(a) > 10 for a in item["answers"]), item
            [(w, h)] = item["timeline"]
            assert w > 600 and h > 150, item
            # the four questions marked on the timeline; the stale replica's old replica
            # was never stopped by the platform, so question 2 has no moment to mark
            assert item["timeline_marks"] == (3 if item["id"] == "ctl-stale-replica" else 4)
            assert item["replicas"] >= 4  # two ranks x two incarnations, at least
            assert item["windows"] == 1
            [(lw, lh)] = item["loss"]
            assert lw > 600 and lh > 150
            assert item["series"][:3] == ["baseline", "inc0", "inc1"]
            assert item["resume"] == 1
            # what a buyer signs: three levels with their proofs, a failing layer where
            # not pass, evaluation plots like the loss curve, no raw dumps
            assert item["levels"] == ["running-again", "valid-progress", "consistent-results"]
            assert item["evals"] and all(w > 600 and h > 150 for w, h in item["evals"])
            assert item["extra"] == 0, item
            if item["id"] != "kill-worker":
                assert item["layer"], item
        assert info["summary_levels"] == ["consistent-results"]
        page_text = html_file.read_text()
        said = finding_texts(page_text, html_page=True)
        assert said and (lang == "en" or english_in(said) == [])
        kill = next(i for i in info["items"] if i["id"] == "kill-worker")
        checkpoint = "step-000010"
        assert checkpoint in kill["answers"][3]
        if lang == "zh":
            assert "检查点" in kill["answers"][3]
        shot = page.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        png = base64.b64decode(shot["data"])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
        dest = _artifacts(tmp_path_factory) / f"report-{lang}.png"
        dest.write_bytes(png)
        # a screenshot of the first timeline alone, at full resolution
        box = page.evaluate(
            "(() => { const r = document.querySelector('svg.timeline').getBoundingClientRect();"
            " return [r.x + window.scrollX, r.y + window.scrollY, r.width, r.height]; })()"
        )
        shot = page.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": box[0], "y": box[1], "width": box[2], "height": box[3], "scale": 1},
        )
        (dest.parent / f"timeline-{lang}.png").write_bytes(base64.b64decode(shot["data"]))
        assert page.console_errors() == []
    finally:
        page.ws.close()


def test_serve_renders_the_same_report(tmp_path: Path) -> None:
    import threading

    from faultdrill.report.serve import make_server

    (tmp_path / "report.json").write_text(json.dumps(synthetic_report()))
    server = make_server(tmp_path, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(base + "/", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/html")
            assert "data-scenario='kill-worker'" in r.read().decode()
        with urllib.request.urlopen(base + "/?lang=zh", timeout=10) as r:
            assert "前置条件" in r.read().decode()
        with urllib.request.urlopen(base + "/runbook.md", timeout=10) as r:
            assert "kill-worker" in r.read().decode()
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(base + "/../etc/passwd", timeout=10)
    finally:
        server.shutdown()
        server.server_close()


def test_a_picture_that_cannot_be_drawn_is_said_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import faultdrill.report.html.item as html_mod

    events = tmp_path / "scenarios" / "kill-worker" / "events"
    events.mkdir(parents=True)
    (events / "harness.jsonl").write_text(
        json.dumps({"ts": 1.0, "mono": 1.0, "src": "harness", "kind": "item_start"}) + "\n"
    )

    def broken(*_a: Any, **_k: Any) -> str:
        raise RuntimeError("unknown event shape")

    monkeypatch.setattr(html_mod, "timeline_svg", broken)
    html = render_html(report_of(synthetic_report()), tmp_path, "en")
    assert "could not be drawn (RuntimeError: unknown event shape)" in html
    assert "Loss curve not available" in html  # no step events recorded
    assert "data-scenario='kill-worker'" in html
