"""A run's items act on a cluster the run shares (Platform.run_scope): the cluster's ledger
has a run id of its own, and each item's ledger shares it, so that the claims of an item's
entries (a link cut on the shared cluster's namespace) hold, and nothing else's do."""

from __future__ import annotations

from pathlib import Path

import faultdrill.platforms  # noqa: F401  (registers the undo kinds)
from faultdrill.host.owned import net_prefix
from faultdrill.ledger import Ledger, refusal

CLUSTER, ITEM, OTHER = "ray-0123456789ab", "t-kill-worker-89abcdef", "ray-ba9876543210"


def _link(run_id: str) -> dict[str, str]:
    return {"ns": f"{net_prefix(run_id)}-n2", "dev": f"{net_prefix(run_id)}n2"}


def test_a_shared_clusters_names_hold_only_once_shared(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl", run_id=ITEM)
    assert "not one of this run's" in str(refusal("link-down", _link(CLUSTER), ledger.scope))
    ledger.share(CLUSTER)
    ledger.share(CLUSTER)  # idempotent
    assert ledger.shared == [CLUSTER]
    assert refusal("link-down", _link(CLUSTER), ledger.scope, ledger.shared) is None
    assert refusal("link-down", _link(ITEM), ledger.scope, ledger.shared) is None
    assert refusal("link-down", _link(OTHER), ledger.scope, ledger.shared) is not None


def test_what_was_shared_is_read_back_by_cleanup(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path, run_id=ITEM)
    ledger.share(CLUSTER)
    ledger.record("link-down", _link(CLUSTER), "n2 down")
    again = Ledger(path, run_id="cleanup-caller")  # the file's own run wins
    assert (again.run_id, again.shared, again.problems) == (ITEM, [CLUSTER], [])
    lines = path.read_text().splitlines()
    assert '"op":"shares"' in lines[1] and '"op":"record"' in lines[2]  # before the entry
    ledger._append({"op": "shares", "run_id": "../x"})  # signed, but no run id
    assert Ledger(path, run_id=ITEM).problems == ["line 4: a shared scope without a valid run id"]


def test_an_unsigned_share_widens_nothing(tmp_path: Path) -> None:
    """A ``shares`` line added by hand would make another run's namespaces, cgroups and
    processes this run's: it is not signed, so it is ignored and said."""
    path = tmp_path / "ledger.jsonl"
    Ledger(path, run_id=ITEM).record("link-down", _link(ITEM), "n2 down")
    path.write_text(path.read_text() + f'{{"op":"shares","run_id":"{OTHER}"}}\n')
    again = Ledger(path, run_id=ITEM)
    assert again.shared == [] and "line 3: not signed" in again.problems[0]
    assert refusal("link-down", _link(OTHER), again.scope, again.shared) is not None
