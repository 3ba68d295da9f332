"""Slurm: drill jobs through sbatch/srun, on a real cluster or an embedded one.

Modules: ``parse`` (scontrol output), ``jobs`` (batch and task scripts, submission, the
watcher that puts Slurm's decisions on the timeline), ``embedded`` (munged, slurmctld and
one slurmd per node on the node cluster), ``platform`` (``platform: slurm`` against the
cluster ``sbatch`` reaches) and ``embedded_platform`` (the same on an embedded cluster,
with node-level actions). Its modules register the platform and the ledger undo functions
(``slurm-daemon``, ``slurm-drain``, ``slurmctld-stop``) that ``faultdrill cleanup`` needs.
"""
