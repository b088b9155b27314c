"""HTML of the console's pages, rendered on the server with the standard library: every value goes through
`esc`, charts are inline SVG drawn here (nothing to vendor, nothing fetched by the browser but the
package's own CSS and a small script)."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from urllib.parse import quote, urlencode

from chronolog.timetravel.timefmt import format_time


def esc(value: object) -> str:
    return html.escape("-" if value is None else str(value), quote=True)


def url(*parts: str, **query: object) -> str:
    path = "/" + "/".join(quote(str(p), safe="") for p in parts)
    q = {k: v for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urlencode(q) if q else "")


def page_head(title: str, where: str) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(title)} · chronolog console</title>"
        "<link rel=stylesheet href=/static/console.css></head><body>"
        "<header><a class=brand href=/>chronolog console</a><a href=/>topics</a><a href=/groups>groups</a>"
        f"<span class=where>{esc(where)}</span></header>"
        f"<main><h1>{esc(title)}</h1>")


def page_tail(script: bool = False) -> str:
    return "</main>" + ("<script src=/static/console.js></script>" if script else "") + "</body></html>"


def page(title: str, body: str, where: str, script: bool = False) -> str:
    return page_head(title, where) + body + page_tail(script)


def error_box(message: str) -> str:
    return f"<div class=error role=alert>{esc(message)}</div>"


def note(message: str) -> str:
    return f"<div class=note>{esc(message)}</div>"


def table(columns: list[str], rows: Iterable[list[object]], raw: set[int] | None = None,
          numeric: set[int] | None = None, css_id: str | None = None) -> str:
    """`raw` columns hold HTML already built (links, forms); every other cell is escaped."""
    raw = raw or set()
    numeric = numeric or set()
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            cls = " class=num" if i in numeric else ""
            cells.append(f"<td{cls}>{v if i in raw else esc(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    ident = f" id={css_id}" if css_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


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


def timeline_svg(edges: list[int], totals: list[int], late: list[int], zoom_href, records_href: str,
                 width: int = 1000, height: int = 220) -> str:
    """Bars of records per bucket (late records' share in orange); a bar links to its bucket (zoom in),
    dragging across the chart opens the records of the dragged window (console.js)."""
    left, top, bottom = 60, 10, 40
    plot_w, plot_h = width - left - 10, height - top - bottom
    n = len(totals)
    peak = max(totals, default=0) or 1
    bar_w = plot_w / max(n, 1)
    parts = [f"<svg class=chart id=timeline viewBox='0 0 {width} {height}' width={width} height={height} "
             f"data-start={edges[0]} data-end={edges[-1]} data-left={left} data-width={plot_w} "
             f"data-records='{esc(records_href)}' role=img aria-label='records per time bucket'>",
             f"<rect class=sel x={left} y={top} width=0 height={plot_h}></rect>"]
    for frac in (0, 0.5, 1):
        y = top + plot_h - frac * plot_h
        parts.append(f"<line x1={left - 4} x2={left + plot_w} y1={y:.1f} y2={y:.1f} stroke='#e3e6ea'></line>"
                     f"<text x={left - 6} y={y + 3:.1f} text-anchor=end>{int(round(peak * frac))}</text>")
    for i, count in enumerate(totals):
        x = left + i * bar_w
        h = count / peak * plot_h
        lh = (late[i] / peak * plot_h) if late and late[i] else 0
        title = (f"{time_text(edges[i])} .. {time_text(edges[i + 1])}: {count} record(s)"
                 + (f", {late[i]} of them late" if late and late[i] else ""))
        parts.append(f"<a href='{esc(zoom_href(edges[i], edges[i + 1]))}'><g class=bucket data-start={edges[i]} "
                     f"data-end={edges[i + 1]} data-count={count} data-late={late[i] if late else 0}>"
                     f"<title>{esc(title)}</title>"
                     f"<rect x={x:.2f} y={top} width={max(bar_w, 1):.2f} height={plot_h} fill=transparent></rect>"
                     f"<rect class=bar x={x + 0.5:.2f} y={top + plot_h - h:.2f} width={max(bar_w - 1, 0.5):.2f} "
                     f"height={h:.2f}></rect>"
                     + (f"<rect class=late x={x + 0.5:.2f} y={top + plot_h - h:.2f} width={max(bar_w - 1, 0.5):.2f} "
                        f"height={lh:.2f}></rect>" if lh else "")
                     + "</g></a>")
    ticks = min(5, n)
    for t in range(ticks + 1):
        i = round(t * n / ticks) if ticks else 0
        x = left + i * bar_w
        anchor = "start" if t == 0 else "end" if t == ticks else "middle"
        label = time_text(edges[i])
        label = label if t == 0 else label[5:19].replace("T", " ")  # the first tick carries the year
        parts.append(f"<line x1={x:.1f} x2={x:.1f} y1={top + plot_h} y2={top + plot_h + 4} stroke='#999'></line>"
                     f"<text x={x:.1f} y={top + plot_h + 16} text-anchor={anchor}>{esc(label)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def segments_svg(rows: list[dict], lanes: dict[tuple[int, int], int], width: int = 1000) -> str:
    """Segments as bars from their first record time to their largest timestamp, one band per partition
    and one lane per overlap inside it (the same layout as `describe-segments --plot`)."""
    drawn = [r for r in rows if (r["partition"], r["base_offset"]) in lanes]
    if not drawn:
        return note("no segment holds a timestamped record")
    lo = min(min(r["first_timestamp"], r["largest_timestamp"]) for r in drawn)
    hi = max(max(r["first_timestamp"], r["largest_timestamp"]) for r in drawn)
    span = max(hi - lo, 1)
    parts_ = sorted({r["partition"] for r in drawn})
    depth = {p: 1 + max(lane for (q, _b), lane in lanes.items() if q == p) for p in parts_}
    left, lane_h, top = 70, 18, 10
    band, y = {}, top
    for p in parts_:
        band[p] = y
        y += depth[p] * lane_h + 8
    height = y + 30
    plot_w = width - left - 10
    out = [f"<svg class=chart id=segments viewBox='0 0 {width} {height}' width={width} height={height}>"]
    for p in parts_:
        out.append(f"<text x={left - 8} y={band[p] + lane_h * depth[p] / 2 + 3:.1f} text-anchor=end>"
                   f"partition {p}</text>")
    for r in drawn:
        a = min(r["first_timestamp"], r["largest_timestamp"])
        b = max(r["first_timestamp"], r["largest_timestamp"])
        x = left + (a - lo) / span * plot_w
        w = max((b - a) / span * plot_w, 2)
        yy = band[r["partition"]] + lanes[(r["partition"], r["base_offset"])] * lane_h
        title = (f"partition {r['partition']} base offset {r['base_offset']}: {time_text(a)} .. {time_text(b)}, "
                 f"{size_text(r['size'])}")
        out.append(f"<g class=segment data-partition={r['partition']} data-base-offset={r['base_offset']}>"
                   f"<title>{esc(title)}</title>"
                   f"<rect x={x:.1f} y={yy + 2} width={w:.1f} height={lane_h - 4} fill='#4a7bd0' "
                   f"stroke='#1d2430'></rect><text x={x + 3:.1f} y={yy + lane_h - 6} style='fill:#fff'>{r['base_offset']}</text></g>")
    out.append(f"<text x={left} y={height - 8}>{esc(time_text(lo))}</text>"
               f"<text x={width - 10} y={height - 8} text-anchor=end>{esc(time_text(hi))}</text></svg>")
    return "".join(out)


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
