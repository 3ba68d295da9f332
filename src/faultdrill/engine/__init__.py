"""The drill engine: runs the baseline, the scenarios round by round, and the controls.

:mod:`~faultdrill.engine.run` runs a whole plan (round discipline, then judging);
:mod:`~faultdrill.engine.item` runs one item from launch to cleanup;
:mod:`~faultdrill.engine.watch` follows the job's progress, trigger and stop conditions;
:mod:`~faultdrill.engine.samplers` records the process table while the job runs;
:mod:`~faultdrill.engine.dossier` measures what the baseline's dossiers record of this
machine (data snapshot digests, devices, quotas).
Judging is :mod:`faultdrill.judge`, which can be re-run offline on a recorded run.
"""
