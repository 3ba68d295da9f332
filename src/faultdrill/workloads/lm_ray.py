"""The reference workload under Ray Train: the model, data stream, probe calls and known-bad
modes of :mod:`faultdrill.workloads.lm`, run by a ``TorchTrainer``.

The driver runs on a node of a Ray cluster (the embedded one: inside a node's namespace)::

    python -m faultdrill.workloads.lm_ray --workload-config=CFG --address=HOST:PORT \\
        --workers=2 --max-failures=3

Contract
--------
* **Training**: ``train_loop_per_worker`` calls :func:`faultdrill.workloads.lm.train_on_group`
  on the gloo process group Ray Train set up (``TorchConfig(backend="gloo",
  timeout_s=ceil(gloo_timeout_s))``), then destroys the group itself (DDP collected first:
  Ray's own shutdown then finds no group) and records ``run_end``. Same numbers as under
  torchrun: a fault-free run at the same world size gives the same losses and model digest.
* **Checkpoints**: Ray's experiment directory IS the workload's checkpoint directory:
  ``storage_path = dirname(ckpt_dir)``, ``name = basename(ckpt_dir)``. Rank 0 saves with the
  workload's durable save (``step-NNNNNN/{state.pt,manifest.json}``, ``latest``), then every
  rank calls ``ray.train.report(..., checkpoint_upload_mode=NO_UPLOAD)``, rank 0 with that
  directory: Ray registers it without copying. Why this way: Ray's hand-over
  (``ray.train.get_checkpoint()``) is the recovery path under test, so a resume starts from
  what Ray hands over; the bytes stay the workload's verified format, so the checkpoint
  checks and the checkpoint-damage faults work unchanged; a storage fault on the directory
  hits the save itself, so ``save_error`` keeps its meaning; and nothing is copied.
  ``CheckpointConfig(num_to_keep=None)``: the workload prunes (``ckpt_keep``), never the
  checkpoint Ray would hand over.
* **Resume**: the id of the checkpoint Ray hands over is tried first, then older ``step-*``
  directories, each verified (``load-unverified``: Ray's, unchecked). Ray handing over
  nothing means a start from scratch (``ckpt_none``), as a Ray user's script would do.
  ``ckpt_load``/``ckpt_none`` carry ``handed_over`` (that id, or None) and ``handed_path``.
* **publish-before-durable**: rank 0 hands the checkpoint to Ray (``report``) before its
  ``state.pt`` is written and fsynced.
* **handover-stale** (Ray only): rank 0 reports the checkpoint before the one it just saved
  (none at the first), so Ray holds, and a retry is handed, an older checkpoint than the
  newest valid one: a retry restoring the wrong checkpoint (ray-project/ray#36357).
* **Events**: every worker writes the probe events to the driver's
  ``FAULTDRILL_EVENTS_DIR`` (same host, passed in the loop config), and exports it (with
  the task id and ``RANK``) to its own environment, so that processes it starts
  (DataLoader workers, helpers) find it as under torchrun. ``run_start`` carries
  ``master`` (``MASTER_ADDR:MASTER_PORT``, which Ray Train sets afresh for every worker
  group), ``group`` (a random id rank 0 draws and broadcasts: one per incarnation),
  ``node_rank`` and ``ray_node_ip``. Ray does not tell a worker which attempt it is:
  ``restart_count`` is 0, incarnations are counted from the timeline. The Train
  controller's decisions go to the same directory (:mod:`faultdrill.platforms.ray.callback`).
* **Exit status**: 0 when ``fit()`` returns, 1 when Ray gives up (``TrainingFailedError``,
  one line on stderr), 2 for a config error.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import sys
import uuid
from typing import Any

import torch.distributed as dist

from faultdrill.probe import ENV_EVENTS_DIR, ENV_TASK_ID, Probe
from faultdrill.workloads import _ckpt
from faultdrill.workloads.lm import CheckpointBackend, train_on_group
from faultdrill.workloads.lm_config import ConfigError, LMConfig, config_from_dict, load_config

__all__ = ["RayCheckpoints", "main", "train_loop_per_worker"]

PROG = "faultdrill.workloads.lm_ray"


class RayCheckpoints(CheckpointBackend):
    """Checkpoints in Ray's experiment directory, handed over by Ray (see the module)."""

    def __init__(self, ckpt_dir: str, rank: int, *, stale: bool = False) -> None:
        super().__init__(ckpt_dir)
        self.rank = rank
        self.stale = stale
        self._reported = False
        self._previous: str | None = None  # handover-stale: what Ray is handed instead

    def load(self, verified: bool) -> tuple[_ckpt.LoadResult, dict[str, Any]]:
        import ray.train

        handed = ray.train.get_checkpoint()
        if handed is None:
            return _ckpt.LoadResult(None), {"handed_over": None, "handed_path": None}
        path = str(handed.path).rstrip("/")
        cid, where = os.path.basename(path), os.path.dirname(path)
        extra = {"handed_over": cid, "handed_path": path}
        if verified:
            return _ckpt.load(where, latest=cid), extra
        return _ckpt.load_unverified(where, latest=cid), extra

    def save(self, *, publish_before_durable: bool, **fields: Any) -> _ckpt.Saved:
        self._reported = False
        step = int(fields["step"])

        def publish(cid: str) -> None:
            _ckpt.publish_latest(self.dir, cid)
            if publish_before_durable:  # known-bad: Ray holds it before state.pt is durable
                self._report(step, os.path.join(self.dir, cid))

        return _ckpt.save(
            self.dir, publish_before_durable=publish_before_durable, publish=publish, **fields
        )

    def after_save(self, rank: int, step: int, saved: _ckpt.Saved | None) -> None:
        if not self._reported:
            directory = os.path.dirname(saved.path) if saved is not None else None
            if self.stale and directory is not None:  # known-bad: Ray gets the one before
                directory, self._previous = self._previous, directory
            self._report(step, directory)
        self._reported = False

    def _report(self, step: int, directory: str | None) -> None:
        """Every rank reports once per checkpoint step; rank 0 with the directory."""
        import ray.train
        from ray.train import Checkpoint, CheckpointUploadMode

        self._reported = True
        ray.train.report(
            {"step": step},
            checkpoint=Checkpoint.from_directory(directory) if directory else None,
            checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD,
        )


def _group_id(rank: int) -> str:
    """An id for this worker group (incarnation): rank 0 draws it, every rank gets it."""
    box: list[str | None] = [uuid.uuid4().hex[:12] if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return str(box[0])


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """What every Ray Train worker runs (``config``: see :func:`_loop_config`)."""
    import ray
    import ray.train

    cfg = config_from_dict(config["workload"], source=config["config_path"])
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    # What a process this worker starts (DataLoader workers, helpers) reads, as under
    # torchrun: Ray starts workers from the raylet's environment, not the driver's.
    os.environ.update({ENV_TASK_ID: config["task_id"], "RANK": str(rank)})
    if config["events_dir"]:
        os.environ[ENV_EVENTS_DIR] = config["events_dir"]
    probe = Probe(config["events_dir"], rank=rank, task_id=config["task_id"])
    trained = train_on_group(
        cfg,
        probe,
        RayCheckpoints(cfg.ckpt_dir, rank, stale=cfg.bad_mode == "handover-stale"),
        group=_group_id(rank),
        node_rank=ctx.get_node_rank(),
        ray_node_ip=ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call,unused-ignore]
    )
    gc.collect()
    dist.destroy_process_group()
    trained.finish()


def _loop_config(cfg: LMConfig, config_path: str) -> dict[str, Any]:
    workload = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
    workload["ckpt_dir"] = os.path.abspath(cfg.ckpt_dir)  # Ray moves the workers' cwd
    return {
        "workload": workload,
        "config_path": config_path,
        "events_dir": os.environ.get(ENV_EVENTS_DIR),
        "task_id": os.environ.get(ENV_TASK_ID, ""),
    }


def fit(cfg: LMConfig, config_path: str, args: argparse.Namespace) -> None:
    """Connect to the cluster and run the TorchTrainer; raises TrainingFailedError."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    # Without its own node's address, a driver inside a node's namespace attaches to the
    # head's raylet (Ray prefers the head among the raylets it finds on this host) and
    # announces an address that is not its own: the run then hangs after scheduling.
    ray.init(address=args.address, log_to_driver=True, _node_ip_address=args.node_ip)
    callbacks: list[Any] = []
    events_dir = os.environ.get(ENV_EVENTS_DIR)
    if events_dir:
        from faultdrill.platforms.ray.callback import DrillObserver

        names = {}  # node address -> node name, from name=address,...
        for pair in filter(None, os.environ.get("FAULTDRILL_RAY_NODES", "").split(",")):
            name, _, address = pair.partition("=")
            names[address] = name
        callbacks.append(DrillObserver(events_dir, os.environ.get(ENV_TASK_ID, ""), names))
    ckpt_dir = os.path.abspath(cfg.ckpt_dir)
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config=_loop_config(cfg, config_path),
        scaling_config=ScalingConfig(
            num_workers=args.workers, use_gpu=False, resources_per_worker={"CPU": 1}
        ),
        run_config=RunConfig(
            name=os.path.basename(ckpt_dir),
            storage_path=os.path.dirname(ckpt_dir),
            failure_config=FailureConfig(max_failures=args.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=None),
            callbacks=callbacks,
        ),
        torch_config=TorchConfig(backend="gloo", timeout_s=math.ceil(cfg.gloo_timeout_s)),
    )
    trainer.fit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False, description=__doc__.split("\n")[0]
    )
    parser.add_argument("--workload-config", required=True, help="path of the JSON config")
    parser.add_argument(
        "--address", default=os.environ.get("RAY_ADDRESS", "auto"), help="Ray GCS address host:port"
    )
    parser.add_argument(
        "--node-ip",
        default=os.environ.get("FAULTDRILL_NODE_ADDR") or None,
        help="this node's address in the Ray cluster (default: $FAULTDRILL_NODE_ADDR)",
    )
    parser.add_argument("--workers", type=int, default=2, help="ScalingConfig(num_workers)")
    parser.add_argument("--max-failures", type=int, default=3, help="FailureConfig(max_failures)")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.workload_config)
    except ConfigError as exc:
        print(f"{PROG}: config error: {exc}", file=sys.stderr)
        return 2
    from ray.train import TrainingFailedError

    try:
        fit(cfg, os.path.abspath(args.workload_config), args)
    except TrainingFailedError as exc:
        print(f"{PROG}: Ray Train gave up: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
