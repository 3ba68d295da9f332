"""The JSON reader's fast path (runs of step lines decoded in one call,
:mod:`faultdrill.timeline.steplines`) gives exactly what reading every line alone gives:
the same step columns bit for bit, events, task, torn and bad-line counts per file and
their sources, in ``Timeline.load`` and in the step store's ``parse_chunk``, on random
files of valid and damaged probe lines."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import faultdrill.timeline.reader as reader
from faultdrill.timeline import Timeline
from faultdrill.timeline.reader import MAX_LINE, _Scan
from faultdrill.timeline.steplines import decode_run
from faultdrill.timeline.store import Chunk, parse_chunk

STEP_COLUMNS = ("mono", "rank", "pid", "step", "loss", "rng_off", "rng_start", "rng_end")

#: Texts a field of a step line may hold instead of the usual value: each one either
#: valid with an edge value or a break of the event contract.
ODD_VALUES: dict[str, list[str]] = {
    "mono": [
        *("-0", "0", "-0.0", "0.0", "1e400", "-1e400", "NaN", "Infinity", "-Infinity"),
        *('"1.5"', "true", "null", "1E5", "1e-5", "12345678901234567890123", "2.", "01"),
        *("9007199254740993", "-1.5e+10", "123456789012345678901234567890e-10", "[1]"),
        *("4.9e-324", "1.7976931348623157e308", "1.7976931348623159e308"),
    ],
    "step": [
        *("1.0", "true", '"5"', "9223372036854775807", "9223372036854775808", "-0"),
        *("-9223372036854775809", "99999999999999999999", "null", "1e3", "-5"),
    ],
    "rank": [
        *("2147483647", "2147483648", "-2147483648", "-2147483649", "true", "1.0"),
        *("-0", "null", '"0"', "3"),
    ],
    "pid": ["2147483647", "2147483648", "-1", "false", "4.5", "null", "77"],
    "loss": [
        *("null", "NaN", "Infinity", "-Infinity", "1e400", "-1e400", "-0", "0", "0.0"),
        *("-0.0", "5", '"NaN"', "true", "1e-320", "2.2250738585072011e-308", "[]"),
    ],
    "ts": ['"x"', "NaN", "1e400", "null", "{}", "-0"],
    "task": [
        *('""', '"t\\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"', '"t\u00e9"', '"a\\"b"'),
        *("5", "null", '"x,{"', '"{\\n"', '"a\tb"', '"z"', '"\\u0074"'),
    ],
    "samples": [
        *("[]", "[[1,2],[3,4]]", "[[-0,5]]", "[[1, 2]]", "[ [1,2] ]", "null", "false"),
        *("0", '""', "{}", "[[1,2,3]]", "[[1.5,2]]", "[[true,1]]", "[1,2]", '[["a","b"]]'),
        *("[[9223372036854775807,1]]", "[[9223372036854775808,1]]", "[[1,2],{}]"),
        *("[[-9223372036854775808,1]]", "[[-9223372036854775809,1]]", "[[0,0]]"),
    ],
    "src": ['"harness"', '"pro\\u0062e"', "1"],
    "kind": ['"Step"', '"st\\u0065p"', '"run_start"'],
}

#: Whole lines that are not the probe's step lines (bytes: some are not UTF-8).
ODD_LINES: list[bytes] = [
    b'{"src": "probe", "task": "t", "rank": 0, "pid": 7,"ts":1.0,"mono":1.0,'
    b'"kind":"run_start","world_size":2,"local_rank":0,"restart_count":0}\n',
    b'{"src": "probe", "task": "t", "rank": 0, "pid": 7,"ts":1.0,"mono":1.0,'
    b'"kind":"ckpt_save","id":"c","step":"x"}\n',
    b"not json\n",
    b"[1,2]\n",
    b"5\n",
    b"\n",
    b"   \n",
    b'{"src": "probe", "kind": "step"}\n',
    b'{"src": "probe", "kind": "step", "mono": 3.5, "step": 2}\n',
    b'{"src": "harness", "kind": "note", "mono": 2.0, "task": "h"}\n',
    b'{"src": "probe", "task": "t\xff", "kind": "step", "mono": 1.0, "step": 1}\n',
    b'{"src": "probe", "task": "\xed\xa0\x80", "kind": "step", "mono": 1.0, "step": 1}\n',
    b'\xef\xbb\xbf{"src": "probe", "kind": "step", "mono": 1.0, "step": 1}\n',
    b'{"src": "probe", "task": "x\n',  # an unclosed string: its line ends inside it
    b'{","kind":"step","mono":2.0,"step":3}\n',  # ... and one that would close it
]


def _line(v: dict[str, str], rnd: random.Random | None = None) -> bytes:
    """A step line in the probe's layout from field texts, damaged one way or another if
    ``rnd`` is given (a random choice)."""
    text = (
        '{{"src": {src}, "task": {task}, "rank": {rank}, "pid": {pid},'
        '"ts":{ts},"mono":{mono},"kind":{kind},"step":{step},"loss":{loss},'
        '"samples":{samples}}}'
    ).format(**v)
    line = text.encode()
    if rnd is None:
        return line + b"\n"
    roll = rnd.random()
    if roll < 0.3:
        line = line[: rnd.randrange(1, len(line))]  # torn; the next write ends it
    elif roll < 0.6:
        extra = rnd.choice(
            [
                b',"x":1',
                b',"x":NaN',
                b',"x":"\xff"',  # not UTF-8
                b',"x":"\xed\xa0\x80"',  # a surrogate, encoded
                b',"rank":7',
                b',"src":"harness"',
                b',"mono":5.5',
                b',"samples":[[9,10]]',
                b',"x":' + b"[" * 60 + b"]" * 60,
                b',"x":' + b"[" * 3000 + b"]" * 3000,
                b',"loss":"NaN"',
            ]
        )
        line = line[:-1] + extra + b"}"
    else:
        line = rnd.choice(
            [
                line.replace(b'": ', b'" : ').replace(b'":', b'": '),
                b" " + line,
                line + b"  ",
                line + b"\t",
                line + b"\r",
                line.replace(b'"mono"', b'"\\u006dono"'),
                line.replace(b",", b",\r", 1),
                line + line,  # two objects on one line
                line + b"," + line,
                _reordered(line),
            ]
        )
    return line + b"\n"


def _reordered(line: bytes) -> bytes:
    try:
        obj = json.loads(line)
    except ValueError:
        return line
    items = list(obj.items())
    random.Random(len(line)).shuffle(items)
    return json.dumps(dict(items)).encode()


def _probe_file(rnd: random.Random, lines: int, odd: float, rank: int) -> bytes:
    """A probe file: a run_start, then step lines (``odd``: the share with an odd field
    or damage), other lines now and then, a restart (new pid) halfway."""
    out = [ODD_LINES[0]]
    pid, mono = 100 + rank, 1000.0 + rank
    for i in range(lines):
        if i == lines // 2:
            pid += 1000
        mono += rnd.choice([1e-3, 0.5, 17.25, 1e-9])
        s = rnd.randrange(1 << 20)
        v = {
            "src": '"probe"',
            "task": '"t"',
            "rank": str(rank),
            "pid": str(pid),
            "ts": repr(1.7e9 + mono),
            "mono": repr(mono),
            "kind": '"step"',
            "step": str(i + 1),
            "loss": rnd.choice(["null", repr(rnd.random() * 3), "2"]),
            "samples": f"[[{s},{s + rnd.randrange(1, 99)}]]",
        }
        if rnd.random() < odd:
            field = rnd.choice(list(ODD_VALUES))
            v[field] = rnd.choice(ODD_VALUES[field])
        if rnd.random() < odd / 3:
            out.append(rnd.choice(ODD_LINES))
        out.append(_line(v, rnd if rnd.random() < odd else None))
    return b"".join(out)


def _load(events: Path, fast: bool, monkeypatch: pytest.MonkeyPatch) -> Timeline:
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(reader, "decode_run", lambda data: None)
        return Timeline.load(events, use_store=False, readers=1)


def _same_timeline(a: Timeline, b: Timeline) -> None:
    for col in STEP_COLUMNS:
        x, y = getattr(a.steps, col), getattr(b.steps, col)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), col  # bit for bit
    assert [repr(e.to_json()) for e in a.events] == [repr(e.to_json()) for e in b.events]
    assert (a.task_id, a.torn_lines, a.bad_lines) == (b.task_id, b.torn_lines, b.bad_lines)


def _same_chunk(a: Chunk, b: Chunk) -> None:
    assert (a.torn, a.task, a.source, a.lines) == (b.torn, b.task, b.source, b.lines)
    assert repr(a.records) == repr(b.records)
    assert (a.steps is None) == (b.steps is None)
    for x, y in zip(a.steps or [], b.steps or [], strict=True):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows the fast path took, per successful call."""
    taken: list[int] = []

    def counted(data: bytes) -> Any:
        run = decode_run(data)
        if run is not None:
            taken.append(int(run.columns[0].shape[0]))
        return run

    monkeypatch.setattr(reader, "decode_run", counted)
    return taken


@pytest.mark.parametrize("small_runs", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_the_fast_path_loads_what_line_by_line_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, small_runs: bool
) -> None:
    rnd = random.Random(seed)
    if small_runs:  # runs of a few lines: the fast path and the halving meet every line
        monkeypatch.setattr(_Scan, "MIN_BLOCK", 64)
        monkeypatch.setattr(_Scan, "MIN_RUN", 2)
    odd = (0.0, 0.01, 0.05, 0.3)[seed % 4]
    for rank in range(3):
        data = _probe_file(rnd, 1500, odd, rank)
        (tmp_path / f"probe-rank{rank}.jsonl").write_bytes(data)
    slow = _load(tmp_path, False, monkeypatch)
    taken = _counting(monkeypatch)
    fast = _load(tmp_path, True, monkeypatch)
    _same_timeline(fast, slow)
    if small_runs or odd <= 0.01:  # else runs between odd lines are mostly too short
        assert sum(taken) >= len(slow.steps) // 4, "the fast path was not taken"
    if odd == 0.0:
        assert fast.torn_lines == 0 and sum(taken) == len(slow.steps) == 4500
    for rank in range(3):
        data = (tmp_path / f"probe-rank{rank}.jsonl").read_bytes()
        data = data[: data.rfind(b"\n") + 1]
        quick = parse_chunk(data)
        with monkeypatch.context() as m:
            m.setattr(reader, "decode_run", lambda data: None)
            _same_chunk(quick, parse_chunk(data))


def _clean_run(n: int, first: int = 1) -> list[bytes]:
    v = {"src": '"probe"', "task": '"t"', "rank": "1", "pid": "9", "kind": '"step"'}
    lines = []
    for i in range(first, first + n):
        v.update(ts=repr(1.7e9 + i), mono=repr(i / 7), step=str(i), loss=repr(i / 3))
        v["samples"] = f"[[{i * 64},{i * 64 + 64}]]"
        lines.append(_line(v))
    return lines


@pytest.mark.parametrize(
    "odd",
    [
        *(v.encode() for v in ('"mono":-0,', '"loss":NaN,', '"loss":-0}', '"loss":1e400,')),
        *(v.encode() for v in ('"rank": 2147483648,', '"samples":[[1,2,3]]', '"x":1,')),
        b'"task": "t\xff",',
        b'"samples":[[9223372036854775807,1]]',
    ],
)
def test_a_run_with_one_odd_line_loads_as_line_by_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: bytes
) -> None:
    """One odd line in a long clean run: the run is cut down around it (most of it still
    fast), and the odd line is judged as line by line judges it."""
    lines = _clean_run(2000)
    key = odd.split(b":")[0]
    at = lines[1000].index(key) if key in lines[1000] else len(lines[1000]) - 2
    end = lines[1000].index(b",", at) + 1 if key in lines[1000] else at
    lines[1000] = lines[1000][:at] + odd + lines[1000][end:]
    if not lines[1000].endswith(b"}\n"):
        lines[1000] = lines[1000].rstrip(b",\n}") + b"}\n"
    (tmp_path / "probe-rank1.jsonl").write_bytes(b"".join(lines))
    slow = _load(tmp_path, False, monkeypatch)
    taken = _counting(monkeypatch)
    fast = _load(tmp_path, True, monkeypatch)
    _same_timeline(fast, slow)
    assert sum(taken) >= 1900  # the clean lines around the odd one went the fast way


def test_a_clean_probe_file_is_read_in_few_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's own lines, a run_start first: every step is taken by the fast path,
    a block (128 KiB) per call, and the table is the one line by line gives."""
    (tmp_path / "probe-rank1.jsonl").write_bytes(ODD_LINES[0] + b"".join(_clean_run(20_000)))
    slow = _load(tmp_path, False, monkeypatch)
    taken = _counting(monkeypatch)
    fast = _load(tmp_path, True, monkeypatch)
    _same_timeline(fast, slow)
    assert sum(taken) == 20_000 == len(fast.steps)
    assert len(taken) <= 40
    assert len(fast.events) == 1 and fast.task_id == "t" and fast.torn_lines == 0


def test_an_overlong_step_line_is_refused_by_the_reader_and_parsed_by_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A valid step line longer than MAX_LINE: the reader counts it bad (never holding
    it), the store's parse_chunk reads it; the fast path changes neither."""
    big = b'{"src": "probe", "kind": "step", "mono": 5.0, "step": 9, "samples": ['
    big += b",".join(b"[%d,%d]" % (i * 2, i * 2 + 1) for i in range(MAX_LINE // 8)) + b"]}\n"
    data = b"".join(_clean_run(100)) + big + b"".join(_clean_run(100, first=101))
    (tmp_path / "probe-rank1.jsonl").write_bytes(data)
    slow = _load(tmp_path, False, monkeypatch)
    fast = _load(tmp_path, True, monkeypatch)
    _same_timeline(fast, slow)
    assert fast.torn_lines == 1 and len(fast.steps) == 200
    quick = parse_chunk(data)
    with monkeypatch.context() as m:
        m.setattr(reader, "decode_run", lambda data: None)
        _same_chunk(quick, parse_chunk(data))
    assert quick.torn == 0 and quick.steps is not None and quick.steps[0].shape[0] == 201


DECLINED: list[Callable[[bytes], bytes]] = [
    lambda ln: ln.replace(b'"mono":', b'"mono":-0,"x":'),  # an unknown field
    lambda ln: ln.replace(b'"loss":', b'"loss":NaN,"y":'),
    lambda ln: ln.replace(b'"step":', b'"step":1.0,"z":'),
    lambda ln: b" " + ln,
    lambda ln: ln.replace(b'"ts":', b'"ts":\r'),
]


@pytest.mark.parametrize("damage", range(len(DECLINED)))
def test_decode_run_declines_what_it_cannot_vouch_for(damage: int) -> None:
    """A run with a line the fast path does not take whole is declined (None), never
    judged; the clean run is taken with its task, ranks and ranges."""
    lines = _clean_run(50)
    run = decode_run(b"".join(lines))
    assert run is not None and run.task == "t"
    assert run.columns[1].tolist() == [1] * 50 and run.columns[5].tolist() == [1] * 50
    assert run.columns[6].tolist() == [i * 64 for i in range(1, 51)]
    lines[25] = DECLINED[damage](lines[25])
    assert decode_run(b"".join(lines)) is None


def test_lines_that_decode_to_as_many_values_only_together_are_read_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step line cut before its end, the rest of it on the next line, and a line of two
    step lines: three lines, three JSON values, yet none of them a line that holds one.
    Every one of them is bad line by line, and so it is here."""
    clean = _clean_run(60)
    cut = clean[30].index(b"]]}")
    odd = [clean[30][: cut + 1] + b"\n", b"]}\n", clean[31][:-1] + clean[32]]
    (tmp_path / "probe-rank1.jsonl").write_bytes(b"".join([*clean[:30], *odd, *clean[33:]]))
    assert decode_run(b"".join(odd)) is None
    slow = _load(tmp_path, False, monkeypatch)
    fast = _load(tmp_path, True, monkeypatch)
    _same_timeline(fast, slow)
    assert fast.torn_lines == 3 and len(fast.steps) == 57
