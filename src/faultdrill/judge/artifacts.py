"""The exported artefacts: every file the job reported exporting, hashed again after the run.

A training job reports its exported final model with ``probe.artifact`` (name, path, sha256
at export). After the job ended the harness hashes each such file again
(:func:`verify_artifacts`, recorded as ``harness``/``artifact_verified`` events), so that
``results.artifact-intact`` can tell an intact export from one that is gone or differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faultdrill.readings.inventory import sha256_file
from faultdrill.records import ReportedArtifact, VerifiedArtifact
from faultdrill.timeline import Timeline

__all__ = ["reported_artifacts", "verify_artifacts"]


def reported_artifacts(tl: Timeline) -> list[ReportedArtifact]:
    """The last report of each exported path: name, path, sha256, bytes, rank, pid."""
    last: dict[str, ReportedArtifact] = {}
    for e in tl.of("probe", "artifact"):
        path = str(e.get("path") or "")
        if path:
            last[path] = ReportedArtifact.model_validate(
                {
                    "name": e.get("name"),
                    "path": path,
                    "sha256": e.get("sha256"),
                    "bytes": e.get("bytes"),
                    "rank": e.get("rank"),
                    "pid": e.get("pid"),
                }
            )
    return list(last.values())


def verify_artifacts(tl: Timeline, base: Path) -> list[VerifiedArtifact]:
    """For each reported artefact: whether its file is present now, its sha256 and size,
    and whether they match the report. A relative path is taken from ``base`` (the item's
    directory). Never raises for a missing or unreadable file: it says so in ``problem``."""
    out = []
    for art in reported_artifacts(tl):
        path = Path(art.path)
        if not path.is_absolute():
            path = base / path
        rec: dict[str, Any] = {
            "name": art.name,
            "path": art.path,
            "reported_sha256": art.sha256,
            "present": False,
            "sha256": None,
            "bytes": None,
            "matches": False,
            "problem": None,
        }
        try:
            rec["bytes"] = path.stat().st_size
            rec["sha256"] = sha256_file(path)
        except FileNotFoundError:
            rec["problem"] = "no such file"
        except OSError as exc:
            rec["problem"] = f"unreadable: {exc.strerror or exc}"
        else:
            rec["present"] = True
            rec["matches"] = rec["sha256"] == art.sha256
            if not rec["matches"]:
                rec["problem"] = "content differs from what the job reported"
        out.append(VerifiedArtifact.model_validate(rec))
    return out
