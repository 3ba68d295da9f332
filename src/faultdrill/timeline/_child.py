"""A reader process of :meth:`faultdrill.timeline.Timeline.load` for large runs.

Reads the event files named on stdin (a JSON list of paths) and writes what it made of
them to stdout (a pickled part), for the parent to join in file order. Not a user command:
run as ``python -m faultdrill.timeline._child`` by :mod:`faultdrill.timeline.reader`.
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

from faultdrill.timeline.reader import _read_files


def main() -> int:
    paths = [Path(p) for p in json.load(sys.stdin)]
    pickle.dump(_read_files(paths), sys.stdout.buffer, protocol=pickle.HIGHEST_PROTOCOL)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
