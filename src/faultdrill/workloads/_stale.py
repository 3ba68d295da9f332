"""The old replica of the ``stale-replica`` bad mode (a negative control; standard library only).

Started by the highest rank of the first incarnation in a new session, so torchrun's
worker-group stop (``os.killpg`` of each live worker's own process group, SIGTERM then
SIGKILL) does not reach it, and with its standard streams on ``/dev/null``, so it holds no
pipe of the launcher. It behaves like a replica of that rank that nobody stopped:

* emits its own ``run_start`` from the worker's environment (same ``RANK``, ``MASTER_ADDR``,
  ``MASTER_PORT``, ``TORCHELASTIC_RESTART_COUNT``);
* holds a listening TCP socket on 127.0.0.1 (ephemeral port);
* lurks while its parent lives (the parent writes ``s<step>`` on ``--parent-fd`` after each
  step); once the parent is gone without a clean end, every ``--interval`` seconds it
  emits a ``step`` event, continuing the parent's step numbers and claiming that rank's
  usual sample range for each step, without any collective (its loss is a constant,
  ln(vocab)): a replica of the old generation still at work after the restart.

It exits when its parent writes ``end`` on ``--parent-fd`` (a clean end of a fault-free
run), after ``--lifetime`` seconds (default 115; 2 s later ``SIGALRM``, whose default action
kills it, ends it even if the loop is stuck: under 120 s in all), and at once on SIGTERM or
SIGKILL (it installs no handlers). A parent that dies without writing ``end`` (killed, or
stopped by torchrun for a restart) leaves it running: that is the bug.
"""

from __future__ import annotations

import argparse
import math
import os
import select
import signal
import socket
import time

from faultdrill.probe import probe_from_env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="faultdrill.workloads._stale", allow_abbrev=False)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--global-batch", type=int, required=True)
    parser.add_argument("--start-step", type=int, required=True)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--config-digest", default="")
    parser.add_argument("--parent-fd", type=int, default=-1)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--lifetime", type=int, default=115)
    args = parser.parse_args(argv)

    signal.alarm(args.lifetime + 2)
    deadline = time.monotonic() + args.lifetime
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    probe = probe_from_env(args.rank)
    probe.run_start(
        world_size=args.world_size,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        config_digest=args.config_digest,
    )
    per_rank = args.global_batch // args.world_size
    loss = math.log(args.vocab)
    step = args.start_step
    parent_fd: int | None = args.parent_fd if args.parent_fd >= 0 else None
    said = b""
    while time.monotonic() < deadline:
        if parent_fd is None:
            time.sleep(args.interval)
        elif not select.select([parent_fd], [], [], args.interval)[0]:
            continue  # the parent lives and said nothing: keep lurking
        else:
            chunk = os.read(parent_fd, 4096)
            said = (said + chunk)[-256:]
            if b"end" in said:
                return 0
            marks = [m for m in said.split(b"\n")[:-1] if m.startswith(b"s")]
            if marks:
                step = int(marks[-1][1:])
            if not chunk:  # the parent died without a clean end: keep going, stale
                os.close(parent_fd)
                parent_fd = None
            continue
        step += 1
        lo = (step - 1) * args.global_batch + args.rank * per_rank
        probe.step(step, loss, range(lo, lo + per_rank))
    listener.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
