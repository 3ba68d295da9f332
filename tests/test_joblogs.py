"""Log-line mode (faultdrill.joblogs): the plan's patterns, how a line reads, how the live
tail attributes lines to replicas and writes events, and what the report data says.

Literal lines and log files, a real EventSink and Timeline; the replicas a platform would
report are given as data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultdrill.admit import parse_plan
from faultdrill.checks import Verdict
from faultdrill.checks.api import run_checks
from faultdrill.engine.watch import Watch
from faultdrill.errors import PlanError
from faultdrill.events import EventSink, malformed
from faultdrill.joblogs import LineReader, LogPatterns, Reading
from faultdrill.joblogs.tail import LogTail, hash_checkpoint, log_file_origin
from faultdrill.judge.log_evidence import as_reached, log_evidence, not_observable
from faultdrill.plan import Plan
from faultdrill.platforms.api import Replica
from faultdrill.timeline import Timeline
from tests.drillkit import ROOT, demo_raw
from tests.timelines import Judge, restart

#: The patterns of tests/jobs/plain_train.py, from its plan (examples/plain_logs/plan.yaml).
PLAIN: dict[str, str] = yaml.safe_load(
    (ROOT / "examples" / "plain_logs" / "plan.yaml").read_text()
)["logs"]


def plan_with(logs: dict[str, Any], **resources: Any) -> Plan:
    raw = demo_raw()
    raw["logs"] = logs
    raw["resources"].update(resources)
    return parse_plan(raw, source="plan.yaml")


def refused(logs: dict[str, Any], **resources: Any) -> str:
    with pytest.raises(PlanError) as err:
        plan_with(logs, **resources)
    return str(err.value)


# --- the plan's patterns ---------------------------------------------------------------


def test_the_patterns_of_the_plain_job_load() -> None:
    plan = plan_with(PLAIN)
    assert plan.logs is not None and plan.logs.says_rank
    assert plan.logs.sample_ids == "observed"
    assert plan.logs.blind_spots() == []


def test_a_pattern_that_does_not_compile_is_refused_naming_the_field() -> None:
    msg = refused({**PLAIN, "step": r"\] step (?P<step>\d+"})
    assert "logs.step" in msg and "does not compile: missing ), unterminated subpattern" in msg


def test_a_pattern_without_its_required_group_is_refused_naming_it() -> None:
    msg = refused({**PLAIN, "checkpoint_saved": r"saved (?P<id>\S+)"})
    assert "logs.checkpoint_saved" in msg and "needs the named group(s) step" in msg


def test_an_unknown_group_is_refused_with_the_groups_the_field_knows() -> None:
    msg = refused({**PLAIN, "step": r"step (?P<stp>\d+)"})
    assert "logs.step" in msg and "needs the named group(s) step" in msg
    msg = refused({**PLAIN, "run_end": r"done (?P<steps>\d+)"})
    assert "logs.run_end" in msg and "has named group(s) steps" in msg
    assert "its groups are digest, rank, step" in msg


def test_the_step_pattern_is_required_and_the_end_and_load_id_are_not() -> None:
    msg = refused({k: v for k, v in PLAIN.items() if k != "step"})
    assert "logs.step" in msg and "required field is missing" in msg
    plan = plan_with({k: v for k, v in PLAIN.items() if k != "run_end"})
    assert plan.logs is not None and plan.logs.run_end is None
    assert "results.final-model-digest" in dict(plan.logs.blind_spots())
    plan_with({**PLAIN, "checkpoint_loaded": r"\] resuming at step (?P<step>\d+)"})


def test_a_half_sample_range_and_a_pattern_matching_any_line_are_refused() -> None:
    msg = refused({**PLAIN, "step": r"step (?P<step>\d+) from (?P<sample_start>\d+)"})
    assert "logs.step" in msg and "sample_start with exactly one of sample_end" in msg
    msg = refused({**PLAIN, "no_checkpoint": r"(fresh)?"})
    assert "logs.no_checkpoint" in msg and "matches an empty line" in msg


def test_several_processes_per_node_need_the_rank_from_the_line() -> None:
    no_rank = {k: v for k, v in PLAIN.items() if k != "rank"}
    plan_with(no_rank)  # one process per node: the node's replica says the rank
    msg = refused(no_rank, procs_per_node=2)
    assert "logs: with procs_per_node 2 a line must say which rank wrote it" in msg


def test_what_the_patterns_leave_unobservable() -> None:
    logs = LogPatterns(step=r"step (?P<step>\d+) n=(?P<samples>\d+)", run_end="done")
    spots = dict(logs.blind_spots())
    assert set(spots) == {
        "progress.sample-ledger",
        "results.loss-matches-baseline",
        "progress.resume-point",
        "results.final-checkpoint-verifies",
        "results.final-model-digest",
    }
    assert "a count of samples" in spots["progress.sample-ledger"]
    loaded = LogPatterns(
        step=PLAIN["step"],
        run_end="done",
        checkpoint_loaded=r"from (?P<id>\S+)"
        r" at (?P<step>\d+)",
    )
    assert "progress.checkpoint-verified" in dict(loaded.blind_spots())


def test_a_plan_without_logs_keeps_its_digest() -> None:
    raw = demo_raw()
    plan = parse_plan(raw, source="plan.yaml")
    dumped = plan.model_dump(mode="json")
    assert dumped["logs"] is None
    dumped.pop("logs")
    assert parse_plan(dumped, source="again").digest() == plan.digest()
    assert plan_with(PLAIN).digest() != plan.digest()


# --- reading a line ----------------------------------------------------------------------


def test_a_line_reads_as_the_events_it_stands_for() -> None:
    reader = LineReader(LogPatterns(**PLAIN))
    assert reader.read("[rank 1] step 12 loss 0.5 samples 88:92 t=1.0") == [
        Reading("step", {"step": 12, "loss": 0.5, "samples": [[88, 92]]}, 1)
    ]
    [load] = reader.read("[rank 0] resumed from step-000010 at step 10 position 80 (verified)")
    assert (load.kind, load.rank, load.fields["verified"], load.fields["data_position"]) == (
        "ckpt_load",
        0,
        True,
        80,
    )
    [load] = reader.read("[rank 0] resumed from step-000010 at step 10 position 80")
    assert load.fields["verified"] is False  # the group did not take part
    assert reader.read("I1201 torch/distributed/elastic/agent/server/api.py: something") == []


def test_two_records_glued_in_one_line_are_both_read_with_their_ranks() -> None:
    # print() writes the text and the newline separately: two ranks' lines interleave
    line = (
        "[rank 0] step 22 loss 28.65 samples 168:172 t=7.40"
        "[rank 1] step 22 loss 25.85 samples 172:176 t=7.41"
    )
    got = LineReader(LogPatterns(**PLAIN)).read(line)
    assert [(r.kind, r.rank, r.fields["samples"]) for r in got] == [
        ("step", 0, [[168, 172]]),
        ("step", 1, [[172, 176]]),
    ]


def test_sample_counts_inclusive_ranges_and_bad_numbers() -> None:
    counted = LineReader(LogPatterns(step=r"it (?P<step>\w+) n=(?P<samples>\d+)", run_end="x"))
    assert counted.read("it 3 n=8") == [
        Reading("step", {"step": 3, "loss": None, "samples": [], "sample_count": 8})
    ]
    [bad] = counted.read("it three n=8")
    assert bad.kind == "unreadable" and "step is not a whole number" in bad.fields["why"]
    last = r"it (?P<step>\d+) ids (?P<sample_start>\d+)-(?P<sample_last>\d+)"
    inclusive = LineReader(LogPatterns(step=last, run_end="x"))
    assert inclusive.read("it 3 ids 8-11")[0].fields["samples"] == [[8, 12]]


# --- the live tail -----------------------------------------------------------------------


AGENT, W0, W1, COPY = 50, 51, 52, 60


def rep(pid: int, rank: int | None, role: str = "worker", ppid: int = AGENT) -> Replica:
    return Replica(pid, 1000 + pid, role, "n1", rank, ppid=ppid)


class Live:
    """The replicas a platform reports, changed by the test between polls."""

    def __init__(self, *reps: Replica) -> None:
        self.now = list(reps)

    def __call__(self) -> list[Replica]:
        return list(self.now)


def tail_in(tmp_path: Path, live: Live, logs: dict[str, Any] | None = None) -> LogTail:
    (tmp_path / "logs").mkdir(exist_ok=True)
    sink = EventSink(tmp_path / "events", "t")
    return LogTail(
        LogPatterns(**(logs or PLAIN)),
        tmp_path / "logs",
        sink,
        live,
        world_size=2,
        ckpt_dir=tmp_path / "ckpt",
    )


def write(path: Path, *lines: str) -> None:
    with open(path, "a") as f:
        f.write("".join(line + "\n" for line in lines))


def events(tmp_path: Path) -> list[dict[str, Any]]:
    """The events the tail wrote; each keeps the event contract (a malformed one would
    be skipped by the timeline and turn the evidence it feeds into retest)."""
    out = []
    for path in sorted((tmp_path / "events").glob("*.jsonl")):
        out += [json.loads(x) for x in path.read_text().splitlines()]
    assert [(e["kind"], malformed(e)) for e in out if malformed(e)] == []
    return out


def test_lines_become_probe_events_of_the_replica_that_wrote_them(tmp_path: Path) -> None:
    live = Live(rep(AGENT, None, "agent", 1), rep(W0, 0), rep(W1, 1))
    tail = tail_in(tmp_path, live)
    log = tmp_path / "logs" / "agent-n1.log"
    write(
        log,
        "[rank 0] start world=2",
        "[rank 1] start world=2",
        "[rank 1] step 1 loss 2.5 samples 4:8 t=0.1",
        "[rank 0] step 1 loss 2.0 samples 0:4 t=0.1",
    )
    write(log, "[rank 0] half a li")  # no newline yet: not read
    tail.poll()
    got = [(e["kind"], e["rank"], e["pid"], e["via"]) for e in events(tmp_path)]
    assert got == [
        ("run_start", 0, W0, "log"),
        ("run_start", 1, W1, "log"),
        ("step", 1, W1, "log"),
        ("step", 0, W0, "log"),
    ]
    # the engine's watch sees them like a probe's, so step triggers work on them
    watch = Watch(tmp_path / "events")
    watch.poll()
    assert (watch.max_step, watch.ranks_seen) == (1, {0, 1})


def test_a_killed_replicas_last_line_is_its_own_and_a_copy_writes_its_own(tmp_path: Path) -> None:
    live = Live(rep(AGENT, None, "agent", 1), rep(W0, 0), rep(W1, 1))
    tail = tail_in(tmp_path, live)
    log = tmp_path / "logs" / "agent-n1.log"
    write(log, "[rank 1] start world=2")
    tail.poll()
    # rank 1's replica wrote a line and was killed before the next read; a copy of it
    # (not launched by the agent) holds rank 1 now and writes into its own file
    write(log, "[rank 1] step 5 loss 1.0 samples 4:8 t=1")
    live.now = [rep(AGENT, None, "agent", 1), rep(W0, 0), rep(COPY, 1, ppid=1)]
    write(tmp_path / "logs" / "copy-n1-rank1.log", "[rank 1] start world=2")
    tail.poll()
    got = [(e["kind"], e["pid"], e["node"]) for e in events(tmp_path) if e["src"] == "probe"]
    assert got == [("run_start", W1, "n1"), ("step", W1, "n1"), ("run_start", COPY, "n1")]


def test_a_line_no_replica_can_be_found_for_is_counted_not_guessed(tmp_path: Path) -> None:
    tail = tail_in(tmp_path, Live())
    write(tmp_path / "logs" / "agent-n2.log", "[rank 1] step 1 loss 1.0 samples 4:8 t=1")
    write(tmp_path / "logs" / "notes.log", "[rank 1] step 1 loss 1.0 samples 4:8 t=1")
    tail.stop()
    [summary] = [e for e in events(tmp_path) if e["kind"] == "log_evidence"]
    assert (summary["unattributed"], summary["files"], summary["events"]) == (
        1,
        {"agent-n2.log": 1},
        {},
    )
    assert summary["stamped"] == "when the harness read the line"


def test_without_a_start_pattern_a_replica_announces_itself_with_its_first_line(
    tmp_path: Path,
) -> None:
    live = Live(rep(AGENT, None, "agent", 1), rep(W0, 0))
    logs = {k: v for k, v in PLAIN.items() if k not in ("rank", "run_start")}
    tail = tail_in(tmp_path, live, logs)
    write(tmp_path / "logs" / "agent-n1.log", "[rank 0] step 1 loss 2.0 samples 0:4 t=1")
    tail.poll()
    start, step = events(tmp_path)
    assert (start["kind"], start["synthesized"], start["rank"], start["world_size"]) == (
        "run_start",
        True,
        0,
        2,
    )
    assert (step["kind"], step["pid"]) == ("step", W0)


def test_a_saved_checkpoint_is_hashed_when_its_line_is_read(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt" / "step-000010"
    ckpt.mkdir(parents=True)
    (ckpt / "state.pt").write_bytes(b"x" * 100)
    (ckpt / "state.sha256").write_bytes(b"abc")
    live = Live(rep(AGENT, None, "agent", 1), rep(W0, 0))
    tail = tail_in(tmp_path, live)
    write(
        tmp_path / "logs" / "agent-n1.log",
        "[rank 0] saved checkpoint step-000010 at step 10 position 80",
        "[rank 0] saved checkpoint ../../etc at step 20 position 160",
    )
    tail.poll()
    good, bad = [e for e in events(tmp_path) if e["kind"] == "ckpt_save"]
    assert (good["path"], good["bytes"], good["data_position"]) == (
        str(ckpt / "state.pt"),
        100,
        80,
    )
    assert good["sha256"] == hash_checkpoint(tmp_path / "ckpt", "step-000010")["sha256"]
    assert "not a name inside" in bad["hash_problem"]


def test_a_line_that_does_not_say_its_rank_is_the_nodes_replicas(tmp_path: Path) -> None:
    live = Live(rep(AGENT, None, "agent", 1), Replica(W1, 9, "worker", "n2", 1, ppid=AGENT))
    logs = {k: v for k, v in PLAIN.items() if k != "rank"}  # one process per node
    tail = tail_in(tmp_path, live, logs)
    write(tmp_path / "logs" / "agent-n2.log", "] step 3 loss 1.5 samples 12:16 t=1")
    write(tmp_path / "logs" / "agent-n1.log", "] step 3 loss 1.5 samples 8:12 t=1")
    tail.poll()
    [step] = [e for e in events(tmp_path) if e["kind"] == "step"]
    assert (step["rank"], step["pid"], step["node"]) == (1, W1, "n2")
    assert tail.unattributed == 1  # nothing runs on n1


def test_a_save_line_naming_a_file_outside_the_checkpoints_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    secret = tmp_path / "secret"
    secret.write_text("x")
    got = hash_checkpoint(tmp_path / "ckpt", "step-1", str(secret))
    assert "not inside the checkpoint directory" in got["hash_problem"] and "sha256" not in got
    assert "hash_problem" in hash_checkpoint(tmp_path / "ckpt", "step-1", "../secret")


def test_log_file_names() -> None:
    assert log_file_origin("agent-n2.log") == ("agent", "n2")
    assert log_file_origin("copy-n1-rank1.log") == ("copy", "n1")
    assert log_file_origin("agent-n1.jsonl") is None


# --- judged: what the report says ----------------------------------------------------------


def test_a_load_that_cannot_say_whether_it_verified_is_retest(judge: Judge) -> None:
    tl = restart().edit("probe", "ckpt_load", lambda r: True, verified=None, via="log")
    verdict, msg = judge.one("progress.checkpoint-verified", tl)
    assert verdict is Verdict.RETEST
    assert msg.startswith("2 load(s) did not say whether the checkpoint was verified")
    assert msg.endswith("(read from the job's log line)")
    bad = restart().edit("probe", "ckpt_load", lambda r: r["rank"] == 0, verified=None)
    bad = bad.edit("probe", "ckpt_load", lambda r: r["rank"] == 1, verified=False)
    assert judge.one("progress.checkpoint-verified", bad)[0] is Verdict.FAIL


def test_the_report_data_says_what_came_from_logs_and_what_they_cannot_decide(
    judge: Judge,
) -> None:
    tl = (
        restart()
        .edit("probe", "step", lambda r: True, samples=[])
        .edit("probe", "run_start", lambda r: True, via="log", sample_ids="not observable: count")
    )
    tl.harness("log_evidence", 20.0, stamp_bound_s=0.06, events={"step": 10}, unattributed=0)
    timeline = tl.build()
    ctx = judge.ctx(timeline)
    counted = LogPatterns(
        step=r"step (?P<step>\d+) loss (?P<loss>\S+) n=(?P<samples>\d+)",
        run_end=r"done (?P<digest>\w+)",
        checkpoint_loaded=PLAIN["checkpoint_loaded"],
        checkpoint_saved=PLAIN["checkpoint_saved"],
    )
    evidence = run_checks(ctx)
    not_observable(counted, evidence)
    data = log_evidence(counted, timeline, evidence).to_json()
    assert (data["stamp_bound_s"], data["unit"]) == (0.06, "step")
    assert data["from_logs"] == {"run_start": 4, "step": 10}
    assert data["from_probe"]["ckpt_load"] == 2
    assert data["not_observable"] == [
        {
            "check": "progress.sample-ledger",
            "why": counted.sample_ids,
            "verdict": "pass",
            "why_message": {"message_id": "logs.blind.sample-count", "params": {}},
            "to_be_verified": True,
        }
    ]
    [ledger] = [f for f in evidence["progress"].findings if f.check == "progress.sample-ledger"]
    assert ledger.message_id == "logs.not-observable"
    assert ledger.data["to_be_verified"] == "which samples each step consumed"
    assert "progress.sample-ledger.no-ids" in ledger.message or "sample ids" in ledger.message
    assert not [u for u in data["undecided"] if u["check"] == "progress.sample-ledger"]


def test_only_the_retests_the_blindness_causes_pass_as_to_be_verified(judge: Judge) -> None:
    """A sample ledger that cannot be traced (a load of a checkpoint nobody saved) stays
    retest: its cause is not what the patterns cannot show."""
    tl = restart().edit("probe", "step", lambda r: True, samples=[])
    tl = tl.edit("probe", "ckpt_load", lambda r: True, id="nobody-saved-this")
    counted = LogPatterns(step=r"step (?P<step>\d+) n=(?P<samples>\d+)")
    evidence = run_checks(judge.ctx(tl))
    not_observable(counted, evidence)
    [ledger] = [f for f in evidence["progress"].findings if f.check == "progress.sample-ledger"]
    assert (ledger.verdict, ledger.message_id) == (
        Verdict.RETEST,
        "progress.sample-ledger.untraceable",
    )
    reached = as_reached(evidence)
    assert all(
        f.verdict is Verdict.RETEST
        for e in reached.values()
        for f in e.findings
        if f.data.get("not_observable")
    )


# --- every event the tail writes keeps the event contract ---------------------------------

#: A value each group reads correctly.
_VALUE = {
    "step": "7",
    "rank": "0",
    "world_size": "2",
    "data_position": "56",
    "sample_start": "8",
    "sample_end": "12",
    "sample_last": "11",
    "samples": "4",
    "loss": "0.5",
    "id": "ck-7",
    "path": "ck-7/state.pt",
    "verified": "verified",
    "digest": "abc123",
}


def _combinations() -> list[tuple[str, tuple[str, ...]]]:
    """(field, optional groups) for every field and every subset of its optional groups
    that a plan may write (an incomplete sample range is refused at load)."""
    from itertools import combinations

    from faultdrill.joblogs.spec import GROUPS

    out = []
    for name, (kind, _required, optional) in GROUPS.items():
        if kind is None:
            continue
        opts = sorted(optional)
        for n in range(len(opts) + 1):
            out += [(name, subset) for subset in combinations(opts, n)]
    return out


@pytest.mark.parametrize(("name", "groups"), _combinations())
@pytest.mark.parametrize("given", [True, False], ids=["values-given", "values-absent"])
def test_every_combination_of_optional_groups_writes_valid_events(
    tmp_path: Path, name: str, groups: tuple[str, ...], given: bool
) -> None:
    """Each optional group is written as an optional part of the line: present with its
    value, or absent (the group takes no part in the match). Whatever a plan's patterns
    and a job's lines, the tail writes only events the loader accepts."""
    from faultdrill.joblogs.spec import GROUPS

    required = sorted(GROUPS[name][1])
    pattern = f"{name}:" + "".join(f" {g}=(?P<{g}>\\S+)" for g in required)
    pattern += "".join(f"(?: {g}=(?P<{g}>\\S+))?" for g in groups)
    line = f"{name}:" + "".join(f" {g}={_VALUE[g]}" for g in required)
    if given:
        line += "".join(f" {g}={_VALUE[g]}" for g in groups)
    logs = {
        "step": r"^step: step=(?P<step>\d+)$",
        "checkpoint_loaded": r"^never (?P<step>\d+)$",
        name: pattern,
    }
    try:
        patterns = LogPatterns(**logs)
    except ValueError:
        assert name == "step" and {"sample_start", "sample_end", "sample_last"} & set(groups)
        return
    live = Live(rep(AGENT, None, "agent", 1), rep(W0, 0))
    (tmp_path / "logs").mkdir()
    tail = LogTail(
        patterns,
        tmp_path / "logs",
        EventSink(tmp_path / "events", "t"),
        live,
        world_size=1,
        ckpt_dir=tmp_path / "ckpt",
    )
    write(tmp_path / "logs" / "agent-n1.log", line, "step: step=8")
    tail.stop(succeeded_at=None if name == "run_end" else 1.0)
    written = events(tmp_path)  # asserts that each keeps the contract
    assert GROUPS[name][0] in {e["kind"] for e in written}, (pattern, line)
    tl = Timeline.load(tmp_path / "events")
    assert (tl.bad_lines, tl.torn_lines) == ({}, 0)


def test_a_number_that_is_not_whole_makes_the_line_unreadable() -> None:
    reader = LineReader(
        LogPatterns(
            step=r"^s (?P<step>\d+)",
            checkpoint_saved=r"saved (?P<id>\w+) at (?P<step>\d+) pos (?P<data_position>\S+)",
        )
    )
    [bad] = reader.read("saved ck at 4 pos four")
    assert bad.kind == "unreadable" and "data_position is not a whole number" in bad.fields["why"]
    [good] = reader.read("saved ck at 4 pos 32")
    assert good.fields["data_position"] == 32


def test_without_an_end_line_the_launchers_exit_ends_the_last_replicas(tmp_path: Path) -> None:
    logs = {"step": r"\] step (?P<step>\d+)", "rank": PLAIN["rank"]}
    live = Live(rep(AGENT, None, "agent", 1), rep(W0, 0), rep(W1, 1))
    tail = tail_in(tmp_path, live, logs)
    log = tmp_path / "logs" / "agent-n1.log"
    write(log, "[rank 0] step 1", "[rank 1] step 1")
    tail.poll()
    live.now = [rep(AGENT, None, "agent", 1), rep(70, 0), rep(71, 1)]  # a restart
    write(log, "[rank 0] step 2", "[rank 1] step 2", "[rank 1] step 3")
    tail.stop(succeeded_at=123.0)
    ends = [e for e in events(tmp_path) if e["kind"] == "run_end"]
    assert [(e["pid"], e["rank"], e["final_step"], e["synthesized"], e["mono"]) for e in ends] == [
        (70, 0, 2, True, 123.0),
        (71, 1, 3, True, 123.0),
    ]


def test_a_job_that_did_not_succeed_gets_no_end(tmp_path: Path) -> None:
    tail = tail_in(
        tmp_path, Live(rep(AGENT, None, "agent", 1), rep(W0, 0)), {"step": r"step (?P<step>\d+)"}
    )
    write(tmp_path / "logs" / "agent-n1.log", "step 1")
    tail.stop()  # stopped, failed or killed: no exit to end it
    assert [e["kind"] for e in events(tmp_path) if e["src"] == "probe"] == ["run_start", "step"]


def test_a_first_step_line_with_no_resume_line_before_it_loaded_nothing(tmp_path: Path) -> None:
    logs = {
        "step": r"step (?P<step>\d+)",
        "checkpoint_loaded": r"resuming at (?P<step>\d+)",
        "checkpoint_saved": r"saved (?P<id>\S+) at (?P<step>\d+)",
    }
    live = Live(rep(AGENT, None, "agent", 1), rep(W0, 0))
    tail = tail_in(tmp_path, live, logs)
    log = tmp_path / "logs" / "agent-n1.log"
    write(log, "step 1", "step 2", "saved snapshot.pt at 2")
    tail.poll()
    live.now = [rep(AGENT, None, "agent", 1), rep(70, 0)]
    write(log, "resuming at 2", "step 3")
    tail.poll()
    got = [
        (e["kind"], e["pid"], e.get("inferred"), e.get("id"))
        for e in events(tmp_path)
        if e["kind"] in ("ckpt_none", "ckpt_load")
    ]
    assert got == [
        ("ckpt_none", W0, "no-resume-line", None),
        ("ckpt_load", 70, "id", "snapshot.pt"),
    ]


def test_a_harness_written_file_with_bad_lines_is_not_advised_a_rerun(judge: Judge) -> None:
    from faultdrill.checks.api import run_checks as checks_of
    from faultdrill.judge.evaluate import _integrity

    tl = restart().build()
    tl.bad_lines = {"joblog-n1.jsonl": (13, "probe"), "probe-rank0.jsonl": (1, "probe")}
    evidence = checks_of(judge.ctx(tl))
    _integrity(tl, evidence, None)
    said = {
        f.data["file"]: f.message_id
        for f in evidence["progress"].findings
        if f.check == "timeline.integrity"
    }
    assert said == {
        "events/joblog-n1.jsonl": "timeline.integrity.incomplete.harness",
        "events/probe-rank0.jsonl": "timeline.integrity.incomplete",
    }


# --- a job that prints only epoch lines (tests/jobs/epoch_log_train.py) --------------------

#: The patterns of tests/jobs/epoch_log_train.py, from its plan (examples/epoch_logs/plan.yaml).
EPOCHS: dict[str, Any] = yaml.safe_load(
    (ROOT / "examples" / "epoch_logs" / "plan.yaml").read_text()
)["logs"]


def _epoch_run(tmp_path: Path, resumed_at: int) -> Timeline:
    """Epochs 0-2 run and saved (0-based), a kill during epoch 3, a restart that resumes
    at ``resumed_at`` and runs to epoch 4, and the launcher's successful exit."""

    live = Live(rep(AGENT, None, "agent", 1), rep(W0, 0))
    tail = tail_in(tmp_path, live, EPOCHS)
    log = tmp_path / "logs" / "agent-n1.log"
    for epoch in range(3):
        write(
            log,
            f"[GPU0] Epoch {epoch} | Batchsize: 32 | Steps: 16",
            f"Epoch {epoch} | Training snapshot saved at {tmp_path}/ckpt/snapshot.pt",
        )
    write(log, "[GPU0] Epoch 3 | Batchsize: 32 | Steps: 16")
    tail.poll()
    live.now = [rep(AGENT, None, "agent", 1), rep(70, 0)]
    write(log, f"Resuming training from snapshot at Epoch {resumed_at}")
    for epoch in range(resumed_at, 5):
        write(
            log,
            f"[GPU0] Epoch {epoch} | Batchsize: 32 | Steps: 16",
            f"Epoch {epoch} | Training snapshot saved at {tmp_path}/ckpt/snapshot.pt",
        )
    tail.stop(succeeded_at=1e9)
    return Timeline.load(tmp_path / "events")


def test_an_epoch_line_announces_the_epoch_about_to_run(tmp_path: Path) -> None:
    tl = _epoch_run(tmp_path, resumed_at=3)
    first, second = tl.incarnations
    assert first.load is not None and second.load is not None
    # epoch N's line says N epochs are done; the first line of a replica completes nothing
    assert (first.first_step, first.last_step, first.load.kind) == (1, 3, "ckpt_none")
    assert (second.resume_step, second.first_step, second.last_step) == (3, 4, 5)
    assert [e["step"] for e in tl.of("probe", "ckpt_save")] == [1, 2, 3, 4, 5]
    assert second.load["id"] == "snapshot.pt" and second.load["inferred"] == "id"
    [end] = second.ends
    assert (end["final_step"], end["synthesized"]) == (5, True)


def test_an_epoch_rerun_after_resume_fails_and_the_fixed_resume_passes(
    tmp_path: Path, judge: Judge
) -> None:
    (tmp_path / "fixed").mkdir()
    (tmp_path / "buggy").mkdir()
    fixed = judge.ctx(_epoch_run(tmp_path / "fixed", resumed_at=3))
    found = {f.check: f for f in run_checks(fixed)["progress"].findings}
    for name in ("progress.resume-point", "progress.no-jump", "progress.no-restart-from-zero"):
        assert found[name].verdict is Verdict.PASS, found[name].message
    # the bug: the save after epoch 2 recorded "2 epochs run", so the restart runs epoch 2
    # again
    buggy = judge.ctx(_epoch_run(tmp_path / "buggy", resumed_at=2))
    progress = run_checks(buggy)["progress"].findings
    [resume] = [f for f in progress if f.check == "progress.resume-point"]
    assert resume.verdict is Verdict.FAIL, resume.message
    assert resume.params["step"] == 2 and resume.params["valid_step"] == 3


def test_the_report_lists_what_passed_without_evidence_as_to_be_verified() -> None:
    """The scope table of every report says which checks passed without evidence (a job
    that evaluates nothing, what log lines cannot show), in which items, in both
    languages; a report without such a finding has no such row."""
    from faultdrill.i18n import Translator
    from faultdrill.report.scope import derive_scope
    from tests.report_data import report_of, synthetic_report

    data = synthetic_report()
    assert "evidence" not in {r.dimension for r in derive_scope(report_of(data), Translator("en"))}
    first = data["scenarios"][0]
    first["evidence"]["results"]["findings"].append(
        {
            "check": "results.evaluation-matches-baseline",
            "verdict": "pass",
            "message": "not applicable: the job reports no held-out evaluation",
            "data": {"to_be_verified": "held-out evaluation"},
        }
    )
    for lang, said in (("en", "passed without evidence, to be verified"), ("zh", "待验证")):
        [row] = [
            r for r in derive_scope(report_of(data), Translator(lang)) if r.dimension == "evidence"
        ]
        [entry] = row.to_verify
        assert "results.evaluation-matches-baseline" in entry and said in entry
        assert first["id"] in entry


def test_what_a_number_counts_is_read_from_the_plan_and_dumped_only_when_said() -> None:
    plain = plan_with(PLAIN)
    assert plain.logs is not None
    dumped = plain.logs.model_dump(mode="json")
    assert not {"counts", "unit", "first_unit"} & set(dumped)  # older plans keep their digest
    epochs = plan_with(EPOCHS)
    assert epochs.logs is not None and epochs.logs.counted("step") == "started"
    again = LogPatterns(**epochs.logs.model_dump(mode="json"))
    assert again == epochs.logs
    reader = LineReader(epochs.logs)
    [start] = reader.read("[GPU1] Epoch 0 | Batchsize: 32 | Steps: 16")
    assert (start.fields["step"], start.starts_unit, start.rank) == (0, True, 1)
    [saved] = reader.read("Epoch 0 | Training snapshot saved at /r/ckpt/snapshot.pt")
    assert (saved.fields["step"], saved.fields["id"]) == (1, "snapshot.pt")
    one_based = LineReader(
        LogPatterns(step={"pattern": r"epoch (?P<step>\d+) begins", "counts": "started"})
    )
    [bad] = one_based.read("epoch 0 begins")
    assert bad.kind == "unreadable" and "below logs.first_unit 1" in bad.fields["why"]
    msg = refused({**PLAIN, "step": {"pattern": PLAIN["step"], "count": "started"}})
    assert "logs.step: give a pattern, or {pattern:" in msg and "unknown: count" in msg
