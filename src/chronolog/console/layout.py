"""Where the segments chart puts each segment: numbers only, the template draws them (SVG). Segments are bars
from their first record time to their largest timestamp, one band per partition and one lane per overlap
inside it (the same layout as `describe-segments --plot`)."""

from __future__ import annotations


def segments_chart(rows: list[dict], lanes: dict[tuple[int, int], int], width: int = 1000) -> dict | None:
    drawn = [r for r in rows if (r["partition"], r["base_offset"]) in lanes]
    if not drawn:
        return None
    lo = min(min(r["first_timestamp"], r["largest_timestamp"]) for r in drawn)
    hi = max(max(r["first_timestamp"], r["largest_timestamp"]) for r in drawn)
    span = max(hi - lo, 1)
    parts = sorted({r["partition"] for r in drawn})
    depth = {p: 1 + max(lane for (q, _b), lane in lanes.items() if q == p) for p in parts}
    left, lane_h, top = 70, 18, 10
    band, y = {}, top
    for p in parts:
        band[p] = y
        y += depth[p] * lane_h + 8
    plot_w = width - left - 10
    segments = []
    for r in drawn:
        a = min(r["first_timestamp"], r["largest_timestamp"])
        b = max(r["first_timestamp"], r["largest_timestamp"])
        x = left + (a - lo) / span * plot_w
        yy = band[r["partition"]] + lanes[(r["partition"], r["base_offset"])] * lane_h
        segments.append({"partition": r["partition"], "base_offset": r["base_offset"], "start": a, "end": b,
                         "size": r["size"], "x": round(x, 1), "y": yy + 2, "h": lane_h - 4,
                         "w": round(max((b - a) / span * plot_w, 2), 1), "tx": round(x + 3, 1), "ty": yy + lane_h - 6})
    bands = [{"partition": p, "x": left - 8, "y": round(band[p] + lane_h * depth[p] / 2 + 3, 1)} for p in parts]
    return {"width": width, "height": y + 30, "left": left, "lo": lo, "hi": hi, "bands": bands, "segments": segments}
