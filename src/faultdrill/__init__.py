"""faultdrill: prove whether a distributed training platform really recovers from faults.

Vocabulary, used with exactly these meanings throughout the code:

A **plan** (``plan/``) is frozen, validated data: the baseline's task, data, resources,
checkpoint policy, seeds, responsibilities and stop conditions, then **scenarios** in
rounds, each injecting exactly one **fault** (``faults/``) at a trigger, with an expected
state; and negative **controls**, known-bad workloads a named check must catch. A
**platform** (``platforms/``) runs the job (the local one: real torchrun agents, one per
simulated node). The **probe** (``probe.py``) is what a training script calls to report its
progress. Every **event** (probe records, platform decisions, injections, process samples)
lands in one run's **timeline** (``timeline/``) on one clock, correlated by task id. A
**check** (``checks/``) is a pure function from timeline to **findings**; each finding has a
**verdict**, pass, retest or fail, combined worst-first into the verdict of a kind of
evidence (progress, resources, results) and of a scenario. A **run** directory holds the
baseline, every scenario's events and the **report**; a **bundle** packs it for replay.
"""

__version__ = "0.1.0"
