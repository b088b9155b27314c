"""Human time at the edges: parse what people type, print ISO-8601 UTC. Inside, times are epoch ms.

`TimeFormat` is the one way a time *format* is named, shared by `chronolog produce`, the pipeline, the
console and `--from/--to`: `TimeFormat(spec).read(text) -> epoch ms | None`. A spec is `iso`, `syslog`,
`epoch_s`/`epoch_ms`/`epoch_us`/`epoch_ns`, a strptime format (`%d/%b/%Y:%H:%M:%S %z`) or a Java
DateTimeFormatter pattern (`yyyyMMdd-HH:mm:ss:SSS`); see `FORMATS_HELP` and the module `timepattern`.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta, timezone, tzinfo

from chronolog.errors import ChronologError


class TimeFormatError(ChronologError):
    """Text that is not a time or a duration we understand."""


_RELATIVE = re.compile(r"^\s*(?:-\s*(\d+(?:\.\d+)?)\s*([a-z]+)|(\d+(?:\.\d+)?)\s*([a-z]+)\s+ago)\s*$", re.I)
_UNITS = {"ms": 1, "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
          "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
          "h": 3_600_000, "hr": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
          "d": 86_400_000, "day": 86_400_000, "days": 86_400_000, "w": 604_800_000, "week": 604_800_000,
          "weeks": 604_800_000}
_DURATION = re.compile(r"^(-)?P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.I)


# Kafka timestamps are ms since the epoch; the tools print them as ISO-8601 dates, which end at year 9999.
MAX_TIME_MS = 253_402_300_799_999


def now_ms() -> int:
    return int(time.time() * 1000)


def parse_time(text: str, now: int | None = None, fmt: TimeFormat | str | None = None) -> int:
    """ISO-8601 (a time without a zone is UTC), epoch milliseconds, `now`, or relative (`2h ago`, `-90m`);
    with `fmt` (a TimeFormat or its spec) also a time written in that format, as the log writes it."""
    raw = str(text).strip()
    now = now_ms() if now is None else now
    if not raw:
        raise TimeFormatError("empty time")
    if raw.lower() == "now":
        return now
    if fmt is not None and not _RELATIVE.match(raw):
        ms = (fmt if isinstance(fmt, TimeFormat) else TimeFormat(fmt)).read(raw)
        if ms is not None:
            return ms
    if re.fullmatch(r"-?\d{10,}", raw):
        ms = _in_range(int(raw), text)
        if len(raw) == 10:
            import logging  # here: `consume --format raw` starts without it

            logging.getLogger("chronolog.time").warning(
                "%s read as epoch milliseconds (%s); as epoch seconds it would be %s: give %s000 for that",
                raw, format_time(ms), format_time(ms * 1000), raw)
        return ms
    m = _RELATIVE.match(raw)
    if m:
        amount, unit = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if unit.lower() not in _UNITS:
            raise TimeFormatError(f"unknown time unit {unit!r} in {text!r}")
        return _in_range(now - int(float(amount) * _UNITS[unit.lower()]), text)
    try:
        dt = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except (ValueError, OverflowError):
        raise TimeFormatError(f"cannot read {text!r} as a time: use ISO-8601 (2024-06-14T15:00:00Z; no zone means "
                              "UTC), epoch milliseconds, or a relative time such as '2h ago' or '-90m'") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        return _in_range(int(dt.timestamp() * 1000), text)
    except (OverflowError, ValueError):
        raise TimeFormatError(f"{text!r} is out of range for a record timestamp") from None


def _in_range(ms: int, text: str) -> int:
    """Record timestamps are non-negative epoch ms (Kafka's -1 means none); a time before 1970 or after
    year 9999 is a typo, not a place in a log."""
    if ms < 0:
        raise TimeFormatError(f"{str(text).strip()!r} is before 1970-01-01T00:00:00Z: record timestamps are "
                              "milliseconds since then")
    if ms > MAX_TIME_MS:
        raise TimeFormatError(f"{str(text).strip()!r} is after year 9999: give epoch milliseconds "
                              "(13 digits today) or an ISO-8601 time")
    return ms


def parse_duration(text: str) -> int:
    """Kafka's `--by-duration` format `PnDTnHnMnS` (as kafka-consumer-groups.sh), in milliseconds."""
    m = _DURATION.match(str(text).strip())
    if not m or not any(m.group(i) for i in range(2, 6)):
        raise TimeFormatError(f"cannot read {text!r} as a duration: use PnDTnHnMnS, e.g. PT2H or P1DT30M")
    days, hours, minutes, seconds = (float(m.group(i) or 0) for i in range(2, 6))
    ms = int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)
    return -ms if m.group(1) else ms


def format_time(ms: int | None) -> str:
    """ISO-8601 UTC with milliseconds; `-` for no time (-1 / None)."""
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# -- time formats: how a log line writes its time ------------------------------------------------------------

EPOCH_FORMATS = {"epoch_s": 1000, "epoch_ms": 1, "epoch_us": -1000, "epoch_ns": -1_000_000}  # <0: divide
SYSLOG_PATTERN = "%b %d %H:%M:%S"
FORMATS_HELP = ("iso (ISO-8601), syslog (Jun 14 15:16:01, with --year), epoch_s, epoch_ms, epoch_us, epoch_ns, "
                "a strptime format such as '%d/%b/%Y:%H:%M:%S %z', or a Java pattern such as "
                "'yyyyMMdd-HH:mm:ss:SSS' (numbers may be unpadded; SSS counts milliseconds, so :11 is 11 ms)")
_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                                       "dec"), start=1)}
_FULL_MONTHS = {m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july", "august",
                                            "september", "october", "november", "december"), start=1)}
_OFFSET = r"Z|z|[+-]\d{2}(?::?\d{2})?"
# strptime directive -> (group name, regex). Numbers take 1-2 digits as Python's strptime does, so unpadded
# days, hours and minutes read right; %f is a decimal fraction (.5 is 500 ms), as in Python.
_STRPTIME = {"Y": ("Y", r"\d{4}"), "y": ("y", r"\d{2}"), "m": ("m", r"\d{1,2}"), "d": ("d", r"\d{1,2}"),
             "e": ("d", r"\d{1,2}"), "b": ("b", r"[A-Za-z]{3}"), "h": ("b", r"[A-Za-z]{3}"),
             "B": ("B", r"[A-Za-z]{3,9}"), "H": ("H", r"\d{1,2}"), "I": ("I", r"\d{1,2}"), "p": ("p", r"[AaPp][Mm]"),
             "M": ("M", r"\d{1,2}"), "S": ("S", r"\d{1,2}"), "f": ("f", r"\d{1,9}"), "j": ("j", r"\d{1,3}"),
             "z": ("z", _OFFSET), "Z": ("Z", r"UTC|GMT|Z"), "a": (None, r"[A-Za-z]{3}"),
             "A": (None, r"[A-Za-z]{6,9}"), "s": ("s", r"\d{1,12}")}
_STRPTIME_ALIASES = {"T": "%H:%M:%S", "F": "%Y-%m-%d", "D": "%m/%d/%y", "R": "%H:%M"}
# Java DateTimeFormatter letters (runs of one letter) -> strptime directive. S runs of 3, 6 and 9 are counts of
# milli-, micro- and nanoseconds (HealthApp writes 11 ms as ":11"); other runs of S are decimal fractions.
_JAVA = {"yyyy": "Y", "uuuu": "Y", "yy": "y", "uu": "y", "MMMM": "B", "MMM": "b", "MM": "m", "M": "m", "dd": "d",
         "d": "d", "HH": "H", "H": "H", "hh": "I", "h": "I", "a": "p", "mm": "M", "m": "M", "ss": "S", "s": "S",
         "DDD": "j", "D": "j", "EEE": "a", "E": "a", "EEEE": "A", "XXX": "z", "XX": "z", "X": "z", "xxx": "z",
         "xx": "z", "Z": "z", "ZZZZZ": "z", "z": "Z", "zzz": "Z"}


_RANK = {"Y": 0, "y": 0, "s": 0, "m": 1, "d": 2, "j": 2, "H": 3, "M": 4, "S": 5, "f": 6}


class TimeFormat:
    """Text -> epoch ms by one format spec (see FORMATS_HELP); `read` gives None for text that is not such a
    time (it never raises on a line); the constructor raises TimeFormatError for a spec that cannot work.

    A format without a year needs `year`; a time without a zone is in `zone` (default UTC). Reading is
    cached by the text up to its seconds, so a file of many lines per second parses each second once."""

    def __init__(self, spec: str = "iso", year: int | None = None, zone: tzinfo | str | None = None) -> None:
        self.spec = spec
        self.year = year
        self.zone = zone_of(zone) if not isinstance(zone, tzinfo) else zone
        self.seconds_as_ms: str | None = None  # the first 10-digit value read as epoch_ms (a likely mistake)
        self.epoch = EPOCH_FORMATS.get(spec)
        self._regex: re.Pattern | None = None
        self._fraction: tuple[str, int] | None = None  # ("fraction", digits) or ("count", digits per second)
        self._seconds: dict[str, int | None] = {}
        # whether the text sorts as the time does (fields from the year down, no zone or month names), with
        # its numbers compared as numbers: where it does, a time that goes back while the text goes forward
        # is a misread (OrderCheck)
        self.sortable = True
        self._by_minute = False
        if self.epoch is not None or spec == "iso":
            if year is not None:
                raise TimeFormatError(f"a year is for a time format without one (syslog, a pattern), not {spec}")
            return
        pattern = SYSLOG_PATTERN if spec == "syslog" else spec if "%" in spec else _java_to_strptime(spec)
        self._regex, self._fraction = _compile(pattern, spec)
        groups = self._regex.groupindex
        # a time whose seconds are their own field before any fraction and after every other field but the
        # zone is cached by minute (the seconds are added to it); otherwise by second
        order = sorted(groups, key=groups.get)
        self._by_minute = "S" in order and all(g in ("f", "z", "Z") for g in order[order.index("S") + 1:])
        ranks = [_RANK.get(name) for name in order]
        self.sortable = None not in ranks and ranks == sorted(set(ranks))
        if not ({"Y", "y", "s"} & set(groups)):
            if year is None:
                raise TimeFormatError(f"time format {spec!r} has no year: give the year (syslog lines carry none)")
        elif year is not None:
            raise TimeFormatError(f"time format {spec!r} has its own year: do not give one")

    def read(self, text: str | bytes | None) -> int | None:
        """The time `text` writes, in epoch ms; None when it is not one in this format (or out of range)."""
        if text is None:
            return None
        if isinstance(text, bytes | bytearray | memoryview):
            text = bytes(text).decode("latin-1")  # times are ASCII; any other byte fails the match below
        text = text.strip()
        if not text:
            return None
        try:
            if self.epoch is not None:
                ms = self._read_epoch(text)
            elif self._regex is None:
                dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
                if dt.tzinfo is None:
                    dt = dt.replace(tzinfo=self.zone)
                ms = _epoch_ms(dt)
            else:
                ms = self._read_pattern(text)
        except (ValueError, OverflowError):
            return None
        return ms if ms is not None and 0 <= ms <= MAX_TIME_MS else None

    def _read_epoch(self, text: str) -> int | None:
        if self.spec == "epoch_s":
            whole, _, frac = text.partition(".")
            if not whole.isdigit() or (frac and not frac.isdigit()):
                return None
            return int(whole) * 1000 + int((frac + "000")[:3] or 0)
        if not text.isdigit():
            return None
        if self.spec == "epoch_ms" and self.seconds_as_ms is None and len(text) == 10:
            self.seconds_as_ms = text
        return int(text) * self.epoch if self.epoch > 0 else int(text) // -self.epoch

    def _read_pattern(self, text: str) -> int | None:
        m = self._regex.fullmatch(text)
        if m is None:
            return None
        extra = 0
        key = text
        if self._fraction is not None:
            digits = m.group("f")
            kind, scale = self._fraction
            if kind == "count":  # a number of 1/scale seconds, unpadded
                extra = int(digits) * 1000 // scale
            else:
                extra = int((digits + "000")[:3])
            key = text[:m.start("f")] + "\0" + text[m.end("f"):]
        if self._by_minute:  # the seconds too are added, not looked up: one lookup per minute of the log
            seconds = int(m.group("S"))
            if seconds > 59:
                return None
            extra += seconds * 1000
            key = key[:m.start("S")] + "\0" + key[m.end("S"):]  # S is before f: its place in key is as in text
        base = self._seconds.get(key, -1)
        if base == -1:
            fields = m.groupdict()
            if self._by_minute:
                fields["S"] = None
            base = self._base_ms(fields)
            if len(self._seconds) > 100_000:
                self._seconds.clear()
            self._seconds[key] = base
        return None if base is None else base + extra

    def _base_ms(self, g: dict) -> int | None:
        """The ms of the whole seconds the fields write (None: no such date)."""
        if g.get("s") is not None:
            return int(g["s"]) * 1000
        if g.get("Y") is not None:
            year = int(g["Y"])
        elif g.get("y") is not None:
            year = int(g["y"]) + (1900 if int(g["y"]) >= 69 else 2000)  # as strptime's %y
        else:
            year = self.year
        if g.get("b") is not None:
            month = _MONTHS.get(g["b"].lower())
        elif g.get("B") is not None:
            month = _FULL_MONTHS.get(g["B"].lower()) or _MONTHS.get(g["B"].lower())
        else:
            month = int(g.get("m") or 1)
        if month is None:
            return None
        hour = int(g.get("H") or 0)
        if g.get("I") is not None:
            hour = int(g["I"]) % 12 + (12 if (g.get("p") or "a").lower().startswith("p") else 0)
        zone = self.zone
        if g.get("z") is not None:
            zone = _offset(g["z"])
        elif g.get("Z") is not None:
            zone = UTC
        try:
            if g.get("j") is not None:
                dt = datetime(year, 1, 1, tzinfo=zone) + timedelta(days=int(g["j"]) - 1)
                dt = dt.replace(hour=hour, minute=int(g.get("M") or 0), second=int(g.get("S") or 0))
            else:
                dt = datetime(year, month, int(g.get("d") or 1), hour, int(g.get("M") or 0), int(g.get("S") or 0),
                              tzinfo=zone)
        except ValueError:
            return None
        return _epoch_ms(dt)


def _epoch_ms(dt: datetime) -> int:
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _offset(text: str) -> tzinfo:
    if text in ("Z", "z"):
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0)))


def _compile(pattern: str, spec: str) -> tuple[re.Pattern, tuple[str, int] | None]:
    """A strptime pattern (with our extension `%<n>L`: a count of 1/10^n seconds) as one regex of named
    groups; whitespace matches any run of whitespace, as in strptime."""
    out: list[str] = []
    seen: set[str] = set()
    fraction = None
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%" and i + 1 < len(pattern):
            d = pattern[i + 1]
            i += 2
            if d == "%":
                out.append("%")
                continue
            if d in _STRPTIME_ALIASES:
                sub, frac = _compile(_STRPTIME_ALIASES[d], spec)
                out.append(sub.pattern)
                seen.update(sub.groupindex)
                continue
            if d.isdigit() and pattern[i:i + 1] == "L":  # %3L: milliseconds as a number (1-3 digits)
                n = int(d)
                i += 1
                name, rx, fraction = "f", rf"\d{{1,{n}}}", ("count", 10 ** n)
            elif d in _STRPTIME:
                name, rx = _STRPTIME[d]
                if d == "f":
                    fraction = ("fraction", 9)
            else:
                raise TimeFormatError(f"time format {spec!r}: %{d} is not a strptime directive this reads")
            if name is None:
                out.append(f"(?:{rx})")
            elif name in seen:
                raise TimeFormatError(f"time format {spec!r} gives the same field twice (%{d})")
            else:
                seen.add(name)
                out.append(f"(?P<{name}>{rx})")
        elif c.isspace():
            while i < len(pattern) and pattern[i].isspace():
                i += 1
            out.append(r"\s+")
        else:
            out.append(re.escape(c))
            i += 1
    if not seen & {"Y", "y", "m", "b", "B", "d", "j", "H", "I", "M", "S", "s"}:
        raise TimeFormatError(f"time format {spec!r}: use {FORMATS_HELP}")
    return re.compile("".join(out)), fraction


def _java_to_strptime(spec: str) -> str:
    """A Java DateTimeFormatter pattern as the strptime pattern above ('text' quotes literals)."""
    out: list[str] = []
    i = 0
    while i < len(spec):
        c = spec[i]
        if c == "'":
            end = spec.find("'", i + 1)
            if end < 0:
                raise TimeFormatError(f"time format {spec!r}: a quote is not closed")
            out.append("'" if end == i + 1 else spec[i + 1:end].replace("%", "%%"))
            i = end + 1
            continue
        if not c.isascii() or not c.isalpha():
            out.append("%%" if c == "%" else c)
            i += 1
            continue
        j = i
        while j < len(spec) and spec[j] == c:
            j += 1
        run = spec[i:j]
        i = j
        if c == "S":
            n = len(run)
            out.append(f"%{n}L" if n in (3, 6, 9) else "%f")
        elif run in _JAVA:
            out.append("%" + _JAVA[run])
        else:
            raise TimeFormatError(f"time format {spec!r}: {run!r} is not a pattern letter this reads; use "
                                  f"{FORMATS_HELP}")
    return "".join(out)


def zone_of(name: str | None) -> tzinfo:
    """A zone by name (None or UTC: UTC)."""
    if name is None or name.upper() in ("UTC", "Z"):
        return UTC
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise TimeFormatError(f"time zone {name!r}: not a zone name such as UTC or Europe/Paris") from None


class OrderCheck:
    """Warns of a format that misreads: times that go backwards where the text goes forwards. The text is
    compared with its numbers as numbers (":99" before ":100"), so a time read under the wrong format
    (110 ms read from ":11" that means 11 ms) shows where the file itself is in order."""

    def __init__(self) -> None:
        self.count = 0
        self.first: tuple[int, str, str] | None = None  # (line number, text before, text)

    def see(self, line_no: int, before: str | bytes, text: str | bytes, before_ms: int, ms: int) -> None:
        """Two times in a row: `ms` (of line `line_no`, written `text`) after `before_ms` (written `before`)."""
        if ms < before_ms and _sorted(before, text):
            self.count += 1
            if self.first is None:
                self.first = (line_no, _str(before).strip(), _str(text).strip())


def _str(text: str | bytes) -> str:
    return text.decode("latin-1") if isinstance(text, bytes) else text


def _sorted(before: str | bytes, after: str | bytes) -> bool:
    """Whether `after` comes at or after `before` with the numbers in them compared as numbers."""
    def key(text: str | bytes) -> list:
        return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", _str(text).strip()) if p]
    try:
        return key(after) >= key(before)
    except TypeError:  # a number where the other has a word: not the same shape, no order to compare
        return False
