"""The network track: per-node interface counters, round trips to every peer, and the
packet counters of every injected rule, on the same clock as the job's events.

One background thread of the harness does all of it. At start it enters each node's
network namespace in turn (``setns`` on that thread only) and opens there a UDP socket
bound to the node's address (port 7) and the namespace's ``/proc/thread-self/net/dev``;
both stay bound to the node's namespace afterwards. Each period it reads every node's
interface counters, sends one probe from every node to every other node, answers the
probes it receives (the responder is the harness, not the node's processes: a frozen node
still answers, a cut link does not) and records the round trip, or ``None`` for a probe
not answered within the period. About once a second it reads the counters of the rules a
fault has applied (iptables rules by their comment tag, tbf qdiscs by device).

Events (``src`` = ``net``, stream ``net.jsonl``):

* ``net_sample``: ``node``, ``dev``, ``rx_bytes``, ``tx_bytes``, ``rx_packets``,
  ``tx_packets``, ``rx_drop``, ``tx_drop``, ``rtt_ms`` (peer -> milliseconds or None);
* ``rule_counters``: ``rule``, ``node``, ``fault``, ``rule_kind`` (iptables|tbf), ``chain`` or
  ``dev``, ``packets``, ``bytes`` (and ``dropped`` for tbf), ``final`` (read at revert).

:func:`network_summary` turns them into the report's compact per-node table.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import statistics
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.platforms.netns import NodeLink, _ActiveRule
    from faultdrill.timeline import Timeline

__all__ = ["PROBE_PORT", "NetSampler", "network_lines", "network_summary", "read_rule_counters"]

PROBE_PORT = 7
_PROBE = struct.Struct("!cIH")  # b"Q"/b"A", sequence number, index of the probing node


def _dev_counters(raw: str, dev: str) -> dict[str, int] | None:
    for line in raw.splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == dev:
            c = [int(x) for x in rest.split()]
            return {
                "rx_bytes": c[0],
                "rx_packets": c[1],
                "rx_drop": c[3],
                "tx_bytes": c[8],
                "tx_packets": c[9],
                "tx_drop": c[11],
            }
    return None


_IPT_LINE = re.compile(r"^\s*(\d+)\s+(\d+)\s.*/\*\s*(\S+)\s*\*/")
_TBF_SENT = re.compile(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)")


def read_rule_counters(rule: _ActiveRule) -> dict[str, Any] | None:
    """The rule's counters now (None if the rule or its namespace is gone)."""
    base = ["nsenter", f"--net=/run/netns/{rule.ns}"]
    try:
        if rule.kind == "iptables":
            out = subprocess.run(
                [*base, "iptables", "-w", "-L", rule.chain, "-v", "-x", "-n"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout
            for line in out.splitlines():
                m = _IPT_LINE.match(line)
                if m and m.group(3) == rule.rule_id:
                    return {"packets": int(m.group(1)), "bytes": int(m.group(2))}
            return None
        out = subprocess.run(
            [*base, "tc", "-s", "qdisc", "show", "dev", rule.dev],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
        if "tbf" not in out:
            return None
        m = _TBF_SENT.search(out)
        if not m:
            return None
        return {
            "bytes": int(m.group(1)),
            "packets": int(m.group(2)),
            "dropped": int(m.group(3)),
            "overlimits": int(m.group(4)),
        }
    except (OSError, subprocess.TimeoutExpired):
        return None


class NetSampler:
    """Samples the network track of a namespace cluster until stopped. Thread-safe stop."""

    def __init__(
        self,
        links: Sequence[NodeLink],
        sink: EventSink,
        hz: float,
        rules: Callable[[], list[_ActiveRule]],
        rule_period_s: float = 1.0,
    ) -> None:
        self.links = list(links)
        self.sink = sink
        self.period = 1.0 / hz
        self.rules = rules
        self.rule_period_s = rule_period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="net-sampler", daemon=True)
        self._socks: dict[str, socket.socket] = {}
        self._devs: dict[str, Any] = {}
        self.samples = 0
        self.error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.sink.emit("net", "net_track_stopped", stream="net", samples=self.samples)

    # --- the thread ---------------------------------------------------------------------

    def _open(self) -> None:
        from faultdrill.platforms.netns import in_netns

        for ln in self.links:
            try:
                with in_netns(ln.ns):
                    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    s.setblocking(False)
                    s.bind((ln.address, PROBE_PORT))
                    self._socks[ln.node] = s
                    self._devs[ln.node] = open("/proc/thread-self/net/dev", "rb", buffering=0)  # noqa: SIM115
            except OSError as exc:
                self.sink.emit(
                    "net", "net_track_gap", stream="net", node=ln.node, error=str(exc)[:300]
                )

    def _close(self) -> None:
        for s in self._socks.values():
            s.close()
        for f in self._devs.values():
            f.close()
        self._socks.clear()
        self._devs.clear()

    def _main(self) -> None:
        try:
            self._open()
            self.sink.emit(
                "net",
                "net_track_started",
                stream="net",
                hz=round(1.0 / self.period, 3),
                nodes=sorted(self._socks),
                probe=f"UDP echo on port {PROBE_PORT}, answered by the harness",
            )
            seq = 0
            last_rules = 0.0
            while not self._stop.is_set():
                t0 = time.monotonic()
                seq += 1
                with contextlib.suppress(Exception):  # a failed reading is a gap, not a crash
                    self._tick(seq, t0)
                    self.samples += 1
                if t0 - last_rules >= self.rule_period_s:
                    last_rules = t0
                    for rule in self.rules():
                        with contextlib.suppress(Exception):
                            self.emit_rule(rule, final=False)
                self._stop.wait(max(0.0, self.period - (time.monotonic() - t0)))
        except Exception as exc:  # the track is evidence, not the drill: record and stop
            self.error = f"{type(exc).__name__}: {exc}"
            self.sink.emit("net", "net_track_gap", stream="net", error=self.error[:300])
        finally:
            self._close()

    def emit_rule(self, rule: _ActiveRule, *, final: bool) -> None:
        counters = read_rule_counters(rule)
        if counters is None:
            return
        self.sink.emit(
            "net",
            "rule_counters",
            stream="net",
            rule=rule.rule_id,
            node=rule.node,
            fault=rule.fault,
            rule_kind=rule.kind,
            chain=rule.chain or None,
            dev=rule.dev or None,
            final=final,
            **rule.extra,
            **counters,
        )

    def _tick(self, seq: int, t0: float) -> None:
        nodes = list(self._socks)
        index = {n: i for i, n in enumerate(nodes)}
        addr = {ln.node: ln.address for ln in self.links}
        counters: dict[str, dict[str, int] | None] = {}
        for node in nodes:
            f = self._devs[node]
            f.seek(0)
            dev = next(ln.dev for ln in self.links if ln.node == node)
            counters[node] = _dev_counters(f.read().decode(), dev)
        sent: dict[tuple[str, str], float] = {}
        for src in nodes:
            for dst in nodes:
                if src == dst:
                    continue
                with contextlib.suppress(OSError):  # link down: the probe is lost
                    self._socks[src].sendto(
                        _PROBE.pack(b"Q", seq, index[src]), (addr[dst], PROBE_PORT)
                    )
                    sent[(src, dst)] = time.monotonic()
        rtt: dict[str, dict[str, float | None]] = {
            n: {p: None for p in nodes if p != n} for n in nodes
        }
        by_fd = {s.fileno(): n for n, s in self._socks.items()}
        node_of_addr = {a: n for n, a in addr.items()}
        deadline = t0 + self.period * 0.9
        pending = len(sent)
        while pending and not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(list(by_fd), [], [], left)
            for fd in ready:
                me = by_fd[fd]
                sock = self._socks[me]
                while True:
                    try:
                        data, (peer_addr, peer_port) = sock.recvfrom(64)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        break
                    if len(data) != _PROBE.size:
                        continue
                    kind, s, origin = _PROBE.unpack(data)
                    if kind == b"Q":
                        with contextlib.suppress(OSError):
                            sock.sendto(_PROBE.pack(b"A", s, origin), (peer_addr, peer_port))
                    elif kind == b"A" and s == seq:
                        peer = node_of_addr.get(peer_addr)
                        start = sent.get((me, peer)) if peer else None
                        if peer and start is not None and rtt[me].get(peer) is None:
                            rtt[me][peer] = round((time.monotonic() - start) * 1000.0, 3)
                            pending -= 1
        for node in nodes:
            c = counters[node] or {}
            self.sink.emit(
                "net",
                "net_sample",
                stream="net",
                node=node,
                dev=next(ln.dev for ln in self.links if ln.node == node),
                seq=seq,
                # when the counters were read and the probes sent: the sample is written
                # up to a period later, and is judged by when it measured
                probed_mono=t0,
                rtt_ms=rtt[node],
                **c,
            )


# --- the report's summary ---------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def network_summary(tl: Timeline) -> dict[str, Any] | None:
    """Per node: round trips before/during/after the fault window, probes lost during it,
    bytes/packets/drops on its interface during it; and every rule's final counters.
    None when the run has no network track."""
    samples = tl.of("net", "net_sample")
    if not samples:
        return None
    inj = tl.of("fault", "injected")
    start = inj[0].mono if inj else None
    end, to = None, "end of observation"
    if start is not None:
        # A fault with a duration: until it was reverted. A one-shot fault: until the job
        # made its first step again (the recovery window).
        reverted = tl.first("fault", "reverted", after=start)
        new = tl.incarnation_after(start)
        if inj[0].get("duration_s") is not None and reverted is not None:
            # the undo began before the event was written; probes after that may pass
            end = float(reverted.get("revert_started_mono", reverted.mono))
            to = "fault reverted"
        elif new is not None and new.first_step_mono is not None:
            end, to = new.first_step_mono, "first step after the restart"
    nodes = sorted({str(e.get("node")) for e in samples})
    out_nodes = []
    for node in nodes:
        mine = [e for e in samples if e.get("node") == node]

        def measured(e: Any) -> float:
            return float(e.get("probed_mono", e.mono))

        def phase(e: Any) -> str:
            if start is None or measured(e) < start:
                return "before"
            if end is None or measured(e) <= end:
                return "during"
            return "after"

        rtts: dict[str, list[float]] = {"before": [], "during": [], "after": []}
        lost = {"before": 0, "during": 0, "after": 0}
        probes = {"before": 0, "during": 0, "after": 0}
        for e in mine:
            ph = phase(e)
            for v in (e.get("rtt_ms") or {}).values():
                probes[ph] += 1
                if v is None:
                    lost[ph] += 1
                else:
                    rtts[ph].append(float(v))
        row: dict[str, Any] = {"node": node}
        for ph in ("before", "during", "after"):
            row[f"rtt_{ph}_ms"] = _median(rtts[ph])
            row[f"lost_{ph}"] = f"{lost[ph]}/{probes[ph]}"
        if start is not None:
            before = [e for e in mine if phase(e) == "before"]
            during = [e for e in mine if phase(e) == "during"]
            if before and during:
                a, b = before[-1], during[-1]
                for key in ("bytes", "packets", "drop"):
                    row[f"{key}_during"] = sum(
                        int(b.get(f"{d}_{key}", 0) or 0) - int(a.get(f"{d}_{key}", 0) or 0)
                        for d in ("rx", "tx")
                    )
        out_nodes.append(row)
    rules: dict[str, dict[str, Any]] = {}
    for e in tl.of("net", "rule_counters"):
        rules[str(e.get("rule"))] = {
            k: e.get(k)
            for k in (
                "rule",
                "node",
                "fault",
                "rule_kind",
                "chain",
                "dev",
                "packets",
                "bytes",
                "dropped",
            )
            if e.get(k) is not None
        }
    hz = tl.first("net", "net_track_started")
    return {
        "window": {
            "from": "fault injected" if start is not None else None,
            "to": to,
            "seconds": round(end - start, 3) if start is not None and end is not None else None,
        },
        "hz": hz.get("hz") if hz else None,
        "probe": hz.get("probe") if hz else None,
        "nodes": out_nodes,
        "rules": list(rules.values()),
        "samples": len(samples),
        "gaps": len(tl.of("net", "net_track_gap")),
    }


def _ms(v: Any) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def network_lines(item: dict[str, Any]) -> list[str]:
    """report.md lines for one item's ``placement`` and ``network`` sections (report.json)."""
    lines: list[str] = []
    where = item.get("placement")
    if where and (where.get("lost") or where.get("spares_placed") or where.get("spares_rejected")):
        resumed = where.get("resumed_on")
        parts = [
            f"ran on {', '.join(where.get('before') or []) or '?'} "
            f"(world size {where.get('world_size_before')})",
            "resumed on "
            + (
                f"{', '.join(resumed)} (world size {where.get('world_size_after')})"
                if resumed
                else "no node: the job did not resume"
            ),
        ]
        for lost in where.get("lost") or []:
            parts.append(f"{lost['node']} lost at +{lost['at_s']:.2f} s ({lost['reason']})")
        for sp in where.get("spares_placed") or []:
            parts.append(f"spare {sp['node']} placed for {sp['replaces']} at +{sp['at_s']:.2f} s")
        for sp in where.get("spares_rejected") or []:
            parts.append(
                f"spare {sp['node']} REJECTED, environment preparation: "
                f"{sp['precondition']}: {sp['detail']}"
            )
        for detail in where.get("no_spare") or []:
            parts.append(f"no spare: {detail}")
        lines += [f"**Placement**: {'; '.join(parts)}.", ""]
    net = item.get("network")
    if net:
        w = net.get("window") or {}
        span = f"{w['seconds']:.1f} s, " if w.get("seconds") is not None else ""
        lines += [
            f"**Network track** ({net.get('hz')} Hz per node; {net.get('probe')}; fault window "
            f"{span}from {w.get('from') or 'start'} to {w.get('to')}):",
            "",
            "| node | RTT before ms | RTT during ms | RTT after ms | probes lost during | "
            "bytes during | packets during | interface drops during |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for n in net.get("nodes") or []:
            lines.append(
                f"| {n['node']} | {_ms(n.get('rtt_before_ms'))} | {_ms(n.get('rtt_during_ms'))} "
                f"| {_ms(n.get('rtt_after_ms'))} | {n.get('lost_during')} | "
                f"{n.get('bytes_during', 'n/a')} | {n.get('packets_during', 'n/a')} | "
                f"{n.get('drop_during', 'n/a')} |"
            )
        rules = net.get("rules") or []
        if rules:
            lines.append("")
            lines.append(
                "Injected rules (final counters): "
                + "; ".join(
                    f"`{r.get('rule')}` {r.get('rule_kind')} {r.get('chain') or r.get('dev')} on "
                    f"{r.get('node')}: {r.get('packets')} packets"
                    + (f", {r['dropped']} dropped" if r.get("dropped") is not None else "")
                    for r in rules
                )
            )
        if net.get("gaps"):
            lines.append(f"\n{net['gaps']} gap(s) in the network track.")
        lines.append("")
    return lines
