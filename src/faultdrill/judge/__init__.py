"""Judging a recorded run: from its timeline to verdicts, answers and accounting.

:mod:`~faultdrill.judge.evaluate` judges items and whole runs (offline too:
``faultdrill check RUN_DIR``); :mod:`~faultdrill.judge.disruption` and
:mod:`~faultdrill.judge.goodput` do the round-3 accounting. What a buyer signs:
:mod:`~faultdrill.judge.conclusion` (the conclusion level reached),
:mod:`~faultdrill.judge.layers` (the layer a failed recovery points to),
:mod:`~faultdrill.judge.dependencies` (what a recovery depended on, and who owns it),
:mod:`~faultdrill.judge.trend` (the trend after recovery), :mod:`~faultdrill.judge.dossier`
(scheduling result and data identity for the dossiers), :mod:`~faultdrill.judge.artifacts`
(exported files hashed again). The derived views that checks read too (the answers about a
fault, the baseline's reference, the checkpoint inventory, the network track) are
:mod:`faultdrill.readings`, below checks, so checks never import the judge.
"""
