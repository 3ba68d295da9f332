"""What a recovery depended on, and who owns it, on tiny literal timelines and the demo plan."""

from __future__ import annotations

from faultdrill.judge.dependencies import (
    DEPENDENCIES,
    TO_BE_AGREED,
    dependency_totals,
    recovery_dependencies,
)
from faultdrill.plan import Plan, Scenario
from faultdrill.plan.sections import Ownership, Recovery
from tests.records import as_json
from tests.timelines import TL, baseline, restart


def spare(tl: TL) -> TL:
    return tl.platform("spare_placed", 6.2, node="n3", replaces="n2")


def resubmitted(tl: TL) -> TL:
    """An operator resubmitted the job at 6.6 (its next step: incarnation 1's at 8.0)."""
    return tl.harness(
        "operator_action", 6.6, action="resubmit", operator="ops", runbook="resubmit unchanged"
    )


def test_a_plain_restart_used_the_restart_budget_and_the_checkpoints(
    plan: Plan, scenario: Scenario
) -> None:
    deps = as_json(recovery_dependencies(restart().build(), plan, scenario))
    assert deps["used"] == ["restart_budget", "checkpoint_storage"]
    assert deps["owners"] == {
        "restart_budget": "platform",
        "checkpoint_storage": "enterprise-operations",
    }
    assert deps["restart_budget"] == {
        "used": 1,
        "max_restarts": 3,
        "incarnations": 2,
        "resubmissions": 0,
        "fewest_left_reported": None,
        "exhausted": False,
    }
    storage = deps["checkpoint_storage"]
    assert (storage["used_by_recovery"], storage["loaded"], storage["saves"]) == (
        True,
        ["ckpt-4"],
        3,
    )
    assert storage["held_bytes_bound"] == 1024 * plan.checkpoint.keep
    assert deps["spare_nodes"] == [] and deps["operator_actions"] == []
    assert deps["dedicated_network"]["used"] is None  # not observable, and said so


def test_a_spare_node_and_its_preparation_are_dependencies(plan: Plan, scenario: Scenario) -> None:
    deps = as_json(recovery_dependencies(spare(restart()).build(), plan, scenario))
    assert deps["spare_nodes"] == [{"node": "n3", "replaces": "n2", "at_s": 0.7}]
    assert deps["owners"]["spare_nodes"] == "platform"
    assert deps["owners"]["environment_preparation"] == TO_BE_AGREED  # the demo names none


def test_an_operator_action_with_its_permission_steps_and_observed_time(
    plan: Plan, scenario: Scenario
) -> None:
    deps = as_json(recovery_dependencies(resubmitted(restart()).build(), plan, scenario))
    [action] = deps["operator_actions"]
    assert action == {
        "action": "resubmit",
        "operator": "ops",
        "runbook": "resubmit unchanged",
        "permission": TO_BE_AGREED,
        "steps": ["resubmit unchanged"],
        "at_s": 1.1,
        "observed_s": 1.4,
        "observed_by": "from the action to the job's next step",
    }
    # the resubmission started incarnation 1: no restart of the platform's own
    assert deps["restart_budget"]["used"] == 0
    assert deps["used"] == ["operator_actions", "checkpoint_storage", "recovery_runbook"]
    planned = scenario.model_copy(
        update={
            "recovery": Recovery(
                action="resubmit",
                permission="submit jobs of task demo-lm",
                steps=("check the node", "resubmit"),
            )
        }
    )
    [action] = as_json(recovery_dependencies(resubmitted(restart()).build(), plan, planned))[
        "operator_actions"
    ]
    assert action["permission"] == "submit jobs of task demo-lm"
    assert action["steps"] == ["check the node", "resubmit"]


def test_the_baseline_depends_on_nothing(plan: Plan) -> None:
    deps = as_json(recovery_dependencies(baseline().build(), plan, None))
    assert deps["used"] == [] and deps["owners"] == {}
    assert deps["restart_budget"]["used"] == 0


def test_totals_sum_the_items_and_split_them_by_owner(plan: Plan, scenario: Scenario) -> None:
    items = [
        ("kill-worker", recovery_dependencies(restart().build(), plan, scenario)),
        ("node-loss", recovery_dependencies(spare(restart()).build(), plan, scenario)),
        ("manual", recovery_dependencies(resubmitted(restart()).build(), plan, scenario)),
    ]
    totals = as_json(dependency_totals(plan, items))
    assert totals["spare_nodes"] == {"placements": 1, "items": ["node-loss"]}
    assert totals["restarts"] == {
        "total": 2,
        "per_item": {"kill-worker": 1, "node-loss": 1, "manual": 0},
        "max_restarts": 3,
    }
    assert totals["operator_actions"] == {
        "count": 1,
        "observed_s_total": 1.4,
        "items": ["manual"],
    }
    assert totals["checkpoint_storage"]["items"] == ["kill-worker", "node-loss", "manual"]
    assert list(totals["by_dependency"]) == list(DEPENDENCIES)
    assert totals["by_dependency"]["spare_nodes"] == {"owner": "platform", "items": ["node-loss"]}
    assert totals["by_owner"] == {
        "platform": ["spare_nodes", "restart_budget"],
        "enterprise-operations": ["operator_actions", "checkpoint_storage"],
        TO_BE_AGREED: ["environment_preparation", "dedicated_network", "recovery_runbook"],
    }
    assert totals["to_be_agreed"] == ["environment_preparation", "recovery_runbook"]


def test_an_owner_the_plan_does_not_name_is_to_be_agreed() -> None:
    own = Ownership(spare_nodes="vendor-support")
    assert own.owner_of("spare_nodes") == "vendor-support"
    assert own.owner_of("restart_budget") == TO_BE_AGREED
    assert set(Ownership.model_fields) == set(DEPENDENCIES)
