"""`chronolog produce`'s C line scanner (records/_lines.c) against its pure-Python twin (the block split
and `LineReader.times` of timetravel.lineload / linetime): the same lines, the same times, the same records
sent, on lines chosen to break one of them (empty lines, CRLF, no last newline, bad dates, 29 February,
single-digit days, non-UTF-8 bytes, chunks that end inside a line)."""

from __future__ import annotations

import io
import random
from array import array

import pytest

from chronolog.errors import ChronologError
from chronolog.native import load_native
from chronolog.records.batch import RecordBatch
from chronolog.timetravel import lineload
from chronolog.timetravel.linetime import LineReader

scan = load_native("chronolog.records._lines", "scan")
pytestmark = pytest.mark.skipif(scan is None, reason="the C extension is not built (or CHRONOLOG_PURE_PYTHON)")

TRICKY = [
    b"Jun 14 15:16:01 combo sshd[1]: ok",
    b"Jun  4 15:16:01 combo single-digit day, two spaces",
    b"Jun 4 15:16:01 combo single-digit day, one space",
    b"Jun 4  15:16:01 combo two spaces before the hour",
    b"Jun\t14\t15:16:01\tcombo tabs",
    b"Jun 14 15:16:01\r",                                   # CRLF: the \r is whitespace after the time
    b"Jun 14 15:16:01",                                      # no whitespace after the time: none
    b"",
    b"\r",
    b"Feb 29 10:00:00 leap day",
    b"Feb 30 10:00:00 no such day",
    b"Apr 31 10:00:00 no such day",
    b"Dec 31 23:59:59 last second",
    b"Jan  1 00:00:00 first second",
    b"Jun 00 15:16:01 day zero",
    b"Jun 14 24:00:00 hour 24",
    b"Jun 14 23:60:00 minute 60",
    b"Jun 14 23:59:60 leap second",
    b"Jun 14 23:59:99 second 99",
    b"jun 14 15:16:01 lower-case month",
    b"JUN 14 15:16:01 upper-case month",
    b"Jux 14 15:16:01 no such month",
    b"Jun 144 15:16:01 three-digit day",
    b"Jun 14 5:16:01 single-digit hour",
    b"Jun 14  5:16:01 single-digit hour after two spaces",
    b" Jun 14 15:16:01 leading space",
    b"Jun 14 15:16:01 caf\xc3\xa9 \xff\xfe not UTF-8 \x00 NUL",
    b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5\xf4\xf3\xf2\xf1\xf0 garbage prefix",
    b"Jun 14 15:16:0",
    b"Jun 14",
    b"Jun 14 15:16:01\x0b vertical tab",
    b"Jun 14 15:16:01\x1c file separator (whitespace to str, not to bytes)",
    b"Jun\xa014 15:16:01 no-break space",
    b"Sep 9 09:09:09 x",
    b"Jun     14     15:16:01   wide, past the 16-byte prefix",
    b"Jun 14   15:16:0",                                     # 16 bytes, no time; the next line has one
    b"Jun 14   15:16:01 the same 16 bytes as the line before",
    b"Jun 14 15:16:01 x",
    b"Jun 14 15:16:01 x",                                    # the same second: read once
    b"Jun 14 15:16:01\tx",
    b"Jun 14 15:16:01",
]


def _reader(year: int | None) -> LineReader:
    return LineReader(time_field=None, time_regex=None, time_format="syslog" if year else None, year=year,
                      timezone=None, key_field=None, key_separator=None, field_separator=None)


def _python(data: bytes, year: int | None, carry: int | None = None) -> tuple:
    """The lines and times the Python path gives (a line without a time: the one before it, `carry` for
    the first ones), the unreadable lines (not blank) and the lines before the first time."""
    lines = [line for block in lineload.blocks(io.BytesIO(data)) for line in block]
    if not year:
        return lines, None, [], 0
    times, last = [], carry
    for t in _reader(year).times(lines):
        last = t if t is not None else last
        times.append(last)
    lead = next((i for i, t in enumerate(times) if t is not None), len(times))
    return lines, times, _unreadable_indexes(lines, year), lead


def _c(data: bytes, year: int | None, carry: int | None = None) -> tuple:
    count, consumed, offsets, times, blank, unreadable, named, lead, least, last, last_read, kept = \
        scan(data, True, year or 0, -1 if carry is None else carry, True)
    assert consumed == len(data)
    o = array("i", offsets)
    lines = [data[o[i]:o[i + 1] - 1] for i in range(count)]
    assert blank == lines.count(b"")
    assert (kept is None) == (blank == 0)
    if kept is not None:
        assert list(array("q", kept)) == [i for i, line in enumerate(lines) if line]
    if not year:
        assert times is None
        return lines, None, [], 0
    got = [None if t < 0 else t for t in array("q", times)]
    readable = [t for t in got if t is not None]
    assert least == (min(readable) if readable else -1)
    assert last == (got[-1] if got and got[-1] is not None else -1)
    assert last_read == _last_own(lines, year)
    every = _unreadable_indexes(lines, year)
    assert unreadable == len(every)
    assert list(named) == every[:5]
    return lines, got, every, lead


def _unreadable_indexes(lines: list[bytes], year: int) -> list[int]:
    return [i for i, (line, t) in enumerate(zip(lines, _reader(year).times(lines), strict=True)) if t is None and line]


def _last_own(lines: list[bytes], year: int) -> int:
    return max((i for i, t in enumerate(_reader(year).times(lines)) if t is not None), default=-1)


@pytest.mark.parametrize("year", [None, 2024, 2023, 2000, 1970, 9999])
@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b""])
def test_tricky_lines_read_as_python_reads_them(year, ending):
    data = ending.join(TRICKY) + ending
    assert _c(data, year) == _python(data, year)
    assert _c(data, year, 1_000) == _python(data, year, 1_000)  # times carried on from the block before
    for line in TRICKY:  # each line alone, with and without its newline
        assert _c(line, year) == _python(line, year)
        assert _c(line + b"\n", year, 5) == _python(line + b"\n", year, 5)


def test_random_lines_read_as_python_reads_them():
    rng = random.Random(39)
    pieces = [b"Jun", b"Feb", b"jan", b" ", b"  ", b"\t", b"\r", b"\n", b"29", b"4", b"14", b"144", b"23:59:59",
              b"24:00:00", b"00:00:60", b"1:02:03", b"x", b"\xff", b":"]
    for _ in range(300):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        for year in (2024, 2023, None):
            assert _c(data, year) == _python(data, year)


def test_chunks_that_end_inside_a_line(monkeypatch):
    lines = [rng_line for rng_line in TRICKY * 5]
    data = b"\n".join(lines) + b"\nJun 14 15:16:01 last line without a newline"
    for block in (1, 7, 64, 1000):
        monkeypatch.setattr(lineload, "BLOCK", block)
        got = []
        for chunk, found in lineload.scanned(io.BytesIO(data), scan, 2024):  # no carry: -1
            count, consumed, offsets, *_ = found
            o = array("i", offsets)
            got += [chunk[o[i]:o[i + 1] - 1] for i in range(count)]
        assert got == _python(data, None)[0]


class _Sender:
    """The batch producer's part BatchPath uses, keeping the batches instead of sending them."""

    partitions = [0]

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.sequence = 0

    def producer(self, _partition: int, rows: int) -> tuple[int, int, int]:
        self.sequence += rows
        return 7, 0, self.sequence - rows

    def send(self, batches: dict) -> None:
        self.batches += batches[0]


def _load(data: bytes, pure: bool, monkeypatch, year: int | None, **options) -> tuple:
    """The records one load of `data` encodes ((value, timestamp, headers) of each), what its summary
    says, the error that stopped it, and how many blocks were read the Python way."""
    monkeypatch.setattr(lineload, "BLOCK", options.pop("block", 64))  # many blocks: the C path and its fallbacks
    if pure:
        monkeypatch.setenv("CHRONOLOG_PURE_PYTHON", "1")
    else:
        monkeypatch.delenv("CHRONOLOG_PURE_PYTHON", raising=False)
    path = lineload.BatchPath.__new__(lineload.BatchPath)
    path.sender, path.partitions, path.partition, path.headers = _Sender(), [0], None, [(b"h", b"v")]
    path.sticky = iter(lambda: 0, None)
    reader = _reader(year)
    run = lineload.Loader(reader, path, "t", "in", options.get("skip", 0), options.get("skip_blank", False),
                          options.get("require_time", False), None)
    python_blocks = []
    monkeypatch.setattr(run, "block", lambda lines: python_blocks.append(lineload.Loader.block(run, lines)))
    fast = lineload._scanner(reader, path)
    assert (fast is None) == pure
    error = None
    try:
        if fast is not None:
            for block, found in lineload.scanned(io.BytesIO(data), *fast, run.carry, None,
                                                 options.get("skip_blank", False)):
                run.scanned(block, found)
        else:
            for lines in lineload.blocks(io.BytesIO(data)):
                run.block(lines)
    except ChronologError as exc:
        error = str(exc)
    run.finish()
    records = [(bytes(r.value), r.timestamp if year else None, [(k, bytes(v)) for k, v in r.headers])
               for b in path.sender.batches for r in RecordBatch(b).records()]
    state = {k: getattr(run, k) for k in ("read", "done", "sent", "blank", "unreadable", "named", "last_ts",
                                          "last_text", "oldest", "held")}
    return records, state, error, len(python_blocks)


PLAIN = [f"Mar  1 00:{i // 60:02d}:{i % 60:02d} combo line {i}".encode() for i in range(200)]


@pytest.mark.parametrize("year", [2024, None])
@pytest.mark.parametrize("options", [{}, {"skip": 3}, {"skip_blank": True}, {"require_time": True},
                                     {"block": 1 << 20}])
@pytest.mark.parametrize("start", [b"", b"no time yet\n\nJun 14 99:00:00 nor here\n"])
def test_the_records_sent_are_the_pure_pythons(monkeypatch, year, options, start):
    data = start + b"\n".join(PLAIN[:50] + TRICKY + PLAIN[50:]) + b"\r\n" + b"\n".join(PLAIN[100:]) + b"\xff"
    *c, c_python_blocks = _load(data, False, monkeypatch, year, **dict(options))
    *py, _ = _load(data, True, monkeypatch, year, **dict(options))
    assert c == py
    if "require_time" in options and year:  # stopped at the first line without a time
        assert c[2] is not None and "has no readable time" in c[2]
    else:
        assert len(c[0]) > 300 and c[2] is None
    if not start and (not options or "skip_blank" in options):  # no time, blank lines, CRLF: all read in C
        assert c_python_blocks == 0
