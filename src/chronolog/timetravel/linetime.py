"""Reading each line's own time and key for `chronolog produce`: the time a log line carries is what a
replay by time must find, so it becomes the record's CreateTime (KIP-32).

Lines are bytes and stay bytes: the record's value is the line exactly as the file has it (invalid UTF-8,
NUL bytes and all). A `LineReader` is built once from the options and applied to a block of lines at a
time; it never raises on a line it cannot read (the caller names those), only on options that cannot work.
"""

from __future__ import annotations

import re
from operator import itemgetter

from chronolog.errors import ChronologError
from chronolog.timetravel.timefmt import EPOCH_FORMATS, FORMATS_HELP, TimeFormat, TimeFormatError, zone_of

SYSLOG_REGEX = rb"^(?P<time>[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2})\s"
_SYSLOG_PREFIX = 16  # "Jun 14 15:16:01 ": a syslog line's time is read once per distinct prefix
_UNCACHED = object()
_PREFIX = itemgetter(slice(0, _SYSLOG_PREFIX))

__all__ = ["FORMATS_HELP", "LineReader", "SYSLOG_REGEX"]


class Field:
    """A field of a line: 1-based numbers `N` or `N-M` (as `cut -f`) split by a separator (None: runs of
    whitespace), or a name in a JSON object line. (A plain class: `dataclasses` costs a produce's start
    more than its lines take.)"""

    __slots__ = ("spec", "separator")

    def __init__(self, spec: str, separator: bytes | None) -> None:
        self.spec, self.separator = spec, separator

    @property
    def is_name(self) -> bool:
        return not re.fullmatch(r"\d+(-\d+)?", self.spec)

    def check(self, option: str) -> None:
        if not self.is_name:
            lo, _, hi = self.spec.partition("-")
            if int(lo) < 1 or (hi and int(hi) < int(lo)):
                raise ChronologError(f"{option} {self.spec}: fields are numbered from 1 (N or N-M with M >= N)")

    def get(self, line: bytes, obj: dict | None) -> bytes | None:
        if self.is_name:
            if obj is None:
                return None
            value = obj
            for part in self.spec.split("."):  # a.b for nested objects
                if not isinstance(value, dict) or part not in value:
                    return None
                value = value[part]
            return None if value is None else str(value).encode()
        parts = line.split(self.separator) if self.separator is not None else line.split()
        lo, _, hi = self.spec.partition("-")
        a, b = int(lo), int(hi or lo)
        if len(parts) < b:
            return None
        sep = self.separator if self.separator is not None else b" "
        return sep.join(parts[a - 1:b])


class LineReader:
    """Keys, values and times of a block of lines, as the options say."""

    def __init__(self, *, time_field: str | None, time_regex: str | None, time_format: str | None,
                 year: int | None, timezone: str | None, key_field: str | None, key_separator: str | None,
                 field_separator: str | None) -> None:
        try:
            zone = zone_of(timezone)
        except TimeFormatError as exc:
            raise ChronologError(f"--timezone {timezone!r}: {str(exc).split(': ', 1)[1]}") from None
        self.syslog_prefix = time_format == "syslog" and time_field is None and time_regex is None
        if self.syslog_prefix:
            time_regex = SYSLOG_REGEX.decode()
        if time_field is not None and time_regex is not None:
            raise ChronologError("give --time-field or --time-regex, not both")
        if (time_format is not None or year is not None or timezone is not None) and \
                time_field is None and time_regex is None:
            raise ChronologError("--time-format/--year/--timezone need --time-field or --time-regex (where the "
                                 "time is on the line)")
        if key_field is not None and key_separator is not None:
            raise ChronologError("give --key-field or --key-separator, not both")
        sep = field_separator.encode() if field_separator is not None else None
        self.time_field = Field(time_field, sep) if time_field is not None else None
        self.key_field = Field(key_field, sep) if key_field is not None else None
        for f, opt in ((self.time_field, "--time-field"), (self.key_field, "--key-field")):
            if f is not None:
                f.check(opt)
        self.key_separator = key_separator.encode() if key_separator is not None else None
        self.regex = None
        if time_regex is not None:
            try:
                self.regex = re.compile(time_regex.encode())
            except re.error as exc:
                raise ChronologError(f"--time-regex {time_regex!r}: {exc}") from None
            if "time" not in self.regex.groupindex and self.regex.groups < 1:
                raise ChronologError("--time-regex needs a group around the time: (?P<time>...) or (...)")
        self.timed = self.time_field is not None or self.regex is not None
        self.format: TimeFormat | None = None
        if year is not None and (time_format or "iso") in ("iso", *EPOCH_FORMATS):
            raise ChronologError("--year is for a time format without a year (syslog or a pattern)")
        if self.timed:
            try:
                self.format = TimeFormat(time_format or "iso", year, zone)
            except TimeFormatError as exc:  # the shared words, with this command's option names
                raise ChronologError(str(exc).replace("time format", "--time-format", 1)
                                     .replace("give the year", "give --year")) from None
        elif year is not None:
            raise ChronologError("--year is for a time format without a year (syslog or a pattern)")
        self.keyed = self.key_field is not None or self.key_separator is not None
        self.json = any(f is not None and f.is_name for f in (self.time_field, self.key_field))
        self._prefixes = _Prefixes(self.regex, self.format.read) if self.syslog_prefix else None

    def keys_values(self, lines: list[bytes]) -> tuple[list[bytes | None] | None, list[bytes]]:
        """Each line's key (None: no key option) and value: the line, or what follows --key-separator."""
        if self.key_separator is not None:
            keys: list[bytes | None] = []
            values = []
            for line in lines:
                k, sep, rest = line.partition(self.key_separator)
                keys.append(k if sep else None)
                values.append(rest if sep else line)
            return keys, values
        if self.key_field is not None:
            return [self.key_field.get(v, self._json(v)) for v in lines], lines
        return None, lines

    def _json(self, value: bytes) -> dict | None:
        if not self.json:
            return None
        try:
            import json  # JSON lines only: not at every start
            loaded = json.loads(value)
        except ValueError:
            return None
        return loaded if isinstance(loaded, dict) else None

    def time_text(self, value: bytes) -> bytes | None:
        """The text of the line's time (None: it has none where the options say)."""
        if self.time_field is not None:
            return self.time_field.get(value, self._json(value))
        m = self.regex.search(value)
        if not m:
            return None
        return m.group("time") if "time" in self.regex.groupindex else m.group(1)

    def times(self, values: list[bytes]) -> list[int | None]:
        """Each value's time in epoch ms (None: none readable)."""
        read = self.format.read
        if not self.syslog_prefix:
            out = []
            for v in values:
                text = self.time_text(v)
                out.append(read(text) if text is not None else None)
            return out
        cache = self._prefixes
        if len(cache) > 100_000:
            cache.clear()
            cache.minutes.clear()
        # the same prefix, the same time: one lookup a line, in C (map and itemgetter: no bytecode per line)
        out = list(map(cache.__getitem__, map(_PREFIX, values)))
        if _UNCACHED in out:
            for i, v in enumerate(out):
                if v is _UNCACHED:
                    m = self.regex.search(values[i])
                    out[i] = self.format.read(m.group("time")) if m else None
        return out


class _Prefixes(dict):
    """Syslog prefix -> time, read on first sight: a dict lookup per line. A prefix in the usual layout
    (`Jun 14 15:16:01 `) is read as its minute's time (once per minute) plus its seconds."""

    def __init__(self, regex: re.Pattern, read) -> None:
        super().__init__()
        self.regex, self.read = regex, read
        self.minutes: dict[bytes, int | None] = {}

    def __missing__(self, prefix: bytes) -> int | None:
        m = self.regex.search(prefix)  # once a second: the regex decides what is a time (as in records/_lines.c)
        if m is None:  # the time may run past the prefix (many spaces): read it, do not keep it
            return _UNCACHED
        if m.end("time") == 15 and prefix[13] <= 53:  # `Jun 14 15:16:01 `, seconds 00-59: by its minute
            minute = self.minutes.get(prefix[:12], _UNCACHED)
            if minute is _UNCACHED:
                minute = self.minutes[prefix[:12]] = self.read(prefix[:12] + b":00")
            ms = None if minute is None else minute + (prefix[13] * 10 + prefix[14] - 528) * 1000  # 528: "00"
        else:
            ms = self.read(m.group("time"))
        self[prefix] = ms
        return ms
