"""Slurm: drill jobs through sbatch/srun, on an embedded cluster brought up for the run.

Modules: ``nodes`` (the namespace cluster plus a controller node), ``embedded`` (munged,
slurmctld, one slurmd per node), ``parse`` (scontrol output), ``jobs`` (batch script,
submission, the watcher), ``platform`` (DRAFT adapter). Importing registers their ledger
undo functions (``slurm-daemon``, ``slurm-drain``) so that ``faultdrill cleanup`` can
replay a Slurm drill's ledger.
"""

from faultdrill.platforms.slurm import embedded, platform  # noqa: F401  (registers undoers)
