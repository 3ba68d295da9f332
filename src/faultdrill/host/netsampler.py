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

:func:`faultdrill.readings.network.network_summary` turns them into the report's compact per-node
table.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faultdrill.events import EventSink
    from faultdrill.host.linux import ActiveRule, NodeLink

__all__ = ["PROBE_PORT", "NetSampler", "read_rule_counters"]

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


def read_rule_counters(rule: ActiveRule) -> dict[str, Any] | None:
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
        rules: Callable[[], list[ActiveRule]],
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
        from faultdrill.host.linux import in_netns

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

    def emit_rule(self, rule: ActiveRule, *, final: bool) -> None:
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
