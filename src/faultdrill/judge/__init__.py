"""Judging a recorded run: from its timeline to verdicts, answers and accounting.

:mod:`~faultdrill.judge.evaluate` judges items and whole runs (offline too:
``faultdrill check RUN_DIR``); :mod:`~faultdrill.judge.analysis` answers the questions
about a fault (detection, recovery, resume point); :mod:`~faultdrill.judge.disruption`,
:mod:`~faultdrill.judge.goodput` and :mod:`~faultdrill.judge.inventory` do the round-3
accounting; :mod:`~faultdrill.judge.reference` holds the baseline's reference results;
:mod:`~faultdrill.judge.network` summarises the network track.
"""
