"""The band a correct resume of one job stays in, measured on that job's baseline.

A resumed run that is not bitwise equal to its baseline can still be correct: kernels that
sum in a varying order (GPU atomics, gloo's reductions), or a random stream drawn once more
on resume (a DataLoader iterator created after ``torch.set_rng_state`` draws its base seed
from the global generator, so every dropout mask after the resume is one draw later), give
a different but equally valid trajectory. What such a run cannot do is leave the baseline's
curve by more than the job's own noise. This module measures that noise on the baseline and
says how far the drill's curve is from the baseline's, in units of it.

The method (numbers below are the module's constants):

* **Noise** ``sigma``: the baseline's step-to-step noise of its loss, the mean over ranks per
  step: ``1.4826 * MAD(first differences) / sqrt(2)``, the first differences taken between
  consecutive reported steps. The first difference removes a slowly varying trend (the
  median of the differences is its local slope, and the MAD is taken around it); the MAD
  ignores the rare loss spike; ``1.4826 / sqrt(2)`` makes it the standard deviation of one
  step's noise if that noise were Gaussian and independent from step to step. It needs at
  least :data:`MIN_STEPS` reported baseline steps; it is never taken below
  :data:`FLOOR_REL` times the median absolute loss (float32 rounding: a curve without any
  noise must still allow a different summation order).
* **Per step**: the drill's mean loss over ranks at a step may differ from the baseline's at
  the same step by at most ``K_STEP * sigma``: only a gross jump (a model re-initialised,
  a loss that explodes) is outside.
* **Over a window**: the mean of those differences over any :data:`WINDOW` consecutive common
  steps (fewer when fewer are compared) may be at most ``K_MEAN * sigma * sqrt(2 / w)``: the
  standard deviation of a mean of ``w`` differences of two independent noisy curves is
  ``sigma * sqrt(2 / w)``, and ``K_MEAN`` of it is out of reach of chance (about 6e-5 per
  window for Gaussian noise). A systematic offset, what a learning-rate schedule not
  restored or a wrong optimizer state produces, is what this catches.

What it can tell apart, and what it cannot:

* ``sigma`` is the noise of one step's loss *including the variation from batch to batch*.
  A resume that replays the same batches (the usual case) differs from its baseline by far
  less than that, so the band is conservative: it does not fail a healthy job, and a fault
  whose effect on the loss is smaller than the job's own batch-to-batch noise over the window
  passes. Such a fault (a lost optimizer moment that costs a few steps of convergence) is for
  the restored-state checks, not for this one.
* Two healthy trajectories drift apart slowly. Over a long run of a small model with a high
  learning rate, the drift can exceed the band: the plan can then give its tolerance
  (``pass_criteria.results: tolerance``). A fault-free replicate of the baseline would
  measure the drift directly; the drill does not run one.
* The comparison is on the mean over ranks: a fault confined to one rank of ``N`` shows
  ``1/N`` of its size.
* It says nothing about the final model's bits, which a non-reproducible run cannot match.

**Evaluations** (held-out metrics) are measured on a fixed set: two models differ there by
their weights, not by batch noise, and a baseline evaluates too rarely (a few checkpoints)
for its own noise to be measured. Their band is therefore taken from the loss band's ratio:
an evaluated value may differ from the baseline's at the same step by ``K_EVAL`` standard
errors of a :data:`WINDOW`-step mean loss relative to the typical loss
(``sigma * sqrt(2 / WINDOW) / level``), times the baseline's value. This is a scale, not a
statistical bound: it is as wide as the smallest systematic change of the training loss the
window could see, which is what an evaluation of a stale model (a model some steps old)
shows; on the job of tests/test_results_band.py a healthy resume differed by a sixth of it.

Pure numpy on per-step arrays (one value per step, never per row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "FLOOR_REL",
    "K_EVAL",
    "K_MEAN",
    "K_STEP",
    "MIN_STEPS",
    "WINDOW",
    "Band",
    "BandResult",
    "compare_curves",
    "measure_band",
]

#: Reported baseline steps needed to measure the noise.
MIN_STEPS = 8
#: Steps per moving mean.
WINDOW = 10
#: Noise units one step may differ by.
K_STEP = 8.0
#: Standard deviations of a ``w``-step mean difference a window may differ by.
K_MEAN = 4.0
#: Standard errors of a ``WINDOW``-step mean loss, relative to the typical loss, that an
#: evaluated value may differ by, relative to the baseline's value (see the docstring).
K_EVAL = 1.0
#: The least noise, relative to the median absolute loss (float32 rounding).
FLOOR_REL = 1e-6
_MAD_TO_SIGMA = 1.4826 / math.sqrt(2.0)


@dataclass(frozen=True)
class Band:
    """The band measured on a baseline: its noise ``sigma`` (loss units), how many reported
    steps it rests on, whether the floor raised it, the typical loss (median absolute), and
    the window; :attr:`step_limit` and :meth:`mean_limit` are the two limits."""

    sigma: float
    steps: int
    floored: bool
    level: float
    window: int = WINDOW

    @property
    def step_limit(self) -> float:
        return K_STEP * self.sigma

    def mean_limit(self, window: int) -> float:
        return K_MEAN * self.sigma * math.sqrt(2.0 / max(window, 1))

    @property
    def eval_relative(self) -> float:
        """The evaluation band, relative to each evaluated value: ``K_EVAL`` standard errors
        of a ``window``-step mean of the loss, relative to the typical loss."""
        se = self.sigma * math.sqrt(2.0 / max(self.window, 1))
        return K_EVAL * se / self.level if self.level > 0 else 0.0


def measure_band(steps: np.ndarray, loss: np.ndarray) -> Band | None:
    """The band of a baseline's mean loss per step (``steps`` ascending, NaN-free), or None
    when fewer than :data:`MIN_STEPS` steps reported a finite loss."""
    finite = np.isfinite(loss)
    loss = loss[finite]
    if loss.size < MIN_STEPS:
        return None
    diff = np.diff(loss)
    mad = float(np.median(np.abs(diff - np.median(diff))))
    level = float(np.median(np.abs(loss)))
    sigma = _MAD_TO_SIGMA * mad
    floor = FLOOR_REL * max(level, 1e-12)
    return Band(max(sigma, floor), int(loss.size), sigma < floor, level)


@dataclass(frozen=True)
class BandResult:
    """How the drill's curve stands against the baseline's in a :class:`Band`.

    ``compared``: common steps; ``window``: the steps per moving mean used; ``worst_step``
    and ``worst_mean``: the largest absolute difference at one step and of one window's
    mean; ``steps_out`` / ``windows_out``: how many are outside; ``first``: the first thing
    outside, lowest step first: ``("step", step, drill, baseline, difference)`` or
    ``("window", first step, last step, mean difference)``; None when all is inside."""

    compared: int
    window: int
    worst_step: float
    worst_mean: float
    steps_out: int
    windows_out: int
    first: tuple[object, ...] | None

    @property
    def inside(self) -> bool:
        return self.first is None


def compare_curves(
    band: Band,
    got_steps: np.ndarray,
    got_loss: np.ndarray,
    base_steps: np.ndarray,
    base_loss: np.ndarray,
) -> BandResult | None:
    """The drill's mean loss per step against the baseline's at the common steps (both
    ascending), or None when they have no step in common."""
    common, gi, bi = np.intersect1d(got_steps, base_steps, return_indices=True)
    if common.size == 0:
        return None
    got, base = got_loss[gi], base_loss[bi]
    delta = got - base
    delta[np.isnan(got) & np.isnan(base)] = 0.0  # NaN on both sides: the same
    # a NaN or inf on one side only is outside whatever the band
    delta[~np.isfinite(delta)] = np.inf
    w = min(band.window, int(common.size))
    acc = np.concatenate(([0.0], np.cumsum(np.where(np.isinf(delta), 0.0, delta))))
    means = (acc[w:] - acc[:-w]) / w
    bad_at = np.isinf(delta)
    if bad_at.any():  # a window over a non-finite step is outside too
        hit = np.concatenate(([0], np.cumsum(bad_at)))
        means[(hit[w:] - hit[:-w]) > 0] = np.inf
    step_out = np.abs(delta) > band.step_limit
    mean_out = np.abs(means) > band.mean_limit(w)
    first: tuple[object, ...] | None = None
    if step_out.any() or mean_out.any():
        i = int(np.argmax(step_out)) if step_out.any() else None
        j = int(np.argmax(mean_out)) if mean_out.any() else None
        # a window is "at" its last step: the step it could first be seen at
        if i is not None and (j is None or common[i] <= common[j + w - 1]):
            first = ("step", int(common[i]), float(got[i]), float(base[i]), float(delta[i]))
        else:
            assert j is not None
            first = ("window", int(common[j]), int(common[j + w - 1]), float(means[j]))
    return BandResult(
        compared=int(common.size),
        window=w,
        worst_step=float(np.max(np.abs(delta))),
        worst_mean=float(np.max(np.abs(means))),
        steps_out=int(step_out.sum()),
        windows_out=int(mean_out.sum()),
        first=first,
    )
