"""Human time at the edges: parse what people type, print ISO-8601 UTC. Inside, times are epoch ms."""

from __future__ import annotations

import logging
import re
import time
from datetime import UTC, datetime

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


LOG = logging.getLogger("chronolog.time")
# Kafka timestamps are ms since the epoch; the tools print them as ISO-8601 dates, which end at year 9999.
MAX_TIME_MS = 253_402_300_799_999


def now_ms() -> int:
    return int(time.time() * 1000)


def parse_time(text: str, now: int | None = None) -> int:
    """ISO-8601 (a time without a zone is UTC), epoch milliseconds, `now`, or relative (`2h ago`, `-90m`)."""
    raw = str(text).strip()
    now = now_ms() if now is None else now
    if not raw:
        raise TimeFormatError("empty time")
    if raw.lower() == "now":
        return now
    if re.fullmatch(r"-?\d{10,}", raw):
        ms = _in_range(int(raw), text)
        if len(raw) == 10:
            LOG.warning("%s read as epoch milliseconds (%s); as epoch seconds it would be %s: give %s000 for that",
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
