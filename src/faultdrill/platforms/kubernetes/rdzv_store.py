"""The job's rendezvous store at a fixed address: ``python -m ...rdzv_store PORT``.

A ``torch.distributed.TCPStore`` server on ``0.0.0.0:PORT`` (inside the namespace it is
started in) that torchrun's c10d rendezvous backend uses as a client (``is_host=0``).
Serves until SIGTERM. Prints ``serving <port>`` once it listens.
"""

from __future__ import annotations

import signal
import sys
import time
from datetime import timedelta


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    port = int(args[0])
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    store = TCPStore(
        "0.0.0.0", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60)
    )
    print(f"serving {port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(3600)
    finally:
        del store


if __name__ == "__main__":
    sys.exit(main())
