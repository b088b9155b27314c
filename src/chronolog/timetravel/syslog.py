"""Reading BSD syslog lines (RFC 3164 style, as loghub's samples): `Jun 14 15:16:01 host prog[pid]: msg`.

The syslog time has no year and no zone: the year comes from the caller and the zone is taken as UTC.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

_LINE = re.compile(r"^(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<time>\d{2}:\d{2}:\d{2})\s+(?P<host>\S+)\s+"
                   r"(?P<prog>[^\[:]+?)(?:\[(?P<pid>\d+)\])?:\s?(?P<msg>.*)$")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                       "Nov", "Dec"), start=1)}


@dataclass(frozen=True)
class SyslogLine:
    timestamp: int
    host: str
    program: str
    pid: int | None
    message: str


def parse_syslog_line(line: str, year: int) -> SyslogLine | None:
    m = _LINE.match(line.rstrip("\n"))
    if not m or m.group("mon") not in _MONTHS:
        return None
    hh, mm, ss = (int(x) for x in m.group("time").split(":"))
    try:
        dt = datetime(year, _MONTHS[m.group("mon")], int(m.group("day")), hh, mm, ss, tzinfo=UTC)
    except ValueError:
        return None
    pid = m.group("pid")
    return SyslogLine(int(dt.timestamp() * 1000), m.group("host"), m.group("prog").strip(), int(pid) if pid else None,
                      m.group("msg"))


def syslog_timestamp(line: str, year: int) -> int | None:
    parsed = parse_syslog_line(line, year)
    return parsed.timestamp if parsed else None
