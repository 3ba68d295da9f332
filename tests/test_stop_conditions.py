"""Stop conditions as the engine applies them while a job runs: from the probe files it
tails (written here by the real probe) to the condition that fires, or none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from faultdrill.engine.watch import Watch, stop_reason
from faultdrill.plan import StopConditions
from faultdrill.probe import Probe

STOP = StopConditions(max_wall_s=100, max_no_progress_s=10)


def _watch(tmp_path: Path, losses: list[float]) -> tuple[Watch, float]:
    """A watch that has read ``len(losses)`` steps on rank 0; returns it and the last
    step's monotonic time."""
    probe = Probe(tmp_path, rank=0, task_id="t")
    probe.run_start(world_size=1)
    for step, loss in enumerate(losses, 1):
        probe.step(step, loss, range(step, step + 1))
    probe.close()
    watch = Watch(tmp_path)
    watch.poll()
    assert watch.max_step == len(losses) and watch.last_progress_mono is not None
    return watch, watch.last_progress_mono


def test_a_job_making_progress_within_its_limits_is_left_alone(tmp_path: Path) -> None:
    watch, last = _watch(tmp_path, [2.0, 1.9, 1.8])
    assert stop_reason(watch, STOP, started=last - 5, now=last + 1) is None


def test_no_new_step_for_too_long_fires_max_no_progress(tmp_path: Path) -> None:
    watch, last = _watch(tmp_path, [2.0, 1.9])
    name, why = stop_reason(watch, STOP, started=last - 5, now=last + 11) or ("", "")
    assert name == "max_no_progress_s" and "no new step for 11 s > 10 s (last step 2)" in why


def test_a_job_that_never_stepped_counts_from_its_start(tmp_path: Path) -> None:
    watch = Watch(tmp_path)
    watch.poll()
    assert stop_reason(watch, STOP, started=0.0, now=9.0) is None
    assert (stop_reason(watch, STOP, started=0.0, now=11.0) or ("",))[0] == "max_no_progress_s"


def test_a_non_finite_loss_fires_unless_the_plan_allows_it(tmp_path: Path) -> None:
    watch, last = _watch(tmp_path, [2.0, float("nan"), 1.8])
    name, why = stop_reason(watch, STOP, started=last, now=last) or ("", "")
    assert name == "nonfinite_loss" and why == "rank 0 step 2 loss nan"
    allowed = StopConditions(max_wall_s=100, max_no_progress_s=10, stop_on_nonfinite_loss=False)
    assert stop_reason(watch, allowed, started=last, now=last) is None


def test_the_wall_clock_limit_fires_first(tmp_path: Path) -> None:
    watch, last = _watch(tmp_path, [2.0, float("inf")])
    name, why = stop_reason(watch, STOP, started=last - 101, now=last) or ("", "")
    assert name == "max_wall_s" and "> 100 s" in why


def test_the_probe_imports_without_torch_or_numpy() -> None:
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['numpy'] = None\n"
        "import faultdrill.probe as p; print(p.Probe.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "Probe"


def test_after_checkpoint_waits_for_the_platforms_commit_where_it_commits(
    tmp_path: Path,
) -> None:
    """On Ray Train a save is one Ray resumes from only once its controller registered it:
    "after checkpoint 1" waits for that too (a torn last line is not yet counted)."""
    from faultdrill.events import EventSink
    from faultdrill.plan import Trigger

    probe = Probe(tmp_path, rank=0, task_id="t")
    probe.run_start(world_size=1)
    probe.step(1, 2.0, range(1, 2))
    probe.checkpoint_saved(ckpt_id="step-1", step=1, path="p", sha256="0" * 64, data_position=1)
    probe.close()
    first = Trigger(after_checkpoint=1)
    plain = Watch(tmp_path)
    plain.poll()
    assert plain.saves == 1 and plain.triggered(first, now=0.0)
    ray = Watch(tmp_path, commits_from=("ray-controller", "ray_checkpoint_registered"))
    ray.poll()
    assert not ray.triggered(first, now=0.0)
    with open(tmp_path / "ray-controller.jsonl", "w") as f:
        f.write('{"kind": "ray_checkpoint_registered", "step": 1')  # torn: not yet
    ray.poll()
    assert ray.commits == 0 and not ray.triggered(first, now=0.0)
    sink = EventSink(tmp_path, "t")
    sink.emit("platform", "ray_worker_group_started", stream="ray-other")
    sink.emit("platform", "ray_checkpoint_registered", stream="ray-controller2", step=1)
    ray.poll()
    assert ray.commits == 0  # another stream, or another kind, is no commit
    (tmp_path / "ray-controller.jsonl").unlink()
    sink.emit("platform", "ray_checkpoint_registered", stream="ray-controller", step=1)
    sink.close()
    ray.poll()
    assert ray.commits == 1 and ray.triggered(first, now=0.0)


def test_a_failed_save_is_seen_with_its_time_and_only_from_then_on(tmp_path: Path) -> None:
    """What ends an outage that ends at a failed save (``until_save_failed``): the watch
    knows when the last save failed, read from the real probe's line."""
    probe = Probe(tmp_path, rank=0, task_id="t")
    probe.run_start(world_size=1)
    probe.step(1, 2.0, range(1, 2))
    watch = Watch(tmp_path)
    watch.poll()
    assert watch.last_failed_save_mono is None and not watch.save_failed_since(0.0)
    probe.checkpoint_failed(step=1, error="OSError: [Errno 28] No space left on device")
    probe.close()
    watch.poll()
    failed = watch.last_failed_save_mono
    assert failed is not None and watch.saves == 0
    assert watch.save_failed_since(failed) and watch.save_failed_since(failed - 1.0)
    assert not watch.save_failed_since(failed + 0.001)  # failed before the outage began
    assert not watch.save_failed_since(None)  # nothing injected
