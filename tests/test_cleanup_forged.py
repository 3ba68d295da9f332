"""A ledger proves nothing about who wrote it: a forged or edited run directory cannot
widen what ``faultdrill cleanup`` (root) acts on.

Each test is one attack seen to work before ledgers were signed (issue 21, items 1 and 2);
the docstring says what the old code did. The attacks write the run directory only, as
anyone who can write it could; the state directory (the signing key, the ``active/``
index) is faultdrill's own. Real processes are the decoys; the Slurm and Kubernetes
undos are run against stand-ins of ``scontrol`` and the API that record what would be
done.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import faultdrill.platforms.kubernetes.platform as k8s_platform
import faultdrill.platforms.slurm.platform as slurm_platform
from faultdrill import platforms as _platforms  # noqa: F401  (registers the undo kinds)
from faultdrill.host import procfs
from faultdrill.ledger import OWNS, UNDOERS, Ledger, acting_for
from faultdrill.platforms.kubernetes.manifest import run_label
from faultdrill.platforms.kubernetes.objects import CORDONED_BY
from faultdrill.platforms.ray.embedded import MARKER_ENV, process_tree
from tests.drillkit import cli_env

TAG = uuid.uuid4().hex[:8]
RUN = f"demo-lm-kill-worker-{TAG}"
VICTIM = f"victim-run-{TAG}"


def _sleeper(env_extra: dict[str, str], **kw: Any) -> subprocess.Popen[bytes]:
    """``sleep 1000`` carrying ``env_extra``, returned once its exec is complete (its
    environment readable in /proc)."""
    proc = subprocess.Popen(["sleep", "1000"], env={**os.environ, **env_extra}, **kw)
    for _ in range(500):
        if procfs.cmdline(proc.pid) == ["sleep", "1000"]:
            return proc
        time.sleep(0.01)
    raise AssertionError(f"decoy {proc.pid} never showed its command line")


@pytest.fixture()
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.fixture()
def state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This machine's state directory for the test (the signing key, the index)."""
    path = tmp_path / "state"
    monkeypatch.setenv("FAULTDRILL_STATE_DIR", str(path))
    return path


def _cleanup(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "faultdrill.cli", "cleanup", *args],
        env=cli_env(state),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _forged(run_dir: Path, *records: dict[str, Any]) -> Path:
    """A ledger written by hand (no signature), as anyone who can write the directory can."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "ledger.jsonl"
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return path


def _alive(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None and procfs.alive(proc.pid)


# --- item 1: the run's identity is not the ledger's to say --------------------------------


def test_a_forged_header_and_share_kill_no_process_of_another_run(
    tmp_path: Path, state: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    """The issue's repro. Before: the header and ``shares`` line made the victim run's id
    this run's, the ``run-processes`` claim held, and cleanup said "1 of 1 pending
    change(s) undone", exit 0, having SIGKILLed the victim's process."""
    victim = _sleeper({"FAULTDRILL_RUN_ID": VICTIM})
    procs.append(victim)
    ledger = _forged(
        tmp_path / "run",
        {"op": "run", "run_id": RUN, "ts": 1},
        {"op": "shares", "run_id": VICTIM, "ts": 1},
        {"op": "record", "id": "aaaaaaaaaaaa", "kind": "run-processes",
         "data": {"run_id": VICTIM}, "label": "x", "ts": 1},
    )  # fmt: skip
    done = _cleanup(state, str(ledger.parent))
    time.sleep(0.2)
    assert _alive(victim), "cleanup killed a process of another run"
    assert done.returncode == 1, done.stdout + done.stderr
    assert "its run header is not signed by faultdrill on this machine" in done.stderr
    assert "run-processes" in done.stderr and "pending change(s) undone" not in done.stdout
    assert "Traceback" not in done.stderr


def test_a_forged_replica_copy_spares_another_sessions_leader(
    tmp_path: Path, state: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    """Before: a ``replica-copy`` whose ``pid`` is another session's leader (and whose
    header names that session's run) killed that whole session."""
    leader = _sleeper({"FAULTDRILL_RUN_ID": VICTIM}, start_new_session=True)
    procs.append(leader)
    data = {"pid": leader.pid, "start_time": procfs.start_time(leader.pid), "run_id": VICTIM}
    ledger = _forged(
        tmp_path / "run",
        {"op": "run", "run_id": VICTIM, "ts": 1},
        {"op": "record", "id": "bbbbbbbbbbbb", "kind": "replica-copy", "data": data, "ts": 1},
        {"op": "applied", "id": "bbbbbbbbbbbb", "ts": 1},
    )
    done = _cleanup(state, str(ledger))
    time.sleep(0.2)
    assert _alive(leader), "cleanup killed another session's leader"
    assert done.returncode == 1 and "replica-copy" in done.stderr, done.stdout + done.stderr


def _real_run(state: Path, run_dir: Path, run_id: str) -> tuple[Ledger, Path]:
    """A drill's ledger with one pending change (a filler file), listed as active."""
    run_dir.mkdir(parents=True)
    ledger = Ledger(run_dir / "ledger.jsonl", run_id=run_id)
    ledger.activate()
    filler = run_dir / ".faultdrill-fill"
    ledger.mark_applied(ledger.record("filler-file", {"path": str(filler)}, "filler"))
    filler.write_bytes(b"x")
    return ledger, state / "active" / f"{run_id}.ledger"


def test_a_header_naming_another_run_leaves_that_runs_index_entry(
    tmp_path: Path, state: Path
) -> None:
    """Before: a ledger whose header named a running drill's id, with nothing pending,
    made ``deactivate`` delete that drill's index entry: a later bare ``cleanup`` never
    found the real run."""
    _, index = _real_run(state, tmp_path / "real", RUN)
    forged = _forged(tmp_path / "forged", {"op": "run", "run_id": RUN, "ts": 1})
    done = _cleanup(state, str(forged))
    assert index.exists(), "cleanup removed the index entry of another ledger"
    assert done.returncode == 1, done.stdout + done.stderr


def test_deactivate_removes_only_the_entry_naming_this_very_ledger(
    tmp_path: Path, state: Path
) -> None:
    """A signed ledger of the same run id at another path (a rerun into another
    directory) finishing clean does not drop the entry of the ledger still pending."""
    _, index = _real_run(state, tmp_path / "real", RUN)
    other = Ledger(tmp_path / "again" / "ledger.jsonl", run_id=RUN)
    other.mark_applied(other.record("node-kill", {"node": "n1"}, "k"))
    assert other.revert_all() == [] and not other.pending()
    other.deactivate()
    assert index.exists(), "deactivate removed the index entry of another ledger"


def test_an_index_entry_naming_another_runs_ledger_is_refused(tmp_path: Path, state: Path) -> None:
    """The index is the state directory's, but the ledger it names must be that run's:
    an entry of run X pointing at a ledger signed as run Y undoes nothing."""
    ledger, index = _real_run(state, tmp_path / "real", RUN)
    index.unlink()
    other = state / "active" / f"{VICTIM}.ledger"
    other.write_text(json.dumps({"ledger": str(ledger.path), "pid": 2**22 + 11}) + "\n")
    done = _cleanup(state)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"its signed header names run {RUN}" in done.stderr and other.exists()
    assert (ledger.path.parent / ".faultdrill-fill").exists()


def test_the_real_ledger_is_still_cleaned_up_and_its_entry_dropped(
    tmp_path: Path, state: Path
) -> None:
    """The healthy case the refusals must not break: a drill whose harness is gone is
    cleaned by a bare ``cleanup``, and its index entry goes."""
    ledger, index = _real_run(state, tmp_path / "real", RUN)
    raw = json.loads(index.read_text())
    index.write_text(json.dumps({**raw, "pid": 2**22 + 11, "start_time": 1}) + "\n")
    done = _cleanup(state)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 of 1 pending change(s) undone (run " + RUN in done.stdout
    assert not (ledger.path.parent / ".faultdrill-fill").exists() and not index.exists()


def test_a_ledger_copied_elsewhere_or_from_another_machine_is_refused(
    tmp_path: Path, state: Path
) -> None:
    """Before: a copy was replayed as the run it names. A signature binds the file's path
    and this machine's key: a copy to another directory verifies nothing, nor does the
    original under another machine's key; the message names the fix."""
    ledger, _ = _real_run(state, tmp_path / "real", RUN)
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(ledger.path, copy / "ledger.jsonl")
    inside = copy / ".faultdrill-fill"  # what the copy's entry would name, re-rooted
    text = (copy / "ledger.jsonl").read_text().replace(str(ledger.path.parent), str(copy))
    (copy / "ledger.jsonl").write_text(text)
    inside.write_bytes(b"x")
    for args, where in (([str(copy)], state), ([str(ledger.path)], tmp_path / "elsewhere")):
        done = _cleanup(where, *args)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "copied from another machine or another path" in done.stderr
        assert "on the machine that ran the drill" in done.stderr
    assert inside.exists() and (ledger.path.parent / ".faultdrill-fill").exists()


def test_an_edited_line_of_a_real_ledger_is_refused(tmp_path: Path, state: Path) -> None:
    """A signed ledger with one record changed by hand: that record is refused unread,
    the rest is cleaned up."""
    ledger, _ = _real_run(state, tmp_path / "real", RUN)
    decoy = tmp_path / "precious"
    decoy.write_text("keep me\n")
    eid = ledger.record("filler-file", {"path": str(ledger.path.parent / "f2")}, "f2")
    ledger.mark_applied(eid)
    text = ledger.path.read_text().replace(str(ledger.path.parent / "f2"), str(decoy))
    ledger.path.write_text(text)
    again = Ledger(ledger.path, run_id=RUN)
    assert again.trusted and eid not in again.entries
    assert any("not signed" in r and str(decoy) in r for r in again.refused), again.refused
    assert again.revert_all() == [] and decoy.exists()


# --- processes looked up by a pattern are checked when they are signalled -------------------


def test_an_undo_knows_the_run_it_acts_for(state: Path, tmp_path: Path) -> None:
    seen: list[tuple[str, ...]] = []
    UNDOERS["t-acting"], OWNS["t-acting"] = (lambda data: seen.append(acting_for())), {}
    try:
        ledger = Ledger(tmp_path / "ledger.jsonl", run_id=RUN)
        ledger.share(VICTIM)
        ledger.mark_applied(ledger.record("t-acting", {}, "x"))
        assert ledger.revert_all() == [] and seen == [(RUN, VICTIM)]
        assert acting_for() == ()
    finally:
        del UNDOERS["t-acting"], OWNS["t-acting"]


def test_a_ray_marker_taken_by_another_process_is_not_ours(
    procs: list[subprocess.Popen[bytes]],
) -> None:
    """Before: the marker claim looked at the processes once, and the undo looked them up
    again to kill them: one that carried the marker by then (or whose environment could
    not be read yet) was killed. Now the undo keeps only processes of the run's id."""
    marker = uuid.uuid4().hex
    theirs = _sleeper({MARKER_ENV: marker})
    ours = _sleeper({MARKER_ENV: marker, "FAULTDRILL_RUN_ID": RUN})
    procs.extend([theirs, ours])
    assert set(process_tree(None, None, marker)) == {theirs.pid, ours.pid}
    assert set(process_tree(None, None, marker, (RUN,))) == {ours.pid}
    assert process_tree(None, None, marker, ()) == {}


# --- item 2: a cluster's object is acted on only while it is the run's ----------------------


class _Scontrol:
    """Stand-in for ``scontrol``: a node drained with ``reason``; records the calls."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.calls: list[list[str]] = []

    def __call__(self, ns: Any, conf: Any, argv: list[str]) -> Any:
        self.calls.append(argv)
        out = ""
        if argv[0] == "show":
            out = f"NodeName={argv[2]} State=IDLE+DRAIN Reason={self.reason} [root@2026-12-01T09:00:00]"
        return subprocess.CompletedProcess(argv, 0, out, "")


def _revert_one(path: Path, kind: str, data: dict[str, Any]) -> Ledger:
    """Record ``data`` (signed) in a ledger of RUN and replay it as cleanup does."""
    writer = Ledger(path, run_id=RUN)
    writer.mark_applied(writer.record(kind, data, kind))
    ledger = Ledger(path, run_id=RUN)
    ledger.revert_all()
    return ledger


@pytest.mark.parametrize(
    ("recorded", "live", "resumed"),
    [
        ("admin-maintenance", "admin-maintenance", False),  # the forged entry
        (f"faultdrill {VICTIM}: node-drain", f"faultdrill {VICTIM}: node-drain", False),
        (f"faultdrill {RUN}: node-drain", "admin-maintenance", False),  # drained since
        (f"faultdrill {RUN}: node-drain", f"faultdrill {RUN}: node-drain", True),  # ours
    ],
    # fixed ids: the run ids are random, and both test workers must collect the same names
    ids=["admin-maintenance", "another-run", "drained-since", "ours"],
)
def test_slurm_resumes_only_a_node_drained_for_this_run(
    tmp_path: Path,
    state: Path,
    monkeypatch: pytest.MonkeyPatch,
    recorded: str,
    live: str,
    resumed: bool,
) -> None:
    """Before: the undo compared the live reason with the ledger's own, so an entry
    recording an administrator's reason resumed the administrator's drained node."""
    scontrol = _Scontrol(live)
    monkeypatch.setattr(slurm_platform, "_scontrol", scontrol)
    data = {"node": "victim-node", "reason": recorded, "embedded": False}
    ledger = _revert_one(tmp_path / "ledger.jsonl", "slurm-drain", data)
    updates = [c for c in scontrol.calls if c[0] == "update"]
    assert updates == ([["update", "NodeName=victim-node", "State=RESUME"]] if resumed else [])
    assert bool(ledger.refused) == (not recorded.startswith(f"faultdrill {RUN}"))


class _Core:
    """Stand-in for ``CoreV1Api``: one node with ``annotations``; records the patches."""

    def __init__(self, annotations: dict[str, str]) -> None:
        self.annotations = annotations
        self.patches: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, api: Any) -> _Core:
        return self

    def read_node(self, name: str, **kw: Any) -> Any:
        return SimpleNamespace(metadata=SimpleNamespace(annotations=self.annotations))

    def patch_node(self, name: str, body: dict[str, Any], **kw: Any) -> None:
        self.patches.append((name, body))


@pytest.mark.parametrize(
    ("annotations", "uncordoned"),
    [
        ({}, False),  # cordoned by an administrator
        ({CORDONED_BY: run_label(VICTIM)}, False),  # by another run
        ({CORDONED_BY: run_label(RUN)}, True),  # by this run
    ],
)
def test_kubernetes_uncordons_only_a_node_this_run_cordoned(
    tmp_path: Path,
    state: Path,
    monkeypatch: pytest.MonkeyPatch,
    annotations: dict[str, str],
    uncordoned: bool,
) -> None:
    """Before: the undo uncordoned whatever node the entry named."""
    from kubernetes import client

    core = _Core(annotations)
    monkeypatch.setattr(client, "CoreV1Api", core)
    monkeypatch.setattr(k8s_platform, "api_for", lambda data: object())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}\n")
    data = {"node": "n1", "label": run_label(RUN), "kubeconfig": str(kubeconfig)}
    ledger = _revert_one(tmp_path / "ledger.jsonl", "k8s-cordon", data)
    assert ledger.refused == [] and not ledger.pending()
    assert bool(core.patches) == uncordoned
    assert bool(ledger.notes) == (not uncordoned)  # left alone, and said
    if uncordoned:
        body = core.patches[0][1]
        assert body["spec"] == {"unschedulable": None}
        assert body["metadata"]["annotations"] == {CORDONED_BY: None}


def test_a_cordon_recorded_without_a_run_label_is_left_alone(
    tmp_path: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = _Core({CORDONED_BY: run_label(RUN)})
    from kubernetes import client

    monkeypatch.setattr(client, "CoreV1Api", core)
    monkeypatch.setattr(k8s_platform, "api_for", lambda data: object())
    ledger = _revert_one(tmp_path / "ledger.jsonl", "k8s-cordon", {"node": "n1"})
    assert core.patches == [] and "records no run label" in ledger.notes[0]
