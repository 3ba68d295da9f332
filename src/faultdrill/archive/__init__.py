"""Recorded runs after the fact: bundles, comparisons, replays and JUnit files.

:mod:`~faultdrill.archive.bundle` packs and verifies a run;
:mod:`~faultdrill.archive.diff` compares two reports; :mod:`~faultdrill.archive.replay`
re-runs a bundle's plan and compares; :mod:`~faultdrill.archive.junit` writes any of them
as JUnit XML.
"""
