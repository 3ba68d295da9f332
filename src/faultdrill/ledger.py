"""The fault and resource ledger: an on-disk undo log that outlives the harness.

Every change a drill makes to the machine (a fault injected, a cgroup or namespace created,
an agent process started) is recorded here BEFORE it is made, with the data needed to undo
it, and marked reverted after it is undone. The file is append-only JSON lines; every record
of intent (and every fact added to one) is fsynced before the change is made, so it survives
a SIGKILL of the harness and a crash of the machine. The marks that follow (applied,
reverted) are written without waiting for the disk: one lost to a crash only makes cleanup
run an undo again, and undos are idempotent. ``faultdrill cleanup`` replays the undo of
every entry not yet marked reverted, newest first, using only what was recorded: it never
touches anything by pattern.

Undo functions are registered per entry kind with :func:`undoer`. An undo must be
idempotent and must tolerate that the change was never applied (the harness may have died
between recording and applying).

A ledger is untrusted input: a run directory can be copied, edited by hand or received
from someone else, and ``cleanup`` runs as root. A ledger proves nothing about who wrote
it, so every line is **signed**: an HMAC-SHA256 (``"mac"``, its last field) under a
per-machine key that only the state directory holds (``<state dir>/ledger.key``, 0600, in
a directory only its owner may write), over the ledger file's resolved path, the run id of
its header and the line. Reading a ledger back keeps only the lines that verify: the run
id comes from the signed header (an unsigned or edited header makes the whole ledger
untrusted: :attr:`Ledger.trusted` is False and nothing in it is acted on), a ``shares``
line counts only when signed, and a record without a valid signature is refused unread.
A ledger copied from another machine, moved to another path, or written before ledgers
were signed verifies nothing here. So every kind also states, beside its
undo, what its entry may name: ``@undoer(kind, owns={field: claim})``. Before an undo
runs, each claim checks its field against the run the ledger belongs to
(:class:`RunScope`: the run id and the ledger's own directory); an entry that names
anything this run could not have made (a path outside the run's directory or behind a
symbolic link, another run's id, a namespace, cgroup or process not of this run's making)
is **refused**: never acted on, closed in the file (op ``refused``) and listed in
:attr:`Ledger.refused` for the caller to report. The generic claims are here
(:data:`PATH`, :data:`PATHS`, :data:`THIS_RUN`, :data:`SECONDS`); those of the local
substrate (namespaces, interfaces, cgroups, processes, mount tags) are in
:mod:`faultdrill.host.owned`. A kind without a rule cannot be registered. Ledgers of runs in progress are listed in the state
directory's ``active/`` folder so that ``faultdrill cleanup`` finds them without arguments;
each index entry names the ledger file and the harness process (pid and start time), so
that a cleanup without arguments can leave alone the ledgers of drills still running.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import stat
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultdrill import safepath
from faultdrill.errors import DrillError, FaultError, NotOursError
from faultdrill.host import procfs

__all__ = [
    "OWNS",
    "PATH",
    "PATHS",
    "SECONDS",
    "THIS_RUN",
    "UNDOERS",
    "ActiveEntry",
    "Claim",
    "Ledger",
    "LedgerEntry",
    "NotOursError",
    "RunScope",
    "acting_for",
    "active_entries",
    "active_ledgers",
    "check_run_id",
    "refusal",
    "state_dir",
    "undoer",
]

Undo = Callable[[dict[str, Any]], None]
UNDOERS: dict[str, Undo] = {}

#: What a run id looks like (``TASK-ITEM-8hex``): one plain name, used in file names.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
#: A ledger is a few KB; a file far larger is not one (and is not read into memory).
_MAX_LEDGER_BYTES = 64 << 20
#: The per-machine signing key, in the state directory.
_KEY_FILE = "ledger.key"
#: A signed line: the record's JSON with ``,"mac":"<64 hex>"`` as its last field.
_SIGNED = re.compile(r'(\{.*),"mac":"([0-9a-f]{64})"\}')
#: The runs whose entry an undo is acting for now (:meth:`Ledger.revert`), trusted ones.
_ACTING: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "faultdrill_acting_for", default=()
)


def check_run_id(run_id: object) -> str:
    """``run_id`` if it is one plain name (letters, digits, ``._-``); else DrillError."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise DrillError(
            f"run id {run_id!r} is not one of faultdrill's (letters, digits, '.', '_', '-'); "
            "refusing to use it in file names"
        )
    return run_id


@dataclass(frozen=True)
class RunScope:
    """What a ledger knows of its run, against which an entry's claims are checked: the
    run id, and the run's own directory (the directory that holds the ledger file,
    resolved)."""

    run_id: str
    run_dir: Path

    def inside(self, path: Any) -> None:
        """NotOursError unless ``path`` is strictly inside the run directory with no
        symbolic link on the way (:func:`faultdrill.safepath.escape`)."""
        if not isinstance(path, str) or not path:
            raise NotOursError(f"{path!r} is not a path")
        why = safepath.escape(self.run_dir, path)
        if why is not None:
            raise NotOursError(f"{why}: not inside this run's directory {self.run_dir}")


#: Checks one field of an entry: (the field's value, the whole entry, the run) -> None, or
#: NotOursError saying why the value names something this run did not make. A field that
#: is absent or null is not checked (the undo has nothing to act on there).
Claim = Callable[[Any, Mapping[str, Any], RunScope], None]


def _path(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    run.inside(value)


def _paths(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    if not isinstance(value, list):
        raise NotOursError(f"{value!r} is not a list of paths")
    for item in value:
        run.inside(item)


def _this_run(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    if value != run.run_id:
        raise NotOursError(f"names run {value!r}, but this ledger is run {run.run_id!r}")


def _seconds(value: Any, data: Mapping[str, Any], run: RunScope) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 <= value <= 120:
        raise NotOursError(f"a wait of {value!r} s is not one faultdrill records (0 to 120 s)")


#: A path strictly inside the run's directory, no symbolic link on the way.
PATH: Claim = _path
#: A list of such paths.
PATHS: Claim = _paths
#: This very run's id (undos that find the live cluster of a run by its id).
THIS_RUN: Claim = _this_run
#: A bounded wait in seconds (an undo waits that long: an absurd value would hang it).
SECONDS: Claim = _seconds

#: kind -> {field: claim}: what an entry of the kind may name (see the module docstring).
OWNS: dict[str, Mapping[str, Claim]] = {}


def undoer(kind: str, *, owns: Mapping[str, Claim]) -> Callable[[Undo], Undo]:
    """Register the undo of ledger entries of ``kind`` and what their data may name
    (``owns``: field -> claim; ``{}`` for an undo that acts on nothing). Duplicates are
    refused."""

    def wrap(fn: Undo) -> Undo:
        if kind in UNDOERS:
            raise DrillError(f"undo for ledger kind {kind!r} registered twice")
        UNDOERS[kind] = fn
        OWNS[kind] = dict(owns)
        return fn

    return wrap


def refusal(
    kind: str, data: Mapping[str, Any], run: RunScope, shared: Sequence[str] = ()
) -> str | None:
    """Why an entry of ``kind`` with ``data`` names something this run could not have made
    (None when every claim of the kind holds). A kind with no stated rule is refused.
    ``shared``: run ids of scopes this run acts within (a cluster shared by a run's items,
    :meth:`Ledger.share`); a claim holds when it holds for this run or for one of them."""
    claims = OWNS.get(kind)
    if claims is None:
        return f"ledger kind {kind!r} states no rule of what its entries may name"
    runs = [run, *(RunScope(r, run.run_dir) for r in shared if r != run.run_id)]
    for key, claim in claims.items():
        value = data.get(key)
        if value is None:
            continue
        why = None
        for scope in runs:
            why = _claim_refusal(claim, key, value, data, scope)
            if why is None:
                break
        if why is not None:
            return why
    return None


def _claim_refusal(
    claim: Claim, key: str, value: Any, data: Mapping[str, Any], run: RunScope
) -> str | None:
    try:
        claim(value, data, run)
    except NotOursError as exc:
        return f"{key}: {exc}"
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return f"{key}: malformed ({type(exc).__name__}: {exc})"
    return None


def state_dir() -> Path:
    """Where ledgers of runs in progress are indexed (``$FAULTDRILL_STATE_DIR`` wins)."""
    env = os.environ.get("FAULTDRILL_STATE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/faultdrill")
    return Path.home() / ".local" / "state" / "faultdrill"


def acting_for() -> tuple[str, ...]:
    """The run ids (the run and the runs it shares, from its signed ledger) whose entry is
    being undone now by :meth:`Ledger.revert`; empty outside an undo. An undo that looks
    processes up by a pattern acts only on those carrying one of these ids."""
    return _ACTING.get()


def _owned_private(path: Path, what: str) -> os.stat_result:
    """lstat of ``path``; DrillError unless it is owned by this user, writable by no one
    else, and not a symbolic link (what a signing key and its directory must be)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise DrillError(
            f"{path}: the {what} must be owned by uid {os.geteuid()}, writable by it alone and "
            f"not a symbolic link (found uid {st.st_uid}, mode {stat.filemode(st.st_mode)}); "
            f"fix: chown {os.geteuid()} {path} && chmod go-w {path}"
        )
    return st


def _machine_key() -> bytes:
    """This machine's ledger signing key (``<state dir>/ledger.key``), made on first use:
    32 random bytes, mode 0600, published atomically (a link to a finished file)."""
    base = state_dir()
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    _owned_private(base, "state directory")
    key = base / _KEY_FILE
    if not os.path.lexists(key):
        tmp = base / f".{_KEY_FILE}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, secrets.token_bytes(32))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, key)
        except FileExistsError:
            pass  # another process made it first: theirs is the key
        finally:
            tmp.unlink(missing_ok=True)
    st = _owned_private(key, "ledger signing key")
    if st.st_mode & 0o077 or not stat.S_ISREG(st.st_mode):
        raise DrillError(
            f"{key}: the ledger signing key must be a file of mode 0600; fix: chmod 600 {key}"
        )
    fd = os.open(key, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        raw = f.read(65)
    if len(raw) != 32:
        raise DrillError(f"{key}: not a ledger signing key (32 bytes); remove it and run again")
    return raw


def _mac(key: bytes, ledger: str, run_id: str, body: str) -> str:
    msg = "\0".join(("faultdrill-ledger-v1", ledger, run_id, body)).encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


@dataclass
class ActiveEntry:
    """One index entry of ``<state dir>/active``: a run that has not finished cleanly."""

    index: Path
    ledger: Path | None
    pid: int | None = None
    start_time: int | None = None
    problem: str = ""  # why the index entry could not be read (then ledger is None)

    @property
    def run_id(self) -> str:
        return self.index.name.removesuffix(".ledger")

    def harness_alive(self) -> bool:
        """True if the harness that wrote the entry still runs (same pid AND start time).
        An entry of the older format (a path only) cannot tell: False."""
        if self.pid is None or self.start_time is None:
            return False
        return procfs.alive(self.pid, self.start_time)


def _read_index(index: Path) -> ActiveEntry:
    try:
        text = index.read_text(errors="replace").strip()
    except OSError as exc:
        return ActiveEntry(index, None, problem=f"cannot read: {exc.strerror}")
    if not text.startswith("{"):  # the older format: the ledger's path alone
        return ActiveEntry(index, Path(text)) if text else ActiveEntry(index, None, problem="empty")
    try:
        raw = json.loads(text)
        ledger = Path(str(raw["ledger"]))
        pid = raw.get("pid")
        start = raw.get("start_time")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return ActiveEntry(index, None, problem=f"not an index entry ({type(exc).__name__})")
    return ActiveEntry(
        index,
        ledger,
        pid=pid if isinstance(pid, int) else None,
        start_time=start if isinstance(start, int) else None,
    )


def active_entries() -> list[ActiveEntry]:
    """Index entries of runs that have not finished cleanly, oldest first (an entry that
    vanishes while listing, removed by its own harness, is simply not listed)."""
    active = state_dir() / "active"
    if not active.is_dir():
        return []
    stamped = []
    for index in active.iterdir():
        try:
            stamped.append((index.stat().st_mtime, index.name, index))
        except OSError:
            continue
    return [_read_index(index) for _, _, index in sorted(stamped)]


def active_ledgers() -> list[Path]:
    """Ledger files of runs that have not finished cleanly, oldest first."""
    return [e.ledger for e in active_entries() if e.ledger is not None]


@dataclass
class LedgerEntry:
    id: str
    kind: str
    data: dict[str, Any]
    label: str
    recorded_at: float
    applied: bool = False
    reverted: bool = False  # closed: undone, or refused (then ``refused`` says why)
    errors: list[str] = field(default_factory=list)
    #: ``time.monotonic()`` when the change was marked applied (taken before the record is
    #: written): the instant it was known to be in effect. None if not applied here.
    applied_mono: float | None = None
    refused: str = ""


class Ledger:
    """One run's undo log. Thread-safe; every write is fsynced.

    The file is opened without following a symbolic link, and must be a regular file of
    sane size (a run directory is untrusted input); otherwise DrillError. A new ledger's
    first line names its run id (op ``run``)."""

    def __init__(self, path: Path, *, run_id: str) -> None:
        self.path = path
        self.run_id = check_run_id(run_id)
        #: The path every line's signature binds (a copy elsewhere verifies nothing).
        self._signed_path = os.path.realpath(path)
        self._key = _machine_key()
        #: The run an entry's claims are checked against (the ledger's directory).
        self.scope = RunScope(self.run_id, Path(os.path.realpath(path.parent)))
        # Reentrant: an undo may record what it starts again (the Kubernetes test cluster's
        # apiserver or kubelet restarted by the undo of their stop); such new entries are
        # not part of the ``revert_all`` pass that ran the undo.
        self._lock = threading.RLock()
        self.entries: dict[str, LedgerEntry] = {}
        #: Lines of the file that could not be read back (see :meth:`_load`).
        self.problems: list[str] = []
        #: What undos left alone as not ours (``NotOursError``), for the caller to report.
        self.notes: list[str] = []
        #: Entries refused before any undo: unsigned, or naming what this run could not
        #: have made.
        self.refused: list[str] = []
        #: Run ids of the scopes this run acts within (:meth:`share`).
        self.shared: list[str] = []
        #: Whether the file is this machine's run's: its header's signature verified (a new
        #: file is). An untrusted ledger is never acted on nor written; ``untrusted`` says why.
        self.trusted = True
        self.untrusted = ""
        #: A new file starts with a header naming its run (written with the first record).
        self._header = not os.path.lexists(path)
        if not self._header:
            self._load()
        path.parent.mkdir(parents=True, exist_ok=True)

    # --- index in the state dir -------------------------------------------------------

    def _index_file(self) -> Path:
        return state_dir() / "active" / f"{check_run_id(self.run_id)}.ledger"

    def activate(self) -> None:
        """List this ledger in the state dir so a later ``cleanup`` finds it, with this
        process (the harness) as its owner: pid and start time."""
        idx = self._index_file()
        idx.parent.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        entry = {
            "ledger": str(self.path.resolve()),
            "pid": pid,
            "start_time": procfs.start_time(pid),
        }
        idx.write_text(json.dumps(entry) + "\n")

    def deactivate(self) -> None:
        """Drop the index entry; only when every entry is reverted, the ledger is trusted,
        and the entry names this very ledger file (an entry of the same run id pointing
        elsewhere is another ledger's, and stays)."""
        if self.pending() or not self.trusted:
            return
        idx = self._index_file()
        if not os.path.lexists(idx):
            return
        entry = _read_index(idx)
        if entry.ledger is not None and os.path.realpath(entry.ledger) == self._signed_path:
            idx.unlink(missing_ok=True)

    # --- records --------------------------------------------------------------------

    def _open(self, flags: int) -> int:
        """The ledger file, opened without following a link; DrillError unless it is a
        regular file of sane size."""
        try:
            fd = os.open(self.path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if os.path.islink(self.path):
                raise DrillError(
                    f"{self.path} is a symbolic link (to {os.readlink(self.path)}), not a "
                    "ledger: refusing to read or write it; remove the link"
                ) from exc
            raise DrillError(f"{self.path}: cannot open the ledger: {exc.strerror}") from exc
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_LEDGER_BYTES:
            os.close(fd)
            raise DrillError(
                f"{self.path} is not a ledger (not a regular file, or over "
                f"{_MAX_LEDGER_BYTES >> 20} MiB); refusing to use it"
            )
        return fd

    def _signed(self, rec: dict[str, Any]) -> str:
        """One line: ``rec`` as JSON with its signature (see the module docstring) last."""
        body = json.dumps(rec, separators=(",", ":"))
        mac = _mac(self._key, self._signed_path, self.run_id, body)
        return f'{body[:-1]},"mac":"{mac}"}}\n'

    def _verified(self, raw: str, run_id: str) -> dict[str, Any] | None:
        """The record of a line whose signature verifies for ``run_id``; else None."""
        m = _SIGNED.fullmatch(raw)
        if m is None:
            return None
        body = m.group(1) + "}"
        if not hmac.compare_digest(m.group(2), _mac(self._key, self._signed_path, run_id, body)):
            return None
        rec = json.loads(body)
        return rec if isinstance(rec, dict) else None

    def _append(self, rec: dict[str, Any], *, durable: bool = True) -> None:
        """Append one signed line; ``durable``: fsynced before returning (a record of
        intent). An untrusted ledger is never written (DrillError)."""
        if not self.trusted:
            raise DrillError(f"{self.path}: {self.untrusted}; not writing to it")
        line = self._signed(rec)
        if self._header:
            line = self._signed({"op": "run", "run_id": self.run_id, "ts": time.time()}) + line
            self._header = False
        fd = self._open(os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line.encode())
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _load(self) -> None:
        """Read the file back, keeping only what verifies (see the module docstring). A
        torn last line is skipped silently (the change it announced was never made); any
        other line that is not a well-formed signed record is skipped and said in
        :attr:`problems` (an unsigned record in :attr:`refused`), so one damaged line
        never hides the rest of the ledger."""
        fd = self._open(os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            lines = f.read(_MAX_LEDGER_BYTES + 1).decode(errors="replace").splitlines()
        if not any(line.strip() for line in lines):
            self._header = True  # an empty file: as a new one
            return
        run_id = self._signed_run(lines)
        if run_id is None:
            self.trusted = False
            self.untrusted = (
                "its run header is not signed by faultdrill on this machine: the ledger was "
                "copied from another machine or another path, edited, or written by a "
                "faultdrill older than signed ledgers; nothing in it is acted on"
            )
        else:
            self.run_id = run_id
            self.scope = RunScope(run_id, self.scope.run_dir)
        for n, raw in enumerate(lines, 1):
            rec = self._verified(raw, run_id) if run_id is not None else None
            if rec is None:
                self._unverified(n, raw, last=n == len(lines))
            elif rec.get("op") != "run":
                self._apply(n, rec)

    def _signed_run(self, lines: Sequence[str]) -> str | None:
        """The run id of the first header whose signature verifies, or None."""
        for raw in lines:
            try:
                head = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if not isinstance(head, dict) or head.get("op") != "run":
                continue
            claimed = head.get("run_id")
            if not isinstance(claimed, str) or not _RUN_ID.fullmatch(claimed):
                continue
            if self._verified(raw, claimed) is not None:
                return claimed
        return None

    def _unverified(self, n: int, raw: str, *, last: bool) -> None:
        """Say a line that does not verify: a record is refused, anything else a problem."""
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError:
            if not last:  # a torn last line: the change it announced was never recorded
                self.problems.append(f"line {n}: not JSON")
            return
        if not isinstance(rec, dict):
            self.problems.append(f"line {n}: not a JSON object")
        elif rec.get("op") == "record":
            what = f"{rec.get('kind')!s:.40} {rec.get('label')!s:.80}".strip()
            data = json.dumps(rec.get("data"))[:200]
            self.refused.append(
                f"line {n}: {what} {data}: not signed by faultdrill on this machine for this "
                "ledger (forged, edited, or copied from elsewhere)"
            )
        elif rec.get("op") != "run" or self.trusted:
            self.problems.append(
                f"line {n}: not signed by faultdrill on this machine for this ledger; ignored"
            )

    def _apply(self, n: int, rec: dict[str, Any]) -> None:
        """Take one verified line into the entries (or the shared scopes)."""
        op, eid = rec.get("op"), rec.get("id")
        if op == "shares":
            if isinstance(rec.get("run_id"), str) and _RUN_ID.fullmatch(rec["run_id"]):
                self.shared.append(rec["run_id"])
            else:
                self.problems.append(f"line {n}: a shared scope without a valid run id")
            return
        if not isinstance(eid, str):
            self.problems.append(f"line {n}: no entry id")
            return
        if op == "record":
            kind, data = rec.get("kind"), rec.get("data")
            if not isinstance(kind, str) or not isinstance(data, dict):
                self.problems.append(f"line {n}: a record without 'kind' or 'data'")
                return
            if eid in self.entries and self.entries[eid].reverted:
                # A signed line replayed after its close: it must not re-arm the undo.
                self.problems.append(f"line {n}: entry {eid} recorded again after its close")
                return
            self.entries[eid] = LedgerEntry(
                id=eid,
                kind=kind,
                data=data,
                label=str(rec.get("label", "")),
                recorded_at=rec.get("ts", 0.0),
            )
        elif eid in self.entries:
            entry = self.entries[eid]
            if op == "applied":
                entry.applied = True
            elif op == "reverted":
                entry.reverted = True
            elif op == "refused":
                entry.reverted = True
                entry.refused = str(rec.get("reason", "refused"))
            elif op == "revert_failed":
                entry.errors.append(rec.get("error", ""))

    def share(self, run_id: str) -> None:
        """This run acts within the scope of run ``run_id`` too (a cluster brought up once
        for all the items of a run, with a ledger of its own): its entries may name what
        that run made (its namespaces, cgroups, processes, live cluster), and the claims
        accept either run. Recorded before any entry that needs it; idempotent."""
        with self._lock:
            if check_run_id(run_id) in self.shared or run_id == self.run_id:
                return
            self._append({"op": "shares", "run_id": run_id, "ts": time.time()})
            self.shared.append(run_id)

    def record(self, kind: str, data: dict[str, Any], label: str = "") -> str:
        """Write the intent to change something; returns the entry id. Call BEFORE acting."""
        if kind not in UNDOERS:
            raise DrillError(f"ledger kind {kind!r} has no registered undo")
        eid = uuid.uuid4().hex[:12]
        with self._lock:
            ts = time.time()
            self._append(
                {"op": "record", "id": eid, "kind": kind, "data": data, "label": label, "ts": ts}
            )
            self.entries[eid] = LedgerEntry(eid, kind, dict(data), label, ts)
        return eid

    def update(self, entry_id: str, **data: Any) -> None:
        """Add facts learned while applying (e.g. the pid just started)."""
        with self._lock:
            entry = self.entries[entry_id]
            entry.data.update(data)
            self._append(
                {
                    "op": "record",
                    "id": entry_id,
                    "kind": entry.kind,
                    "data": entry.data,
                    "label": entry.label,
                    "ts": entry.recorded_at,
                }
            )

    def mark_applied(self, entry_id: str) -> None:
        """Say the change is made. Call right after making it: the time it is marked is
        when it is known to be in effect (``applied_mono``), before the record's fsync."""
        mono = time.monotonic()
        with self._lock:
            entry = self.entries[entry_id]
            entry.applied, entry.applied_mono = True, mono
            self._append(
                {"op": "applied", "id": entry_id, "ts": time.time(), "mono": mono}, durable=False
            )

    def revert(self, entry_id: str) -> None:
        """Undo one entry now (idempotent). Raises FaultError if the undo fails. An entry
        that names what this run could not have made (:func:`refusal`) is not undone: it
        is closed as refused and listed in :attr:`refused`."""
        with self._lock:
            entry = self.entries[entry_id]
            if entry.reverted:
                return
            why = refusal(entry.kind, entry.data, self.scope, self.shared)
            if why is not None:
                self.refused.append(f"{entry.kind} {entry.label}".strip() + f": {why}")
                entry.reverted, entry.refused = True, why
                self._append({"op": "refused", "id": entry_id, "ts": time.time(), "reason": why})
                return
            token = _ACTING.set((self.run_id, *self.shared))
            try:
                UNDOERS[entry.kind](entry.data)
            except NotOursError as exc:  # nothing of ours is left there: closed, and said
                self.notes.append(f"{entry.kind} {entry.label}: {exc}")
                entry.reverted = True
                self._append(
                    {"op": "reverted", "id": entry_id, "ts": time.time(), "note": str(exc)}
                )
                return
            except Exception as exc:  # an undo that fails must stay pending, and be said
                entry.errors.append(str(exc))
                self._append({"op": "revert_failed", "id": entry_id, "error": str(exc)})
                raise FaultError(f"could not undo {entry.kind} {entry.label}: {exc}") from exc
            finally:
                _ACTING.reset(token)
            entry.reverted = True
            self._append({"op": "reverted", "id": entry_id, "ts": time.time()}, durable=False)

    def pending(self) -> list[LedgerEntry]:
        return [e for e in self.entries.values() if not e.reverted]

    def revert_all(self) -> list[str]:
        """Undo every pending entry, newest first; returns the errors (empty when clean)."""
        errors = []
        for entry in reversed(self.pending()):  # record order is dict order
            try:
                self.revert(entry.id)
            except FaultError as exc:
                errors.append(str(exc))
        return errors
