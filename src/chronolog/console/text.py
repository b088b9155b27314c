"""Values as the console's pages show them (times, sizes, durations, a record's bytes as text, JSON or hex)
and the console's URLs; the templates use them as filters. No HTML here: Jinja2 escapes what it prints."""

from __future__ import annotations

import json
from urllib.parse import quote, urlencode

from chronolog.timetravel.timefmt import format_time


def url(*parts: str, **query: object) -> str:
    path = "/" + "/".join(quote(str(p), safe="") for p in parts)
    q = {k: v for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urlencode(q) if q else "")


def time_text(ms: int | None) -> str:
    return "-" if ms is None or ms < 0 else format_time(ms)


def size_text(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def duration_text(ms: int | None) -> str:
    if ms is None:
        return "-"
    s, rest = divmod(int(ms), 1000)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}d " if d else "") + (f"{h}h " if h else "") + (f"{m}m " if m else "") + f"{s}.{rest:03d}s"


def step_text(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


def value_text(raw: bytes | None, fmt: str) -> str:
    """A key or value as text, JSON (pretty when it parses, else text) or hex."""
    if raw is None:
        return "null"
    if fmt == "hex":
        return " ".join(raw[i:i + 16].hex(" ") for i in range(0, len(raw), 16))
    text = raw.decode("utf-8", "replace")
    if fmt == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text
