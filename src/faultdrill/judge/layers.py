"""Where a recovery failed: the layer a scenario that did not pass points to.

The methodology asks to tell the layers apart instead of blaming every wait on the network:
once the network is back and the job still does not move, the problem is elsewhere; a new
node without its runtime, data permission or route is environment preparation, not
scheduling. The layers (:class:`Layer`):

=========================  ================================================================
scheduling                 placing and stopping replicas: no node to restart on, a lost
                           replica never restarted, old replicas or leftovers not released
control-plane              the rendezvous / job control: a restart that never completed its
                           rendezvous
storage                    the checkpoint storage: saves that failed and stopped the job
framework                  the training job and its framework: it resumed from the right
                           checkpoint yet its progress or results are wrong, or it failed
checkpoint                 checkpoint save, publication, choice and verified load
network                    the network did not come back (probes still lost, a link fault
                           not reverted) while the job waited
environment-preparation    a spare failed its preconditions (runtime, data access, route)
undetermined               no rule points anywhere (the clues that were ruled out are listed)
=========================  ================================================================

Each rule is a small function from a :class:`LayerContext` to a :class:`Clue` (or None); a
clue either points at a layer or rules one out, with the events and findings it rests on.
The rules run in the order of :data:`RULES` (the most specific evidence first); the layer is
that of the first clue pointing at a layer no clue ruled out. Pure: timeline and findings in,
data out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from faultdrill.checks.api import EvidenceResult, Finding, Msg, Verdict
from faultdrill.events import Event
from faultdrill.judge.conclusion import event_ref
from faultdrill.readings.analysis import END_KINDS, LOST_KINDS, injections
from faultdrill.records import Clue as ClueRecord
from faultdrill.records import EventRef, FailingLayer, plain

if TYPE_CHECKING:
    from faultdrill.plan import Control, Scenario
    from faultdrill.timeline import Timeline

__all__ = ["RULES", "Clue", "Layer", "LayerContext", "LayerResult", "failing_layer"]


class Layer(str, Enum):
    SCHEDULING = "scheduling"
    CONTROL_PLANE = "control-plane"
    STORAGE = "storage"
    FRAMEWORK = "framework"
    CHECKPOINT = "checkpoint"
    NETWORK = "network"
    ENVIRONMENT_PREPARATION = "environment-preparation"
    UNDETERMINED = "undetermined"


#: Fault kinds that act on the network (a link or a partition).
NETWORK_FAULTS = frozenset({"link-loss", "link-slow", "link-flap", "partition"})


@dataclass(frozen=True)
class Clue:
    """What one rule found: ``points`` True names ``layer`` as where the failure lives,
    False rules ``layer`` out. ``why`` in English (``said``: as a message a report can
    translate); ``events``: references (:func:`event_ref`); ``findings``: the check names of
    the item's findings it rests on."""

    rule: str
    layer: Layer
    points: bool
    why: str
    events: tuple[EventRef, ...] = ()
    findings: tuple[str, ...] = ()
    said: Msg | None = None

    @classmethod
    def of(
        cls,
        rule: str,
        layer: Layer,
        points: bool,
        said: Msg,
        events: tuple[EventRef, ...] = (),
        findings: tuple[str, ...] = (),
    ) -> Clue:
        return cls(rule, layer, points, said.text(), events, findings, said)

    def to_record(self) -> ClueRecord:
        """This clue as report.json's :class:`~faultdrill.report.model.Clue`."""
        return ClueRecord.model_validate(
            {
                "rule": self.rule,
                "layer": self.layer.value,
                "points": self.points,
                "why": self.why,
                "events": [e.to_json() for e in self.events],
                "findings": list(self.findings),
                **(plain(self.said.to_json()) if self.said is not None else {}),
            }
        )


@dataclass(frozen=True)
class LayerContext:
    """What the rules read: the item's timeline, its findings per category, what was drilled."""

    timeline: Timeline
    evidence: dict[str, EvidenceResult]
    item: Scenario | Control | None = None

    @property
    def t0(self) -> float | None:
        inj = injections(self.timeline)
        return inj[0].mono if inj else None

    def failed(self, *checks: str) -> list[Finding]:
        """The failing findings of the named checks."""
        return [
            f
            for ev in self.evidence.values()
            for f in ev.findings
            if f.check in checks and f.verdict == Verdict.FAIL
        ]

    def failing_in(self, *categories: str) -> list[Finding]:
        return [
            f
            for cat in categories
            for f in self.evidence.get(cat, EvidenceResult(cat, [])).findings
            if f.verdict == Verdict.FAIL
        ]

    def ref(self, ev: Event, *keys: str) -> EventRef:
        return event_ref(ev, self.t0, *keys)

    def after_fault(self, src: str, kind: str | None = None) -> list[Event]:
        t0 = self.t0
        return [e for e in self.timeline.of(src, kind) if t0 is None or e.mono >= t0]

    def steps_after(self, mono: float) -> int:
        return int((self.timeline.steps.mono > mono).sum())

    def outcome(self) -> str | None:
        states = [e.get("state") for e in self.timeline.of("platform", "job_state")]
        return next((s for s in reversed(states) if s in ("succeeded", "failed", "stopped")), None)


Rule = Callable[[LayerContext], "Clue | None"]


def _names(found: list[Finding]) -> tuple[str, ...]:
    return tuple(sorted({f.check for f in found}))


def _said(found: list[Finding]) -> list[Msg | str]:
    """What the first two of ``found`` say (the reader's summary of the clue)."""
    return [f.said for f in found[:2]]


# --- the rules, in order ---------------------------------------------------------------


def spare_failed_preconditions(ctx: LayerContext) -> Clue | None:
    """A spare was rejected because it failed a precondition (runtime, data or checkpoint
    access, route to the rendezvous host): environment preparation, not scheduling."""
    rejected = [
        e
        for e in ctx.timeline.of("platform", "spare_rejected")
        if e.get("category", "environment-preparation") == "environment-preparation"
    ]
    if not rejected:
        return None
    what = [
        Msg(
            "layer.spare-failed-preconditions.spare",
            node=e.get("node"),
            precondition=e.get("precondition"),
            detail=e.get("detail"),
        )
        for e in rejected[:3]
    ]
    return Clue.of(
        "spare-failed-preconditions",
        Layer.ENVIRONMENT_PREPARATION,
        True,
        Msg("layer.spare-failed-preconditions", spares=what),
        tuple(ctx.ref(e, "node", "precondition", "detail") for e in rejected),
        ("expectation.spare-environment",),
    )


def checkpoint_not_published_safely(ctx: LayerContext) -> Clue | None:
    """``latest`` named a checkpoint whose save had not completed, or the published
    checkpoint does not verify at the end: the checkpoint's save and publication."""
    bad = ctx.failed("progress.failed-save-not-published", "results.final-checkpoint-verifies")
    if not bad:
        return None
    refs = [ctx.ref(e, "target", "problem") for e in ctx.timeline.of("harness", "ckpt_latest")]
    refs += [ctx.ref(e, "latest", "verifies") for e in ctx.timeline.of("fault", "storage_observed")]
    return Clue.of(
        "checkpoint-not-published-safely",
        Layer.CHECKPOINT,
        True,
        Msg("layer.checkpoint-not-published-safely", findings=_said(bad)),
        tuple(refs),
        _names(bad),
    )


_LOAD_CHECKS = (
    "progress.no-restart-from-zero",
    "progress.checkpoint-verified",
    "progress.damaged-checkpoint-refused",
    "progress.resume-point",
    "progress.restored-components",
)


def checkpoint_load_refused_or_absent(ctx: LayerContext) -> Clue | None:
    """A restart after the fault loaded no checkpoint although one had been saved (absent,
    or every candidate refused), loaded one without verifying it, loaded a damaged one, or
    not the newest valid one: the checkpoint's choice and load."""
    t0 = ctx.t0
    tl = ctx.timeline
    bad = ctx.failed(*_LOAD_CHECKS)
    refs: list[EventRef] = []
    why: list[Msg | str] = _said(bad)
    expected = getattr(getattr(ctx.item, "expected", None), "resume", None)
    if t0 is not None and expected != "scratch":
        for inc in tl.incarnations:
            ld = inc.load
            if inc.started_mono <= t0 or ld is None:
                continue
            saved_before = [e for e in tl.of("probe", "ckpt_save") if e.mono < inc.started_mono]
            if ld.kind == "ckpt_none" and saved_before:
                refused = ld.get("rejected") or []
                why.append(
                    Msg(
                        "layer.checkpoint-load-refused-or-absent.refused"
                        if refused
                        else "layer.checkpoint-load-refused-or-absent.none-loaded",
                        inc=inc.index,
                        saved=len(saved_before),
                        refused=len(refused),
                    )
                )
                refs.append(ctx.ref(ld, "rank", "rejected"))
            elif bad:
                refs.append(ctx.ref(ld, "rank", "id", "step", "verified"))
    if not bad and not refs:
        return None
    said = {str(w) if isinstance(w, str) else w.text(): w for w in why}  # once each
    return Clue.of(
        "checkpoint-load-refused-or-absent",
        Layer.CHECKPOINT,
        True,
        Msg("layer.checkpoint-load-refused-or-absent", why=list(said.values())),
        tuple(refs),
        _names(bad),
    )


def no_node_to_restart_on(ctx: LayerContext) -> Clue | None:
    """The platform had no usable node to place the lost one's work on (no spare, fewer
    nodes than the job's minimum): scheduling."""
    none = ctx.timeline.of("platform", "no_spare")
    if not none:
        return None
    return Clue.of(
        "no-node-to-restart-on",
        Layer.SCHEDULING,
        True,
        Msg("layer.no-node-to-restart-on", detail=none[0].get("detail")),
        tuple(ctx.ref(e, "replaces", "detail") for e in none),
    )


_RDZV_TRIES = frozenset({"rdzv_start", "rdzv_timeout", "rdzv_connection_error", "rdzv_closed"})


def rendezvous_never_completed(ctx: LayerContext) -> Clue | None:
    """After the fault a rendezvous was started or failed (timeout, store unreachable,
    closed) and none completed after it, and no new generation of replicas started: the
    control plane did not bring the job back together."""
    t0 = ctx.t0
    tl = ctx.timeline
    if t0 is None or tl.incarnation_after(t0) is not None:
        return None
    plat = ctx.after_fault("platform")
    done = next((e.mono for e in plat if e.kind in END_KINDS), float("inf"))
    tries = [e for e in plat if e.kind in _RDZV_TRIES and e.mono < done]
    if not tries:
        return None
    completed = [e for e in plat if e.kind == "rdzv_complete" and e.mono > tries[0].mono]
    if completed:
        return None
    kinds = sorted({e.kind for e in tries})
    return Clue.of(
        "rendezvous-never-completed",
        Layer.CONTROL_PLANE,
        True,
        Msg("layer.rendezvous-never-completed", kinds=kinds),
        tuple(ctx.ref(e, "node", "msg") for e in tries[:4]),
    )


_RELEASE_CHECKS = (
    "resources.no-stale-replica",
    "resources.no-duplicate-rank",
    "resources.lost-node-isolated",
    "resources.released-at-end",
    "resources.children-released",
)


def old_replicas_not_released(ctx: LayerContext) -> Clue | None:
    """Replicas of an old generation kept running or emitting steps, a rank was held
    twice, a lost node kept processes, or the job's processes, ports or leftovers outlived
    it: stopping the wrong replicas and releasing resources is the scheduler's duty."""
    bad = ctx.failed(*_RELEASE_CHECKS)
    if not bad:
        return None
    return Clue.of(
        "old-replicas-not-released",
        Layer.SCHEDULING,
        True,
        Msg("layer.old-replicas-not-released", findings=_said(bad)),
        findings=_names(bad),
    )


def saves_failed_and_job_stopped(ctx: LayerContext) -> Clue | None:
    """Checkpoint saves failed after the fault and the job made no step after the last
    failure, or did not complete: the storage under the checkpoints stopped the job."""
    failed = ctx.after_fault("probe", "ckpt_save_failed")
    if not failed:
        return None
    last = failed[-1]
    if ctx.steps_after(last.mono) and ctx.outcome() == "succeeded":
        return None  # the job rode out the failed saves; anything wrong is elsewhere
    return Clue.of(
        "saves-failed-and-job-stopped",
        Layer.STORAGE,
        True,
        Msg(
            "layer.saves-failed-and-job-stopped.no-step"
            if not ctx.steps_after(last.mono)
            else "layer.saves-failed-and-job-stopped.ended",
            n=len(failed),
            error=last.get("error"),
            outcome=ctx.outcome() or "none",
        ),
        tuple(ctx.ref(e, "step", "error", "errno") for e in failed[:3]),
    )


def _probes_after(ctx: LayerContext, start: float) -> tuple[int, int, list[Event]]:
    """Network-track probes measured after ``start``: (sent, lost, samples)."""
    sent = lost = 0
    samples = []
    for e in ctx.timeline.of("net", "net_sample"):
        if float(e.get("probed_mono", e.mono)) <= start:
            continue
        samples.append(e)
        for v in (e.get("rtt_ms") or {}).values():
            sent += 1
            lost += v is None
    return sent, lost, samples


def _network_window_end(ctx: LayerContext) -> Event | None:
    t0 = ctx.t0
    if t0 is None:
        return None
    rev = ctx.timeline.first("fault", "reverted", after=t0)
    return rev


def network_not_back(ctx: LayerContext) -> Clue | None:
    """For a network fault: its revert failed, or after the revert the network track still
    loses probes, and no step followed: the network did not come back."""
    item = ctx.item
    if item is None or item.fault.kind not in NETWORK_FAULTS or ctx.t0 is None:
        return None
    failed = ctx.after_fault("fault", "revert_failed")
    if failed:
        return Clue.of(
            "network-not-back",
            Layer.NETWORK,
            True,
            Msg("layer.network-not-back.revert-failed", error=failed[0].get("error")),
            (ctx.ref(failed[0], "fault", "error"),),
        )
    end = _network_window_end(ctx)
    if end is None:
        return None
    start = float(end.get("revert_started_mono", end.mono))
    sent, lost, samples = _probes_after(ctx, start)
    if not sent or not lost or ctx.steps_after(start):
        return None
    return Clue.of(
        "network-not-back",
        Layer.NETWORK,
        True,
        Msg("layer.network-not-back.probes-lost", lost=lost, sent=sent),
        (ctx.ref(end, "fault"), *(ctx.ref(e, "node") for e in samples if e.get("rtt_ms"))),
    )


def network_back_without_progress(ctx: LayerContext) -> Clue | None:
    """For a network fault: the track answered every probe after the revert, yet no step
    followed: the network is back, so the failure is not the network's (rules it out)."""
    item = ctx.item
    if item is None or item.fault.kind not in NETWORK_FAULTS:
        return None
    end = _network_window_end(ctx)
    if end is None:
        return None
    start = float(end.get("revert_started_mono", end.mono))
    sent, lost, samples = _probes_after(ctx, start)
    if not sent or lost or ctx.steps_after(start):
        return None
    first = min(samples, key=lambda e: float(e.get("probed_mono", e.mono)))
    return Clue.of(
        "network-back-without-progress",
        Layer.NETWORK,
        False,
        Msg(
            "layer.network-back-without-progress",
            sent=sent,
            from_s=float(first.get("probed_mono", first.mono)) - (ctx.t0 or 0.0),
        ),
        (ctx.ref(end, "fault"), ctx.ref(first, "node")),
    )


def resumed_right_but_diverged(ctx: LayerContext) -> Clue | None:
    """The job made steps after the fault, and progress or results evidence failed although
    no checkpoint rule fired (the right checkpoint was loaded and verified, or none was
    needed): what the job did after it (data position, optimizer state, evaluation,
    export) is the framework's."""
    t0 = ctx.t0
    if t0 is None or not ctx.steps_after(t0):
        return None
    bad = [f for f in ctx.failing_in("progress", "results") if f.check not in _LOAD_CHECKS]
    if not bad:
        return None
    tl = ctx.timeline
    refs: list[EventRef] = []
    new = tl.incarnation_after(t0) if t0 is not None else None
    if new is not None and new.load is not None:
        refs.append(ctx.ref(new.load, "rank", "id", "step", "verified"))
    return Clue.of(
        "resumed-right-but-diverged",
        Layer.FRAMEWORK,
        True,
        Msg("layer.resumed-right-but-diverged", findings=_said(bad)),
        tuple(refs),
        _names(bad),
    )


def job_failed_after_restart(ctx: LayerContext) -> Clue | None:
    """A new generation started after the fault, yet the job ended failed or stopped: the
    job's own processes failed after the restart (the framework)."""
    t0 = ctx.t0
    tl = ctx.timeline
    if t0 is None:
        return None
    new = tl.incarnation_after(t0)
    outcome = ctx.outcome()
    if new is None or outcome in (None, "succeeded"):
        return None
    failures = ctx.after_fault("platform", "worker_failed")
    return Clue.of(
        "job-failed-after-restart",
        Layer.FRAMEWORK,
        True,
        Msg("layer.job-failed-after-restart", inc=new.index, outcome=outcome),
        (
            ctx.ref(min(new.starts, key=lambda e: e.mono), "rank", "node"),
            *(ctx.ref(e, "node", "msg") for e in failures[:2]),
        ),
    )


def lost_replica_never_restarted(ctx: LayerContext) -> Clue | None:
    """The platform declared a replica or node lost after the fault and no new generation
    ever started, while the job did not complete: the scheduler did not restart it (restart
    budget spent or no restart policy)."""
    t0 = ctx.t0
    tl = ctx.timeline
    if t0 is None or tl.incarnation_after(t0) is not None or ctx.outcome() == "succeeded":
        return None
    lost = [e for e in ctx.after_fault("platform") if e.kind in LOST_KINDS]
    if not lost:
        return None
    left = [e.get("restarts_left") for e in lost if e.get("restarts_left") is not None]
    return Clue.of(
        "lost-replica-never-restarted",
        Layer.SCHEDULING,
        True,
        Msg(
            "layer.lost-replica-never-restarted.budget"
            if left
            else "layer.lost-replica-never-restarted",
            kind=lost[0].kind,
            node=lost[0].get("node"),
            left=min(left) if left else None,
        ),
        tuple(ctx.ref(e, "node", "restarts_left") for e in lost[:3]),
    )


#: Every rule, in the order it is asked (the most specific evidence first).
RULES: tuple[Rule, ...] = (
    spare_failed_preconditions,
    checkpoint_not_published_safely,
    checkpoint_load_refused_or_absent,
    no_node_to_restart_on,
    rendezvous_never_completed,
    old_replicas_not_released,
    saves_failed_and_job_stopped,
    network_not_back,
    network_back_without_progress,
    resumed_right_but_diverged,
    job_failed_after_restart,
    lost_replica_never_restarted,
)


@dataclass(frozen=True)
class LayerResult:
    """The failing layer, the clue that named it, and every other clue (for the reader)."""

    layer: Layer
    why: str
    clue: Clue | None
    also: tuple[Clue, ...] = field(default=())
    ruled_out: tuple[Clue, ...] = field(default=())
    said: Msg | None = None

    def to_record(self) -> FailingLayer:
        """This result as report.json's :class:`~faultdrill.report.model.FailingLayer`."""
        clue = self.clue
        return FailingLayer.model_validate(
            {
                "layer": self.layer.value,
                "why": self.why,
                **(plain(self.said.to_json()) if self.said is not None else {}),
                "rule": clue.rule if clue is not None else None,
                "events": [e.to_json() for e in clue.events] if clue is not None else [],
                "findings": list(clue.findings) if clue is not None else [],
                "also": [c.to_record() for c in self.also],
                "ruled_out": [c.to_record() for c in self.ruled_out],
            }
        )


def failing_layer(
    tl: Timeline,
    evidence: dict[str, EvidenceResult],
    item: Scenario | Control | None = None,
    rules: tuple[Rule, ...] = RULES,
) -> LayerResult:
    """The layer a failed (or retest) item points to, by the first rule whose clue names a
    layer that no clue ruled out; :attr:`Layer.UNDETERMINED` when none does."""
    ctx = LayerContext(tl, evidence, item)
    clues = [c for c in (rule(ctx) for rule in rules) if c is not None]
    out = {c.layer for c in clues if not c.points}
    pointing = [c for c in clues if c.points and c.layer not in out]
    ruled_out = tuple(c for c in clues if not c.points)
    if not pointing:
        said = (
            Msg(
                "layer.undetermined.ruled-out",
                clues=[
                    Msg("layer.ruled-out", layer=c.layer.value, why=c.said or c.why)
                    for c in ruled_out
                ],
            )
            if ruled_out
            else Msg("layer.undetermined")
        )
        return LayerResult(Layer.UNDETERMINED, said.text(), None, (), ruled_out, said)
    first = pointing[0]
    return LayerResult(first.layer, first.why, first, tuple(pointing[1:]), ruled_out, first.said)
