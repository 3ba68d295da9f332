"""Judging a recorded run: from its timeline to verdicts, answers and accounting.

:mod:`~faultdrill.judge.evaluate` judges items and whole runs (offline too:
``faultdrill check RUN_DIR``); :mod:`~faultdrill.judge.analysis` answers the questions
about a fault (detection, recovery, resume point); :mod:`~faultdrill.judge.disruption`,
:mod:`~faultdrill.judge.goodput` and :mod:`~faultdrill.judge.inventory` do the round-3
accounting; :mod:`~faultdrill.judge.reference` holds the baseline's reference results;
:mod:`~faultdrill.judge.network` summarises the network track. What a buyer signs:
:mod:`~faultdrill.judge.conclusion` (the conclusion level reached),
:mod:`~faultdrill.judge.layers` (the layer a failed recovery points to),
:mod:`~faultdrill.judge.dependencies` (what a recovery depended on, and who owns it),
:mod:`~faultdrill.judge.trend` (the trend after recovery), :mod:`~faultdrill.judge.dossier`
(scheduling result and data identity for the dossiers), :mod:`~faultdrill.judge.artifacts`
(exported files hashed again).
"""
