"""Loading a plan: the one edge where raw YAML or JSON becomes a :class:`Plan`.

Past :func:`load_plan` nothing handles raw dicts. Every error names the file, the field
path, the rule broken and how to fix it (:class:`~faultdrill.errors.PlanError`), and one
error lists every problem found: a value YAML gave that is no plain data (``!!binary``
bytes, an unquoted date) and a number written as text (:mod:`faultdrill.frozen`) are put
in place as a :class:`~faultdrill.frozen.Refused`, so that pydantic goes on with the rest.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from faultdrill import plugins
from faultdrill.errors import PlanError
from faultdrill.faults.api import FAULTS
from faultdrill.frozen import FieldProblems, Refused, shown
from faultdrill.plan import REFERENCE_WORKLOAD, Control, Scenario
from faultdrill.plan.faults import FAULT_KINDS
from faultdrill.plan.model import Plan
from faultdrill.plan.source import read_plan_data
from faultdrill.platforms.api import PLATFORMS
from faultdrill.platforms.kubernetes.manifest import template_problem, uses_placeholder
from faultdrill.workloads.lm_config import RAY_BAD_MODES, ConfigError, config_from_dict

__all__ = [
    "drill_problems",
    "load_plan",
    "parse_plan",
    "plan_problems",
    "plan_schema",
    "plan_without",
]


def plan_schema() -> dict[str, Any]:
    return Plan.model_json_schema()


def load_plan(path: str | Path) -> Plan:
    """Read and validate a YAML (or JSON) plan file (:mod:`faultdrill.plan.source` bounds
    what the file may cost). Raises PlanError, never anything else."""
    path = Path(path)
    raw = read_plan_data(path)
    return parse_plan(raw, source=str(path), plan_dir=path.resolve().parent)


def plan_without(plan: Plan, ids: set[str], *, source: str, **resources: Any) -> Plan:
    """The same plan without the scenarios and controls named in ``ids`` (a round left
    empty goes too), with ``resources`` fields replaced; validated again."""
    raw = plan.model_dump(mode="json")
    raw["resources"].update(resources)
    rounds = []
    for rnd in raw["rounds"]:
        keep = [s for s in rnd["scenarios"] if s["id"] not in ids]
        if keep:
            rounds.append({**rnd, "scenarios": keep})
    raw["rounds"] = rounds
    raw["controls"] = [c for c in raw["controls"] if c["id"] not in ids]
    return parse_plan(raw, source=source)


def parse_plan(raw: Any, *, source: str = "<plan>", plan_dir: Path | None = None) -> Plan:
    """Validate a parsed plan. ``plan_dir``: the directory of the plan file it came from, if
    any; a relative ``task.entrypoint.script`` is resolved against it and must exist, and the
    plan must be one that can be drilled (:func:`drill_problems`): it was written by a
    person. Without it (a run's recorded copy, the demo without what this machine lacks) the
    data rules alone apply."""
    if not isinstance(raw, dict):
        raise PlanError(
            source,
            [("(top level)", f"must be a mapping with task, data, ...; got {type(raw).__name__}")],
        )
    try:
        foreign: list[tuple[str, Refused]] = []
        raw = _plain_data(raw, "", foreign)
        context = {"plan_dir": str(plan_dir)} if plan_dir is not None else None
        plan = Plan.model_validate(raw, context=context)
    except ValidationError as exc:
        raise PlanError(source, _problems(exc, foreign)) from exc
    except RecursionError as exc:  # a raw structure deeper than any file may give
        raise PlanError(source, [("(top level)", "nested too deeply to be a plan")]) from exc
    if foreign:  # only where any value goes (a workload's keys): pydantic took them
        raise PlanError(source, [(path, r.message) for path, r in foreign])
    problems = plan_problems(plan, plan_dir)
    if problems:
        raise PlanError(source, problems)
    return plan


# --- admission: the plan against the registries and the platform ------------------------


def plan_problems(plan: Plan, plan_dir: Path | None) -> list[tuple[str, str]]:
    """Every cross-field problem of the plan at once, each at its field path: against the
    registries (a platform that can do every fault, controls that name an evidence check),
    the reference workload's config and, for a plan read from a file (``plan_dir``), the
    Kubernetes manifest and :func:`drill_problems`."""
    plugins.load()
    template = _kubernetes_problems(plan, plan_dir)
    if template:  # the job's template is a field of the plan: as any field error, it comes alone
        return template
    problems: list[tuple[str, str]] = []
    paths = plan.item_paths()
    seen: dict[str, str] = {}
    for item in plan.items():
        if item.id in seen:
            problems.append(
                (
                    f"{paths[id(item)]}.id",
                    f"scenario/control ids must be unique; repeated: {item.id} (first at "
                    f"{seen[item.id]})",
                )
            )
        seen.setdefault(item.id, paths[id(item)])
    platform = PLATFORMS.get(plan.resources.platform)
    if platform is None:
        problems.append(
            (
                "resources.platform",
                f"resources.platform {shown(plan.resources.platform)} is unknown; "
                f"use one of: {', '.join(sorted(PLATFORMS))}",
            )
        )
    else:
        problems += _fault_problems(plan, platform, paths)
    problems += _control_problems(plan, paths)
    problems += _check_reference_workload(plan)
    if plan_dir is not None:
        problems += drill_problems(plan)
    return problems


def drill_problems(plan: Plan) -> list[tuple[str, str]]:
    """What makes a plan someone wrote unable to do what it says: it drills nothing (no
    scenario, no control), or an item's trigger comes after the job's last step or
    last checkpoint, so its fault never fires. Said only where the step count is
    known: the reference workload's config (``steps``, ``checkpoint.every_steps``).
    A derived plan (the demo without what this machine lacks) may drill nothing."""
    if not plan.rounds and not plan.controls:
        return [
            (
                "rounds",
                "the plan drills nothing (rounds: [] and controls: []); add a round with "
                "a scenario (one fault and its trigger) or a control (`faultdrill schema` "
                "lists the fields)",
            )
        ]
    paths = plan.item_paths()
    problems = []
    for item in plan.items():
        problem = _trigger_problem(plan, item)
        if problem is not None:
            field, message = problem
            problems.append((f"{paths[id(item)]}.trigger.{field}", f"{item.id}: {message}"))
    return problems


def _trigger_problem(plan: Plan, item: Scenario | Control) -> tuple[str, str] | None:
    """(trigger field, why it never fires) when ``item``'s trigger comes after the last
    step or the last checkpoint of the reference workload as it runs; else None."""
    if plan.task.entrypoint.module != REFERENCE_WORKLOAD or item.trigger.after_s is not None:
        return None  # a job of its own: its step count is not the plan's to know

    try:
        cfg = config_from_dict(plan.workload_config(item, "<ckpt_dir>"), source="-")
    except ConfigError:
        return None  # said by _check_reference_workload
    if isinstance(item, Control) and "steps" in item.workload:
        where = (
            f"controls[{next(i for i, c in enumerate(plan.controls) if c is item)}].workload.steps"
        )
    elif "steps" in plan.task.workload:
        where = "task.workload.steps"
    else:
        where = "the reference workload's default steps (set task.workload.steps)"
    at_step, after = item.trigger.at_step, item.trigger.after_checkpoint
    if at_step is not None and at_step > cfg.steps:
        return "at_step", (
            f"at_step {at_step} is past the job's last step ({cfg.steps}, from {where}): "
            f"the fault would never fire; trigger at a step from 1 to {cfg.steps}, or "
            "run more steps"
        )
    saves = -(-cfg.steps // cfg.ckpt_every)  # every ckpt_every steps, and the last
    if after is not None and after > saves:
        return "after_checkpoint", (
            f"after_checkpoint {after} never comes: the job saves {saves} checkpoint(s) "
            f"({cfg.steps} steps from {where}, one every {cfg.ckpt_every} "
            "(checkpoint.every_steps) and one at the last step); use 1 to "
            f"{saves}, or run more steps"
        )
    return None


def _fault_problems(plan: Plan, platform: Any, paths: dict[int, str]) -> list[tuple[str, str]]:
    """Faults the platform cannot do with this layout, or that do not fit the plan."""
    problems = []
    can = platform.abilities_for(plan.resources)  # once: a plan may hold thousands
    for item in plan.items():
        fault_cls = FAULTS[item.fault.kind]
        missing = fault_cls.requires_for(item.fault) - can
        if missing:
            problems.append(
                (f"{paths[id(item)]}.fault.kind", _cannot(plan, item, platform, missing))
            )
        problem = fault_cls.validate_against(item.fault, plan)
        if problem:
            problems.append((f"{paths[id(item)]}.fault", f"{item.id}: {problem}"))
    return problems


def _control_problems(plan: Plan, paths: dict[int, str]) -> list[tuple[str, str]]:
    from faultdrill.checks import CHECKS

    problems = []
    evidence = sorted(n for n, reg in CHECKS.items() if reg.category != "expectation")
    for c in plan.controls:
        where = f"{paths[id(c)]}.expected_check"
        if c.expected_check not in CHECKS:
            problems.append(
                (
                    where,
                    f"controls[{c.id}].expected_check {shown(c.expected_check)} is not a "
                    f"check; use one of: {', '.join(evidence)}",
                )
            )
        elif CHECKS[c.expected_check].category == "expectation":
            # expectation checks judge whether the drill ran as planned; a known-bad
            # workload cannot make them fail, so the control could never be caught
            problems.append(
                (
                    where,
                    f"controls[{c.id}].expected_check {c.expected_check!r} is an expectation "
                    "check, which a known-bad workload cannot fail; name a progress, "
                    f"resources or results check: {', '.join(evidence)}",
                )
            )
    if plan.logs is not None and plan.resources.procs_per_node > 1 and not plan.logs.says_rank:
        problems.append(
            (
                "logs",
                f"logs: with procs_per_node {plan.resources.procs_per_node} a line must say "
                "which rank wrote it: add logs.rank (e.g. '^\\[rank(?P<rank>\\d+)\\]') or "
                "a rank group to the patterns",
            )
        )
    return problems


def _cannot(plan: Plan, item: Scenario | Control, platform: Any, missing: Any) -> str:
    """Why ``platform`` cannot do the fault of ``item``: the abilities it lacks and
    what would make each possible (``Platform.why_not``)."""
    what = "control" if isinstance(item, Control) else "scenario"
    names = sorted(str(a) for a in missing)
    fixes = dict.fromkeys(platform.why_not(a, plan.resources) for a in sorted(missing, key=str))
    return (
        f"{what} {item.id}: fault {item.fault.kind!r} needs "
        f"{'ability' if len(names) == 1 else 'abilities'} {', '.join(names)}, "
        f"which platform {platform.name!r} with isolation "
        f"{plan.resources.isolation!r} cannot do; {'; '.join(fixes)}"
    )


def _check_reference_workload(plan: Plan) -> list[tuple[str, str]]:
    """The reference workload's config, as each item will run it, is valid."""
    if plan.task.entrypoint.module != REFERENCE_WORKLOAD:
        return []

    checks: list[tuple[str, str, Control | None]] = [("task.workload", "task.workload", None)]
    checks += [
        (f"controls[{i}].workload", f"controls[{c.id}].workload", c)
        for i, c in enumerate(plan.controls)
    ]
    problems = []
    for path, where, item in checks:
        try:
            cfg = config_from_dict(plan.workload_config(item, "<ckpt_dir>"), source=where)
        except ConfigError as exc:
            problems.append(
                (
                    path,
                    f"{exc}; the fields are those of the reference workload's LMConfig "
                    "(faultdrill.workloads.lm_config)",
                )
            )
            if item is None:
                break  # each control's config builds on it: they would repeat its problem
            continue
        if cfg.bad_mode in RAY_BAD_MODES and plan.resources.platform != "ray":
            problems.append(
                (
                    f"{path}.bad_mode",
                    f"{where}.bad_mode {cfg.bad_mode!r} is a Ray Train mode (a platform "
                    "that hands checkpoints over); use it with resources.platform: ray",
                )
            )
    return problems


def _kubernetes_problems(plan: Plan, plan_dir: Path | None) -> list[tuple[str, str]]:
    """The Kubernetes job template of a plan read from a file: a template the job can be
    made from, and ``rendezvous`` set when it names ``{{rdzv_endpoint}}`` on a real
    cluster."""
    k8s = plan.resources.kubernetes
    if k8s is None or k8s.manifest is None:
        return []
    problems = []
    if plan_dir is not None:
        problem = template_problem(Path(k8s.manifest))
        if problem:
            problems.append(("resources.kubernetes.manifest", problem))
    if (
        not k8s.test_cluster
        and k8s.rendezvous is None
        and uses_placeholder(Path(k8s.manifest), "rdzv_endpoint")
    ):
        problems.append(
            (
                "resources.kubernetes",
                "the manifest uses {{rdzv_endpoint}}: set rendezvous: HOST:PORT (the "
                "address of the job's c10d store in the cluster)",
            )
        )
    return problems


# --- pydantic's errors, in a plan author's words ------------------------------------------


def _problems(exc: ValidationError, foreign: list[tuple[str, Refused]]) -> list[tuple[str, str]]:
    """The plan's problems: each value that is no plain data (``foreign``), then each of
    pydantic's errors, once (those about a foreign value are said already)."""
    errors = exc.errors()
    # A tuple whose item failed also reports itself "too short": noise, drop it.
    locs = [tuple(e["loc"]) for e in errors]
    said = {id(r) for _, r in foreign}
    errors = [
        e
        for e in errors
        if id(e.get("input")) not in said
        and not any(id(part) in said for part in e["loc"])
        and not (
            e["type"] == "too_short"
            and any(
                other != tuple(e["loc"]) and other[: len(e["loc"])] == tuple(e["loc"])
                for other in locs
            )
        )
    ]
    problems = [(path, r.message) for path, r in foreign]
    done = {path for path, _ in problems}
    return problems + [p for err in errors for p in _explain(err) if p[0] not in done]


#: What YAML may give that is plain data (JSON's types), as mapping keys and as values.
_PLAIN = (str, int, float, bool, type(None))


def _plain_data(node: Any, path: str, foreign: list[tuple[str, Refused]]) -> Any:
    """``node`` with every value that is not plain data (YAML's ``!!binary`` bytes, an
    unquoted date, a ``!!set``) replaced by a :class:`Refused`, each listed in ``foreign``
    with its path; ``node`` itself when it holds none. A plan holds text, numbers, booleans,
    lists and mappings: pydantic would read bytes as text, and a workload's config is
    written out as JSON."""
    if isinstance(node, dict):
        out: dict[Any, Any] = {}
        changed = False
        for key, value in node.items():
            where = _join(path, key if isinstance(key, str) and len(key) <= 64 else shown(key))
            if not isinstance(key, _PLAIN):
                refused = Refused(key, f"key {_foreign(key)}")
                foreign.append((where, refused))
                key, changed = refused, True
            new = _plain_data(value, where, foreign)
            changed = changed or new is not value
            out[key] = new
        return out if changed else node
    if isinstance(node, list | tuple):
        items = [_plain_data(v, f"{path}[{i}]", foreign) for i, v in enumerate(node)]
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    if isinstance(node, _PLAIN):
        return node
    refused = Refused(node, _foreign(node))
    foreign.append((path or "(top level)", refused))
    return refused


def _foreign(value: Any) -> str:
    """Why ``value`` (from YAML, not plain data) does not belong in a plan, and the fix."""
    if isinstance(value, bytes):
        return (
            f"{shown(value)} is binary data (a YAML !!binary value) where the plan takes "
            "text; write the text itself"
        )
    if isinstance(value, dt.date):  # datetime too
        return (
            f"{value.isoformat()} is a date (YAML reads an unquoted date as one) where the "
            f"plan takes text; quote it: '{value.isoformat()}'"
        )
    if isinstance(value, set | frozenset):
        return f"{shown(value)} is a set (a YAML !!set); write a list"
    return (
        f"{shown(value)} is a {type(value).__name__}; a plan holds only text, numbers, "
        "true/false, lists and mappings"
    )


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in FAULT_KINDS or str(part).startswith(("function-after", "tagged-union")):
            continue  # pydantic's union branch names are noise to a plan author
        else:  # a key as written in the plan: shortened if it is long
            name = str(part) if len(str(part)) <= 64 else shown(part)
            out += ("." if out else "") + name
    return out or "(top level)"


def _explain(err: Any) -> list[tuple[str, str]]:
    """One pydantic error as (field path, message) lines: a :class:`FieldProblems` gives
    one line per problem, at its own path below the error's."""
    kind, loc = err["type"], _loc(err["loc"])
    cause = err.get("ctx", {}).get("error")
    if kind == "value_error" and isinstance(cause, FieldProblems):
        base = "" if loc == "(top level)" else loc
        return [(_join(base, path), msg) for path, msg in cause.problems]
    return [_explain_one(err, kind, loc)]


def _join(base: str, path: str) -> str:
    if not base:
        return path
    return base + path if path.startswith("[") else f"{base}.{path}"


def _explain_one(err: Any, kind: str, loc: str) -> tuple[str, str]:
    value = err.get("input")
    msg = err["msg"]
    if isinstance(value, Refused):  # judged before pydantic saw it: its own words
        return loc, value.message
    if kind == "extra_forbidden":
        return loc, f"unknown key {shown(loc.rsplit('.', 1)[-1])}; remove it or check its spelling"
    if kind == "missing":
        return loc, "required field is missing; add it"
    if kind == "union_tag_invalid":
        tag = err.get("ctx", {}).get("tag", value)
        return (
            loc + ".kind",
            f"{shown(tag)} is not a known fault kind; use one of: {', '.join(sorted(FAULT_KINDS))}",
        )
    if kind == "union_tag_not_found":
        return loc, f"a fault needs 'kind'; use one of: {', '.join(sorted(FAULT_KINDS))}"
    if kind == "literal_error" and loc.endswith("fault.kind"):
        return (
            loc,
            f"{shown(value)} is not a known fault kind; use one of: {', '.join(sorted(FAULT_KINDS))}",
        )
    if kind in ("literal_error", "enum"):
        expected = err.get("ctx", {}).get("expected", "")
        return loc, f"{shown(value)} is not allowed; use {expected}"
    if kind == "value_error":
        return loc, msg.removeprefix("Value error, ")
    if kind == "finite_number":
        return loc, f"must be a finite number; got {shown(value)}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return loc, f"{msg.lower()}; got {shown(value)} ({type(value).__name__})"
    return loc, f"{msg} (got {shown(value)})"
