"""Readings: what a recorded run says, read off its timeline before anyone judges it.

Each reading is a derived view of the record, with no opinion: checks, the judge, the
engine, faults and the reports all read them, so they sit below all of those (they import
only ``events``, ``intervals`` and ``timeline``). :mod:`~faultdrill.readings.analysis`
answers the questions about a fault (when the worker was deemed lost, when new replicas were
ready, where training resumed); :mod:`~faultdrill.readings.reference` is the fault-free
baseline's compact reference; :mod:`~faultdrill.readings.inventory` is the checkpoint
inventory and the pointer contract; :mod:`~faultdrill.readings.network` summarises the
network track. Verdicts are made above, in ``checks`` and ``judge``.

This ``__init__`` imports nothing, so reading one view loads no other.
"""
