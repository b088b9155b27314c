"""Loading a file of lines into a topic, one record per line with the line's own time (`chronolog produce`).

Every byte of a line is the record's value: only the `\\n` that ends it is removed. A `\\r` before it
stays, as kcat -P keeps it (Kafka's console producer drops it): a file with CRLF endings comes back
byte for byte. Blank lines are records (kcat skips them; --skip-blank does that and counts them).

The input moves in blocks, not lines. Where the C line scanner (`records/_lines.c`) reads the options
(no key, no time or the syslog prefix in UTC) a block is split and its times read there (a line without
one takes the time before it), and its lines go to the encoder as columns over the block itself
(`LineColumns`): no Python object per line. A block with lines to skip, lines before the first time or
a line without one under --require-time is read again the pure-Python way
below, which is also the path without the C extensions: the block split with bytes methods, its times
read with a cache per distinct prefix. Either way the records are encoded into whole record batches in C
(`records.encode`) and sent by an idempotent producer (`timetravel.batchsend`) that returns when the
broker has acknowledged them. Lines are counted done only then, so the Ctrl-C summary can print the
exact command that continues (`--skip-lines`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from array import array
from contextlib import contextmanager
from datetime import UTC
from itertools import accumulate, cycle
from operator import gt

from chronolog.errors import ChronologError
from chronolog.timetravel.linetime import LineReader
from chronolog.timetravel.timefmt import OrderCheck, format_time, now_ms

# Lines before the first readable time wait for it (they take its time); bounded so that a file with no
# readable time at all is refused before anything is sent.
MAX_WAITING = 100_000
BLOCK = 768 * 1024      # read at a time: with record overheads, one batch under librdkafka's 1,000,000 bytes
BATCH_BYTES = 1_000_000  # librdkafka's batch.size default, below the broker's message.max.bytes
NAMED = 5               # unreadable lines named in the summary; the rest are counted
# -X settings the batch path honours the way librdkafka would; any other one is sent through librdkafka
NATIVE_SETTINGS = frozenset({"bootstrap.servers", "logger", "client.id"})


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def retention_ms(conf: dict, topic: str) -> int | None:
    """The topic's retention.ms (None when it cannot be read): records older than it are deleted by the
    broker's next retention pass (Kafka deletes by record timestamp, KIP-32), so loading old logs into
    a topic with the default 7 days loses them a few minutes later."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource
    try:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        admin = AdminClient(conf)  # alive until the future resolves
        described = admin.describe_configs([resource])[resource].result(15)
        return int(described["retention.ms"].value)
    except (KafkaException, KeyError, ValueError, TypeError):
        return None


def headers(items: list[str]) -> list[tuple[bytes, bytes]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ChronologError(f"--header takes key=value, got {item!r}")
        out.append((key.encode(), value.encode()))
    return out


def open_input(file: str) -> tuple[object, int | None, str]:
    if file == "-":
        return sys.stdin.buffer, None, "stdin"
    if os.path.isdir(file):  # os.path, not pathlib: pathlib's import costs a load more than the check
        raise ChronologError(f"{file} is a folder: give a file, or - for stdin")
    try:
        return open(file, "rb"), os.path.getsize(file), os.path.basename(file)  # noqa: SIM115 (closed by the caller)
    except OSError as exc:
        raise ChronologError(f"cannot read {file}: {exc.strerror or exc}") from None


def _binary(items: list[bytes | None], nullable: bool = True) -> tuple:
    """The Arrow layout `records.encode` reads: (validity or None, int32 offsets, data, offset 0)."""
    valid = None
    if nullable and None in items:
        valid = bytearray((len(items) + 7) // 8)
        for i, item in enumerate(items):
            if item is not None:
                valid[i >> 3] |= 1 << (i & 7)
        items = [b"" if item is None else item for item in items]
    return valid, array("i", accumulate(map(len, items), initial=0)), b"".join(items), 0


class LineColumns:
    """The lines of a block as `_lines.scan` found them: line i of `lines` is block[offsets[i]:offsets[i +
    1] - 1] (int32 offsets), `times` int64 ms (or None), the layout `records.encode` reads without a copy;
    the records are the rows `kept` numbers (int64), or all of them. Its length is the records'."""

    __slots__ = ("block", "offsets", "times", "lines", "kept", "count")

    def __init__(self, block: bytes, offsets: bytes, times: bytes | None, lines: int, kept: bytes | None) -> None:
        self.block, self.offsets, self.times, self.lines, self.kept = block, offsets, times, lines, kept
        self.count = lines if kept is None else len(kept) // 8

    def __len__(self) -> int:
        return self.count


class BatchPath:
    """Whole record batches from a block's columns, sent by the idempotent batch producer."""

    def __init__(self, bootstrap: str, topic: str, headers: list[tuple[bytes, bytes]], partition: int | None) -> None:
        from chronolog.timetravel.batchsend import BatchSender
        self.sender = BatchSender(bootstrap, topic)
        self.partitions = self.sender.partitions
        self.partition = partition
        self.headers = headers
        self.sticky = cycle(self.partitions)  # keyless records: a block at a time to one partition (KIP-480)

    def send(self, keys: list[bytes | None] | None, values: list[bytes] | LineColumns,
             times: list[int] | None) -> None:
        from chronolog.records.encode import encode_batches
        n = len(values)  # rows of the columns, and records unless `where` picks some
        key = _binary(keys) if keys is not None else None
        where = None
        if isinstance(values, LineColumns):  # gap 1: each line's `\n` is left out
            value = (None, values.offsets, values.block, 0, 1)
            ts = (None, values.times, 0) if values.times is not None else None
            if values.kept is not None:
                where = (values.kept, 0, values.count)
            n = values.lines
        else:
            value = _binary(values, nullable=False)  # a line is never None
            ts = (None, array("q", times), 0) if times is not None else None
        hdr = None
        if self.headers:
            h = len(self.headers)
            hdr = (None, array("i", range(0, (n + 1) * h, h)), 0, _binary([k for k, _ in self.headers] * n),
                   _binary([v for _, v in self.headers] * n))
        now = now_ms()

        def encode(partition: int, rows: int, index=None) -> list[bytes]:
            return encode_batches(n, key, value, ts, hdr, now, BATCH_BYTES, index=index,
                                  producer=self.sender.producer(partition, rows))

        if self.partition is not None:
            batches = {self.partition: encode(self.partition, len(values), where)}
        elif keys is None or all(k is None or not k for k in keys):
            p = next(self.sticky)
            batches = {p: encode(p, len(values), where)}
        else:  # librdkafka's consistent_random: a key's partition by its CRC-32; no key: the sticky one
            from chronolog.native import load_native  # the column form of records.encode.key_partitions
            chosen = array("i", load_native("chronolog.records._encode", "key_partitions")(n, key, len(self.partitions)))
            rows: dict[int, array] = {}
            sticky = next(self.sticky)
            for i, p in enumerate(chosen):
                rows.setdefault(sticky if p < 0 else self.partitions[p], array("q")).append(i)
            batches = {p: encode(p, len(index), (index, 0, len(index))) for p, index in rows.items()}
        self.sender.send(batches)

    def retention_ms(self) -> int | None:
        value = self.sender.topic_config("retention.ms")
        return int(value) if value is not None and value.lstrip("-").isdigit() else None

    def close(self) -> None:
        self.sender.close()


class KafkaPath:
    """librdkafka, for settings the batch path does not honour (-X security.protocol=SSL ...): the same
    records, each block flushed before it counts as done."""

    def __init__(self, conf: dict, bootstrap: str, topic: str, headers: list[tuple[bytes, bytes]],
                 partition: int | None) -> None:
        from chronolog.timetravel.client import LOGGER, consumer_client, producer_client, topic_metadata
        conf = {"logger": LOGGER, **conf}  # librdkafka's lines go to logging (shown with -v), not to stderr
        self.producer = producer_client(conf, **{"linger.ms": 50, "enable.idempotence": True})
        probe = consumer_client(conf, **{"group.id": "chronolog-produce"})
        try:
            self.partitions = sorted(topic_metadata(probe, bootstrap, topic, 15).partitions)
        finally:
            probe.close()
        self.topic = topic
        self.partition = partition
        self.headers = [(k.decode(), v) for k, v in headers]
        self.failures: list[str] = []
        self.conf = conf

    def retention_ms(self) -> int | None:
        return retention_ms(self.conf, self.topic)

    def _delivered(self, err, _msg) -> None:
        if err is not None:
            self.failures.append(err.str())

    def send(self, keys: list[bytes | None] | None, values: list[bytes], times: list[int] | None) -> None:
        base: dict = {"on_delivery": self._delivered}
        if self.headers:
            base["headers"] = self.headers
        if self.partition is not None:
            base["partition"] = self.partition
        for i, value in enumerate(values):
            kwargs = {**base, "value": value}
            if keys is not None:
                kwargs["key"] = keys[i]
            if times is not None:
                kwargs["timestamp"] = times[i]
            while True:
                try:
                    self.producer.produce(self.topic, **kwargs)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    self.producer.poll(0.5)
        left = self.producer.flush(60)
        if left or self.failures:
            raise ChronologError(f"produce to {self.topic} failed: "
                                 f"{self.failures[0] if self.failures else f'{left} unsent'}")

    def close(self) -> None:
        self.producer.flush(5)


class Loader:
    """The lines of one input, block by block: what was sent and acknowledged, what could not be read."""

    def __init__(self, reader: LineReader, path, topic: str, name: str, skip: int, skip_blank: bool,
                 require_time: bool, retention: int | None) -> None:
        self.reader, self.path, self.topic, self.name = reader, path, topic, name
        self.skip_blank, self.require_time, self.retention = skip_blank, require_time, retention
        self.read = self.done = skip  # lines taken from the input / acknowledged, counted from its first line
        self.to_skip = self.to_skip_given = skip
        self.sent = self.blank = self.unreadable = 0
        self.named: list[tuple[int, bytes]] = []
        self.held: tuple[list, list] = ([], [])  # keys and values of the lines before the first readable time
        self.last_ts: int | None = None
        self.last_text: bytes | None = None
        self.oldest: int | None = None
        self.order = OrderCheck()
        self.warned = False
        # one block is sent (in this thread) while the next is read and encoded; `done` moves only when
        # a block is acknowledged, so a Ctrl-C at any moment leaves it exact once the block in flight ends
        self._in_flight: threading.Thread | None = None
        self._failed: BaseException | None = None
        self._waiting = self.stop = False

    def on_sigint(self, _signum, _frame) -> None:
        """Ctrl-C stops the reading at once (nothing of the block at hand has counted); while this thread
        waits for the block in flight it is noted and acted on once the wait is over: an interrupted
        Thread.join can take a running thread for finished (CPython 3.11), and the count would be short."""
        if self._waiting:
            self.stop = True
        else:
            raise KeyboardInterrupt

    def block(self, lines: list[bytes]) -> None:
        if self.to_skip:
            cut = min(self.to_skip, len(lines))
            self.to_skip -= cut
            lines = lines[cut:]
            if not lines:
                return
        first = self.read + 1
        self.read += len(lines)
        numbers = None
        blank = 0 if all(lines) else lines.count(b"")  # all(): a length test a line, no comparison
        self.blank += blank
        if blank and self.skip_blank:
            numbers = [first + i for i, line in enumerate(lines) if line]
            lines = [line for line in lines if line]
        keys, values = self.reader.keys_values(lines)
        try:
            self._records(keys, values, lines, numbers, first)
        except _Refused as refused:  # the lines before it go as any block's, then the load stops
            i = refused.index
            self._records(keys[:i] if keys is not None else None, values[:i], lines[:i], numbers, first,
                              refused.times[:i], refused.number - 1)
            self.finish()
            raise ChronologError(f"line {refused.number} of {self.name} has no readable time: "
                                 f"{_show(lines[i])!r}; {self.sent} record(s) before it are sent. "
                                 f"Continue after it with: {continue_command(refused.number)}") from None

    def scanned(self, block: bytes, found: tuple) -> None:
        """A block as `_lines.scan` read it (`found`, its times carried on from `carry()`) sent as columns;
        where a line needs what `block` does for it (lines to skip, lines before the first time, a line
        without a time under --require-time), the block's lines read the Python way."""
        count, consumed, offsets, times, blank, unreadable, named, lead, least, last, last_read, kept = found
        if self.to_skip or lead or self.held[1] or (unreadable and self.require_time):
            lines = block[:consumed].split(b"\n")
            if block[consumed - 1:consumed] == b"\n":
                lines.pop()
            self.block(lines)
            return
        first = self.read + 1
        self.read += count
        self.blank += blank
        columns = LineColumns(block, offsets, times, count, kept)
        if times is not None:
            ends = memoryview(offsets).cast("i")
            self.unreadable += unreadable
            for i in named[:NAMED - len(self.named)]:
                self.named.append((first + i, block[ends[i]:ends[i + 1] - 1]))
            if last_read >= 0:
                self.last_text = block[ends[last_read]:ends[last_read + 1] - 1]
            self.last_ts = last
            if len(columns):
                self._warn_retention(least)
        self._send(None, columns, None, self.read)

    def carry(self) -> int:
        """The time a block's first lines without one take (-1: none yet), for `_lines.scan`."""
        return -1 if self.last_ts is None else self.last_ts

    def _records(self, keys, values, lines, numbers, first: int, times: list | None = None,
                     done: int | None = None) -> None:
        """The records of a block (its times read, unless given), sent; `done` lines count as done then."""
        done = self.read if done is None else done
        if self.reader.timed:
            if times is None:
                times = self._fill(self.reader.times(values), values, lines, numbers, first)
            lead = next((i for i, ts in enumerate(times) if ts is not None), len(times))
            if lead:  # no readable time yet: these wait for the first one
                hk, hv = self.held
                if keys is not None:
                    hk += keys[:lead]
                hv += values[:lead]
                if len(hv) > MAX_WAITING:
                    raise ChronologError(f"no readable time in the first {MAX_WAITING} lines of {self.name}: "
                                         "nothing sent; check --time-field/--time-regex and --time-format")
                keys = keys[lead:] if keys is not None else None
                values, times = values[lead:], times[lead:]
                if not values:
                    return
            if self.held[1]:
                hk, hv = self.held
                keys = hk + keys if keys is not None else None
                times = [times[0]] * len(hv) + times
                values = hv + values
                self.held = ([], [])
            if times:
                self._warn_retention(min(times))
        self._send(keys, values, times, done)

    def _send(self, keys, values, times, done: int) -> None:
        """Send these records once the block before them is acknowledged; `done` lines count as done then."""
        self._waiting = True
        try:
            self.finish()
            self._in_flight = threading.Thread(target=self._deliver, args=(keys, values, times, done),
                                               name="chronolog-produce", daemon=True)
            self._in_flight.start()
        finally:
            self._waiting = False
        if self.stop:
            raise KeyboardInterrupt

    def _deliver(self, keys, values, times, done: int) -> None:
        try:
            if values:
                self.path.send(keys, values, times)
        except BaseException as exc:  # noqa: BLE001 (raised again in the reading thread, by finish)
            self._failed = exc
            return
        self.sent += len(values)
        self.done = done

    def finish(self) -> None:
        """Wait for the block in flight (a Ctrl-C meanwhile is noted, see on_sigint); raise its error."""
        waiting, self._waiting = self._waiting, True
        try:
            if self._in_flight is not None:
                self._in_flight.join()
        finally:
            self._waiting = waiting
        if self._failed is not None:
            raise self._failed

    def _fill(self, times: list, values: list[bytes], lines: list[bytes], numbers, first: int) -> list:
        """Lines without a readable time take the previous line's (None before the first: the caller holds
        them); they are named, or refused. Times that go back where the text goes forward are noted."""
        if None not in times:
            if self.reader.format.sortable and ((self.last_ts is not None and times and times[0] < self.last_ts)
                                                or any(map(gt, times, times[1:]))):
                self._check_order(times, values, numbers, first)
            if times:
                self.last_ts, self.last_text = times[-1], values[-1]
            return times
        out = list(times)
        for i, ts in enumerate(times):
            no = numbers[i] if numbers is not None else first + i
            if ts is None:
                if lines[i]:  # a blank line is counted as blank, not named
                    if self.require_time:
                        raise _Refused(i, no, out)
                    self.unreadable += 1
                    if len(self.named) < NAMED:
                        self.named.append((no, lines[i]))
                out[i] = self.last_ts
                continue
            if self.last_ts is not None and ts < self.last_ts and self.last_text is not None:
                self._see(no, self.last_text, values[i], self.last_ts, ts)
            self.last_ts, self.last_text = ts, values[i]
        return out

    def _see(self, no: int, before: bytes, value: bytes, before_ts: int, ts: int) -> None:
        if not self.reader.format.sortable:
            return
        self.order.see(no, self.reader.time_text(before) or b"", self.reader.time_text(value) or b"", before_ts, ts)

    def _check_order(self, times: list[int], values: list[bytes], numbers, first: int) -> None:
        prev_ts, prev_value = self.last_ts, self.last_text
        for i, ts in enumerate(times):
            if prev_ts is not None and ts < prev_ts and prev_value is not None:
                self._see(numbers[i] if numbers is not None else first + i, prev_value, values[i], prev_ts, ts)
            prev_ts, prev_value = ts, values[i]

    def _warn_retention(self, oldest: int) -> None:
        self.oldest = oldest if self.oldest is None else min(self.oldest, oldest)
        r = self.retention
        if r is not None and r >= 0 and not self.warned and oldest < now_ms() - r:
            self.warned = True
            _say(f"chronolog: warning: {self.topic}: a record from {format_time(oldest)} is older than the "
                 f"topic's retention.ms={r}; the broker deletes such records on its next retention check. "
                 f"Keep them: chronolog topics alter {self.topic} -c retention.ms=-1")


class _Refused(Exception):
    """A line without a readable time under --require-time."""

    def __init__(self, index: int, number: int, times: list) -> None:
        super().__init__(number)
        self.index, self.number, self.times = index, number, times


def _show(line: bytes, width: int = 80) -> str:
    text = line.decode("utf-8", "backslashreplace")
    return text if len(text) <= width else text[:width] + "..."


def continue_command(skip: int, argv: list[str] | None = None) -> str:
    """This command line (`argv`, default this process's) again with --skip-lines `skip`: what continues
    an interrupted load."""
    args = list(sys.argv[1:] if argv is None else argv)
    out = []
    i = 0
    while i < len(args):
        if args[i] == "--skip-lines":
            i += 2
            continue
        if args[i].startswith("--skip-lines="):
            i += 1
            continue
        out.append(args[i])
        i += 1
    import shlex
    return shlex.join(["chronolog", *out, "--skip-lines", str(skip)])


def blocks(stream, tick=None):
    """Lists of whole lines (the `\\n` removed, nothing else); a last line without `\\n` is a line. A chunk
    is split as read (no copy of it joined to the tail before it: only the first line takes the tail)."""
    tail = b""
    read = getattr(stream, "read1", stream.read)
    while True:
        chunk = read(BLOCK)
        if not chunk:
            break
        if tick is not None:
            tick(len(chunk))
        lines = chunk.split(b"\n")
        if tail:
            lines[0] = tail + lines[0]
        tail = lines.pop()
        if lines:
            yield lines
    if tail:
        yield [tail]


def scanned(stream, scan, year: int, carry=lambda: -1, tick=None, skip_blank: bool = False):
    """(block, what `scan` found in it) for blocks of whole lines: `blocks` done by `records/_lines.c`,
    each block's times carried on from `carry()` (called once the block before is handled). Only the
    line that runs over a chunk's end is copied (to the next block's start)."""
    tail = b""
    read = getattr(stream, "read1", stream.read)
    while True:
        chunk = read(BLOCK)
        if tick is not None and chunk:
            tick(len(chunk))
        eof = not chunk
        if tail:
            chunk = tail + chunk
        found = scan(chunk, eof, year, carry(), skip_blank)
        tail = chunk[found[1]:]
        if found[0]:
            yield chunk, found
        if eof:
            return


def _scanner(reader: LineReader, path) -> tuple | None:
    """(`_lines.scan`, year or 0) where it reads these options' lines as `LineReader` does, else None."""
    if not isinstance(path, BatchPath) or reader.keyed:
        return None
    year = 0
    if reader.timed:
        fmt = reader.format
        if not reader.syslog_prefix or fmt.zone is not UTC or fmt.year is None or not 1970 <= fmt.year <= 9999 \
                or fmt.sortable:  # (syslog's month names are not: no order check to make)
            return None
        year = fmt.year
    from chronolog.native import load_native
    scan = load_native("chronolog.records._lines", "scan")
    return (scan, year) if scan is not None else None


def load(topic: str, file: str, conf: dict, *, time_field: str | None = None, time_regex: str | None = None,
         time_format: str | None = None, year: int | None = None, timezone: str | None = None,
         field_separator: str | None = None, key_field: str | None = None, key_separator: str | None = None,
         header: list[str] = (), partition: int | None = None, skip_lines: int = 0, skip_blank: bool = False,
         require_time: bool = False, progress=None) -> int:
    """`chronolog produce`: the lines of `file` (or - for stdin) into `topic`, the summary on stderr.
    Returns the exit code (130 after a Ctrl-C); raises ChronologError for what cannot be done.
    `progress(name, size)` is a context manager giving a tick(bytes) callable, or None."""
    bootstrap_server = conf["bootstrap.servers"]
    if progress is None:
        progress = _no_progress
    from chronolog.records.encode import AVAILABLE
    reader = LineReader(time_field=time_field, time_regex=time_regex, time_format=time_format, year=year,
                        timezone=timezone, key_field=key_field, key_separator=key_separator,
                        field_separator=field_separator)
    hdrs = headers(header)
    try:
        if AVAILABLE and set(conf) <= NATIVE_SETTINGS:
            path = BatchPath(bootstrap_server, topic, hdrs, partition)
        else:
            path = KafkaPath(conf, bootstrap_server, topic, hdrs, partition)
    except ChronologError as exc:
        if "not found" not in str(exc):
            raise
        raise ChronologError(f"{exc}: create it first (chronolog topics create {topic} -c retention.ms=-1 "
                             "keeps old records)") from None
    try:
        if partition is not None and partition not in path.partitions:
            raise ChronologError(f"topic {topic!r} has no partition {partition} (it has {len(path.partitions)})")
        retention = path.retention_ms() if reader.timed else None
        stream, size, name = open_input(file)
        run = Loader(reader, path, topic, name, skip_lines, skip_blank, require_time, retention)
        interrupted = False
        main = threading.current_thread() is threading.main_thread()  # only there can a handler be set
        previous = signal.signal(signal.SIGINT, run.on_sigint) if main else None
        try:
            fast = _scanner(reader, path)
            with progress(name, size) as tick:
                if fast is not None:
                    for block, found in scanned(stream, *fast, run.carry, tick, skip_blank):
                        run.scanned(block, found)
                else:
                    for lines in blocks(stream, tick):
                        run.block(lines)
        except KeyboardInterrupt:  # what was acknowledged is counted; exit 130 as a shell expects
            interrupted = True
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
            try:
                run.finish()
            finally:
                if main:
                    signal.signal(signal.SIGINT, previous)
    finally:
        path.close()
    if reader.timed and run.held[1] and not interrupted:
        raise ChronologError(f"no line of {name} has a readable time ({len(run.held[1])} lines): nothing sent; "
                             "check --time-field/--time-regex and --time-format")
    _summary(run, reader, name, topic, interrupted)
    return 130 if interrupted else 0


@contextmanager
def _no_progress(_name: str, _size: int | None):
    yield None


def _summary(run: Loader, reader: LineReader, name: str, topic: str, interrupted: bool) -> None:
    fmt = reader.format
    if fmt is not None and fmt.seconds_as_ms is not None:
        text = fmt.seconds_as_ms
        _say(f"chronolog: warning: {text} was read as epoch milliseconds ({format_time(int(text))}); as "
             f"epoch seconds it is {format_time(int(text) * 1000)}: use --time-format epoch_s for that")
    if run.order.first is not None:
        no, before, text = run.order.first
        _say(f"chronolog: warning: times go back {run.order.count} time(s) where the text goes forward, first "
             f"at line {no} ({text!r} read as earlier than {before!r} before it): is --time-format "
             f"{fmt.spec!r} how these lines write their time?")
    parts = []
    if run.unreadable:
        shown = ", ".join(f"line {no}: {_show(text, 60)!r}" for no, text in run.named)
        more = run.unreadable - len(run.named)
        parts.append(f"{run.unreadable} line(s) without a readable time took the previous line's time ({shown}"
                     + (f", and {more} more" if more else "") + ")")
    if run.blank:
        parts.append(f"{run.blank} blank line(s) " + ("skipped" if run.skip_blank else "sent as empty records"))
    since = f", oldest record time {format_time(run.oldest)}" if run.oldest is not None else ""
    skipped = f" after skipping {run.to_skip_given} line(s)" if run.to_skip_given else ""
    _say(f"produced {run.sent} record(s) from {name} to {topic}{skipped}{since}"
         + (f"; {'; '.join(parts)}" if parts else "") + (" before Ctrl-C" if interrupted else ""))
    if interrupted:
        _say(f"chronolog: {run.done} line(s) of {name} are done; continue with: "
             f"{continue_command(run.done)}")
