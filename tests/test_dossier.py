"""The baseline's dossiers: the data dossier's access identity and change record, the
resource dossier's devices, quotas and scheduling result, the observation window."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from faultdrill.engine.dossier import amend_change_record, snapshot_record, tree_digest
from faultdrill.engine.run import write_dossier
from faultdrill.judge.dossier import access_identities, reported_data_digests, scheduling_result
from faultdrill.plan import Plan
from tests.records import as_json
from tests.timelines import NEW, OLD, TL, A, B, baseline, restart


def with_identity(tl: TL, digest: str = "data-1") -> TL:
    return tl.edit(
        "probe", "run_start", lambda r: True, uid=1000, user="trainer", data_digest=digest
    )


def test_the_scheduling_result_says_which_node_got_which_rank_per_incarnation() -> None:
    tl = restart().edit("probe", "run_start", lambda r: r["pid"] == NEW[1], node="n3").build()
    out = as_json(scheduling_result(tl))
    assert [(i["incarnation"], i["master"], i["world_size"], i["nodes"]) for i in out] == [
        (0, A, 2, ["n0", "n1"]),
        (1, B, 2, ["n0", "n3"]),
    ]
    assert [(r["rank"], r["node"], r["pid"]) for r in out[1]["ranks"]] == [
        (0, "n0", NEW[0]),
        (1, "n3", NEW[1]),
    ]
    assert [(r["rank"], r["pid"]) for r in out[0]["ranks"]] == [(0, OLD[0]), (1, OLD[1])]
    assert (out[0]["ready_s"], out[1]["ready_s"]) == (0.0, 7.0)
    assert scheduling_result(TL().build()) == []


def test_the_identity_and_data_digest_the_replicas_reported() -> None:
    tl = with_identity(restart()).build()
    assert as_json(access_identities(tl)) == [
        {"uid": 1000, "user": "trainer", "nodes": ["n0", "n1"]}
    ]
    assert reported_data_digests(tl) == ["data-1"]
    assert as_json(access_identities(restart().build())) == []  # a probe too old to say: nothing


def test_a_data_tree_digest_follows_its_content(tmp_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.bin").write_bytes(b"a")
    (tmp_path / "d" / "sub" / "b.bin").write_bytes(b"bb")
    first = tree_digest(tmp_path / "d")
    assert (first["files"], first["bytes"]) == (2, 3)
    assert tree_digest(tmp_path / "d") == first
    (tmp_path / "d" / "sub" / "b.bin").write_bytes(b"bc")
    assert tree_digest(tmp_path / "d")["sha256"] != first["sha256"]
    assert tree_digest(tmp_path / "d" / "a.bin")["files"] == 1
    assert tree_digest(tmp_path / "nope")["problem"].endswith("no such file")


def test_a_fifo_for_the_data_is_said_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "data")
    assert tree_digest(tmp_path / "data") == {
        "sha256": None,
        "files": 0,
        "bytes": 0,
        "problem": f"{tmp_path / 'data'} is a FIFO (named pipe), not a file",
    }


def dossier_of(tmp_path: Path, plan: Plan, tl: TL) -> dict[str, Any]:
    (tmp_path / "run" / "baseline").mkdir(parents=True)
    before = snapshot_record(plan, "before the baseline")
    write_dossier(plan, tmp_path / "run", 1.0, 11.0, timeline=tl.build(), data_before=before)
    out: dict[str, Any] = json.loads((tmp_path / "run" / "baseline" / "dossier.json").read_text())
    return out


def test_the_dossiers_record_identity_change_record_devices_quotas_and_placement(
    tmp_path: Path, plan: Plan
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-0").write_bytes(b"tokens")
    plan = plan.model_copy(
        update={"data": plan.data.model_copy(update={"path": str(data), "access": "svc-train"})}
    )
    dossier = dossier_of(tmp_path, plan, with_identity(baseline()))
    ident = dossier["data"]["access_identity"]
    assert ident == {
        "declared": "svc-train",
        "observed": [{"uid": 1000, "user": "trainer", "nodes": ["n0", "n1"]}],
    }
    record = dossier["data"]["change_record"]
    assert [s["when"] for s in record["snapshots"]] == ["before the baseline", "after the baseline"]
    assert record["snapshots"][0]["sha256"] == tree_digest(data)["sha256"]
    assert (record["changed"], record["reported_by_job"]) == (False, {"baseline": ["data-1"]})
    res = dossier["resources"]
    assert res["devices"]["declared"] == "cpu" and res["devices"]["host_cpus"] >= 1
    assert res["quotas"]["max_restarts"] == 3 and "harness_limits" in res["quotas"]
    assert [i["nodes"] for i in res["scheduling"]] == [["n0", "n1"]]
    assert dossier["observation"]["post_window"]["post_s"] == 0.0
    assert dossier["ownership"]["spare_nodes"] == "platform"
    assert dossier["ownership"]["recovery_runbook"] == "to be agreed"
    # after the last item: the data changed under the drill, and the record says so
    (data / "shard-0").write_bytes(b"tokens, edited")
    path = tmp_path / "run" / "baseline" / "dossier.json"
    amend_change_record(
        plan,
        path,
        {
            "baseline": with_identity(baseline()).build(),
            "kill-worker": with_identity(restart(), "data-2").build(),
        },
    )
    record = json.loads(path.read_text())["data"]["change_record"]
    assert [s["when"] for s in record["snapshots"]][-1] == "after the last item"
    assert record["reported_by_job"] == {"baseline": ["data-1"], "kill-worker": ["data-2"]}
    assert record["changed"] is True


def test_without_a_data_path_the_change_record_rests_on_what_the_job_reported(
    tmp_path: Path, plan: Plan
) -> None:
    record = dossier_of(tmp_path, plan, with_identity(baseline()))["data"]["change_record"]
    assert record["path"] is None
    assert record["snapshots"][0]["note"] == "the plan names no data path to hash (data.path)"
    assert record["changed"] is False  # one digest reported, the same throughout
    none = dossier_of(tmp_path / "x", plan, baseline())["data"]["change_record"]
    assert none["changed"] is None  # nothing to compare
