"""The item's state machine (:class:`faultdrill.engine.item.ItemFacts`): each phase is
entered only by a move the diagram draws, carries its facts, and keeps the earlier ones;
a move it does not draw is refused and changes nothing."""

from __future__ import annotations

import pytest

from faultdrill.engine.item import (
    MOVES,
    IllegalTransitionError,
    ItemFacts,
    ItemPhase,
)
from faultdrill.platforms.api import JobState

P = ItemPhase


def _at(*phases: ItemPhase) -> ItemFacts:
    """Facts driven through ``phases`` in order (at times 10, 11, ...)."""
    facts = ItemFacts()
    for i, phase in enumerate(phases):
        _drive(facts, phase, 10.0 + i)
    return facts


def _drive(facts: ItemFacts, phase: ItemPhase, at: float = 99.0) -> None:
    """Enter ``phase`` through its public method."""
    {
        P.WATCHING: lambda: facts.watching(at),
        P.INJECTED: lambda: facts.injected(at),
        P.INJECT_FAILED: lambda: facts.inject_failed(at),
        P.REVERTED: lambda: facts.reverted(at),
        P.ENDED: lambda: facts.ended(JobState.SUCCEEDED, at),
        P.STOPPED: lambda: facts.stopped("max_wall_s", at),
        P.INTERRUPTED: lambda: facts.interrupted("SIGINT"),
        P.CLEANED: facts.cleaned,
    }[phase]()


def test_a_scenario_goes_through_its_phases_with_each_phase_facts() -> None:
    facts = ItemFacts()
    assert (facts.phase, facts.outcome, facts.fault_tried) == (P.OPENED, "unknown", False)
    facts.watching(1.0)
    assert (facts.phase, facts.watch_started, facts.fault_due) == (P.WATCHING, 1.0, True)
    facts.injected(5.0)
    assert (facts.phase, facts.injected_at, facts.fault_due, facts.fault_tried) == (
        P.INJECTED,
        5.0,
        False,
        True,
    )
    facts.reverted(8.0)
    assert (facts.phase, facts.reverted_at) == (P.REVERTED, 8.0)
    facts.ended(JobState.SUCCEEDED, 20.0)
    assert (facts.phase, facts.outcome, facts.natural_end, facts.succeeded_at) == (
        P.ENDED,
        "succeeded",
        True,
        20.0,
    )
    facts.cleaned()
    assert facts.history == [
        P.OPENED,
        P.WATCHING,
        P.INJECTED,
        P.REVERTED,
        P.ENDED,
        P.CLEANED,
    ]
    assert (facts.injected_at, facts.reverted_at, facts.outcome) == (5.0, 8.0, "succeeded")


def test_a_failed_job_ended_naturally_but_did_not_succeed() -> None:
    facts = _at(P.WATCHING)
    facts.ended(JobState.FAILED, 3.0)
    assert (facts.outcome, facts.natural_end, facts.succeeded_at) == ("failed", True, None)
    assert facts.job_state is JobState.FAILED


def test_a_failed_injection_is_not_retried_nor_reverted() -> None:
    facts = _at(P.WATCHING)
    facts.inject_failed(4.0)
    assert (facts.phase, facts.inject_failed_at, facts.injected_at) == (P.INJECT_FAILED, 4.0, None)
    assert facts.fault_tried and not facts.fault_due
    assert not facts.revert_due(0.0, 100.0)
    with pytest.raises(IllegalTransitionError):
        facts.injected(5.0)
    with pytest.raises(IllegalTransitionError):
        facts.reverted(5.0)


def test_the_revert_is_due_once_the_duration_has_run_and_never_without_one() -> None:
    facts = _at(P.WATCHING, P.INJECTED)  # injected at 11.0
    assert not facts.revert_due(5.0, 15.9)
    assert facts.revert_due(5.0, 16.0)
    assert not facts.revert_due(None, 1e9)  # no duration: in effect until the end
    facts.reverted(16.0)
    assert not facts.revert_due(5.0, 100.0)  # reverted once only


def test_a_fault_that_did_what_it_was_for_is_reverted_before_its_duration() -> None:
    facts = _at(P.WATCHING)
    assert not facts.revert_due(5.0, 11.5, done=True)  # nothing injected: nothing to end
    facts.injected(11.0)
    assert not facts.revert_due(5.0, 11.5)
    assert facts.revert_due(5.0, 11.5, done=True)
    assert facts.revert_due(None, 11.5, done=True)
    facts.reverted(11.5)
    assert not facts.revert_due(5.0, 100.0, done=True)  # reverted once only


def test_a_stop_condition_is_no_natural_end() -> None:
    facts = _at(P.WATCHING, P.INJECTED, P.STOPPED)
    assert (facts.outcome, facts.stop_condition, facts.stopped_at) == (
        "stopped: max_wall_s",
        "max_wall_s",
        12.0,
    )
    assert not facts.natural_end and facts.succeeded_at is None


def test_an_interruption_after_the_end_keeps_the_end_facts() -> None:
    facts = _at(P.WATCHING, P.ENDED, P.INTERRUPTED)
    assert (facts.outcome, facts.signal) == ("interrupted", "SIGINT")
    assert facts.natural_end and facts.succeeded_at == 11.0  # the settle still ran


def test_resubmit_once_while_watching_and_never_with_the_fault_in_effect() -> None:
    facts = _at(P.WATCHING, P.INJECTED)
    assert not facts.may_resubmit
    with pytest.raises(IllegalTransitionError):
        facts.resubmitted(12.0)  # the caller reverts first
    facts.reverted(12.0)
    facts.resubmitted(12.5)
    assert (facts.phase, facts.resubmitted_at, facts.may_resubmit) == (P.REVERTED, 12.5, False)
    with pytest.raises(IllegalTransitionError):
        facts.resubmitted(13.0)
    assert facts.resubmitted_at == 12.5


def test_a_baseline_ends_straight_from_watching() -> None:
    facts = _at(P.WATCHING, P.ENDED, P.CLEANED)
    assert facts.history == [P.OPENED, P.WATCHING, P.ENDED, P.CLEANED]
    assert not facts.fault_tried


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ((), P.INJECTED),  # nothing is injected before the job is watched
        ((P.WATCHING,), P.REVERTED),  # nothing to revert
        ((P.WATCHING, P.INJECTED), P.INJECTED),  # injected once
        ((P.WATCHING, P.INJECTED), P.WATCHING),  # no way back
        ((P.WATCHING, P.ENDED), P.STOPPED),  # one end
        ((P.WATCHING, P.STOPPED), P.ENDED),
        ((P.WATCHING, P.INTERRUPTED), P.INTERRUPTED),
        ((P.CLEANED,), P.INTERRUPTED),  # nothing after the cleanup
        ((P.CLEANED,), P.CLEANED),
    ],
)
def test_a_move_the_diagram_does_not_draw_is_refused_and_changes_nothing(
    path: tuple[ItemPhase, ...], refused: ItemPhase
) -> None:
    facts = _at(*path)
    before = (facts.phase, list(facts.history), facts.outcome, facts.injected_at)
    with pytest.raises(IllegalTransitionError, match=refused.value):
        _drive(facts, refused)
    assert (facts.phase, facts.history, facts.outcome, facts.injected_at) == before


def test_a_job_that_has_not_ended_cannot_end_the_item() -> None:
    facts = _at(P.WATCHING)
    with pytest.raises(IllegalTransitionError, match="running"):
        facts.ended(JobState.RUNNING, 3.0)
    assert facts.phase is P.WATCHING and facts.outcome == "unknown"


def test_every_phase_is_reachable_and_every_phase_but_cleaned_can_be_cleaned_up() -> None:
    seen, todo = {P.OPENED}, [P.OPENED]
    while todo:
        for nxt in MOVES[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(ItemPhase)
    assert all(P.CLEANED in MOVES[p] for p in ItemPhase if p is not P.CLEANED)
    assert all(P.INTERRUPTED in MOVES[p] for p in ItemPhase if p not in {P.INTERRUPTED, P.CLEANED})
    assert MOVES[P.CLEANED] == frozenset()


@pytest.mark.parametrize("source", list(ItemPhase))
@pytest.mark.parametrize("target", [p for p in ItemPhase if p is not P.OPENED])
def test_each_move_is_allowed_exactly_when_the_table_draws_it(
    source: ItemPhase, target: ItemPhase
) -> None:
    facts = ItemFacts(phase=source, history=[source])
    if target in MOVES[source]:
        _drive(facts, target)
        assert facts.phase is target
    else:
        with pytest.raises(IllegalTransitionError):
            _drive(facts, target)
        assert facts.phase is source
