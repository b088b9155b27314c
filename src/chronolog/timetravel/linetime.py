"""Reading each line's own time, key and value for `chronolog produce`: the time a log line carries is
what a replay by time must find, so it becomes the record's CreateTime (KIP-32).

A `LineReader` is built once from the options and applied to every line; it never raises on a line it
cannot read (that is counted by the caller), only on options that cannot work.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from chronolog.errors import ChronologError
from chronolog.timetravel.timefmt import MAX_TIME_MS

EPOCH_UNITS = {"epoch_s": 1000, "epoch_ms": 1, "epoch_us": 0.001, "epoch_ns": 0.000001}
SYSLOG_REGEX = r"^(?P<time>[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2})\s"
SYSLOG_FORMAT = "%b %d %H:%M:%S"
FORMATS_HELP = ("iso (ISO-8601), epoch_s, epoch_ms, epoch_us, epoch_ns, syslog (Jun 14 15:16:01, with --year), "
                "or a strptime format such as '%d/%b/%Y:%H:%M:%S %z'")


@dataclass(frozen=True)
class Field:
    """A field of a line: 1-based numbers `N` or `N-M` (as `cut -f`) split by a separator (None: runs of
    whitespace), or a name in a JSON object line."""

    spec: str
    separator: str | None

    @property
    def is_name(self) -> bool:
        return not re.fullmatch(r"\d+(-\d+)?", self.spec)

    def check(self, option: str) -> None:
        if not self.is_name:
            lo, _, hi = self.spec.partition("-")
            if int(lo) < 1 or (hi and int(hi) < int(lo)):
                raise ChronologError(f"{option} {self.spec}: fields are numbered from 1 (N or N-M with M >= N)")

    def get(self, line: str, obj: dict | None) -> str | None:
        if self.is_name:
            if obj is None:
                return None
            value = obj
            for part in self.spec.split("."):  # a.b for nested objects
                if not isinstance(value, dict) or part not in value:
                    return None
                value = value[part]
            return None if value is None else str(value)
        parts = line.split(self.separator) if self.separator is not None else line.split()
        lo, _, hi = self.spec.partition("-")
        a, b = int(lo), int(hi or lo)
        if len(parts) < b:
            return None
        sep = self.separator if self.separator is not None else " "
        return sep.join(parts[a - 1:b])


class TimeParser:
    """Text -> epoch ms by one format; None when the text is not such a time."""

    def __init__(self, fmt: str, year: int | None, zone: tzinfo) -> None:
        self.fmt = fmt
        self.zone = zone
        self.year = year
        if fmt == "syslog":
            fmt = SYSLOG_FORMAT
        self.strptime = fmt if "%" in fmt else None
        self.prefix = ""
        self.seconds_as_ms: str | None = None  # the first 10-digit value read as epoch_ms (a likely mistake)
        if self.strptime is None and fmt not in EPOCH_UNITS and fmt != "iso":
            raise ChronologError(f"--time-format {fmt!r}: use {FORMATS_HELP}")
        if self.strptime is not None and not re.search(r"%[Yycxs]", self.strptime):
            if year is None:
                raise ChronologError(f"--time-format {fmt!r} has no year: give --year (syslog lines carry none)")
            self.strptime = "%Y " + self.strptime  # parsed with the year in front: 29 Feb works
            self.prefix = f"{year} "
        elif year is not None and self.strptime is None:
            raise ChronologError("--year is for a time format without a year (syslog or a strptime format)")

    def __call__(self, text: str) -> int | None:
        text = text.strip()
        if not text:
            return None
        try:
            if self.fmt in EPOCH_UNITS:
                ms = int(float(text) * 1000) if self.fmt == "epoch_s" else int(int(text) * EPOCH_UNITS[self.fmt])
                if self.fmt == "epoch_ms" and self.seconds_as_ms is None and re.fullmatch(r"\d{10}", text):
                    self.seconds_as_ms = text
            else:
                if self.strptime is not None:
                    dt = datetime.strptime(self.prefix + text, self.strptime)
                else:
                    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
                if dt.tzinfo is None:
                    dt = dt.replace(tzinfo=self.zone)
                ms = int(dt.timestamp() * 1000)
        except (ValueError, OverflowError):
            return None
        return ms if 0 <= ms <= MAX_TIME_MS else None


@dataclass
class Parsed:
    key: bytes | None
    value: bytes
    timestamp: int | None  # None: no readable time on this line


class LineReader:
    """Key, value and time of one line, as the options say."""

    def __init__(self, *, time_field: str | None, time_regex: str | None, time_format: str | None,
                 year: int | None, timezone: str | None, key_field: str | None, key_separator: str | None,
                 field_separator: str | None) -> None:
        zone = _zone(timezone)
        if time_format == "syslog" and time_field is None and time_regex is None:
            time_regex = SYSLOG_REGEX
        if time_field is not None and time_regex is not None:
            raise ChronologError("give --time-field or --time-regex, not both")
        if (time_format is not None or year is not None or timezone is not None) and \
                time_field is None and time_regex is None:
            raise ChronologError("--time-format/--year/--timezone need --time-field or --time-regex (where the "
                                 "time is on the line)")
        if key_field is not None and key_separator is not None:
            raise ChronologError("give --key-field or --key-separator, not both")
        self.time_field = Field(time_field, field_separator) if time_field is not None else None
        self.key_field = Field(key_field, field_separator) if key_field is not None else None
        for f, opt in ((self.time_field, "--time-field"), (self.key_field, "--key-field")):
            if f is not None:
                f.check(opt)
        self.key_separator = key_separator
        self.regex = None
        if time_regex is not None:
            try:
                self.regex = re.compile(time_regex)
            except re.error as exc:
                raise ChronologError(f"--time-regex {time_regex!r}: {exc}") from None
            if "time" not in self.regex.groupindex and self.regex.groups < 1:
                raise ChronologError("--time-regex needs a group around the time: (?P<time>...) or (...)")
        self.timed = self.time_field is not None or self.regex is not None
        self.parse_time = TimeParser(time_format or "iso", year, zone) if self.timed else None
        self.json = any(f is not None and f.is_name for f in (self.time_field, self.key_field))

    def __call__(self, line: str) -> Parsed:
        key = None
        value = line
        if self.key_separator is not None:
            k, sep, rest = line.partition(self.key_separator)
            if sep:
                key, value = k.encode(), rest
        obj = None
        if self.json:
            try:
                loaded = json.loads(value)
                obj = loaded if isinstance(loaded, dict) else None
            except ValueError:
                obj = None
        if self.key_field is not None:
            k = self.key_field.get(value, obj)
            key = k.encode() if k is not None else None
        ts = None
        if self.timed:
            text = None
            if self.time_field is not None:
                text = self.time_field.get(value, obj)
            else:
                m = self.regex.search(value)
                if m:
                    text = m.group("time") if "time" in self.regex.groupindex else m.group(1)
            ts = self.parse_time(text) if text is not None else None
        return Parsed(key, value.encode(), ts)


def _zone(name: str | None) -> tzinfo:
    if name is None or name.upper() in ("UTC", "Z"):
        return UTC
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ChronologError(f"--timezone {name!r}: not a zone name such as UTC or Europe/Paris") from None
