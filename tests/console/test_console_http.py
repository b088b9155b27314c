"""The console over real HTTP, in front of a real broker (Kafka protocol) and a copy of its data dir:
timeline counts against the loghub CSV and against brute force on late records, a window's records
exactly, paged, and the pages' answers to bad input."""

from __future__ import annotations

import bisect
import html
import json
import re

import pytest

from tests.console.conftest import LATE_BASE, get

HOUR = 3_600_000


def exact_counts(stamps: list[int], edges: list[int]) -> list[int]:
    """Records per bucket by their own timestamps: the ground truth."""
    out = [0] * (len(edges) - 1)
    for ts in stamps:
        j = bisect.bisect_right(edges, ts) - 1
        if 0 <= j < len(out):
            out[j] += 1
    return out


def index_counts(stamps: list[int], edges: list[int]) -> list[int]:
    """Records per bucket by the running maximum of timestamps (what offsets found by time count)."""
    out = [0] * (len(edges) - 1)
    top = -1
    for ts in stamps:
        top = max(top, ts)
        j = bisect.bisect_right(edges, top) - 1
        if 0 <= j < len(out):
            out[j] += 1
    return out


def late_counts(stamps: list[int], edges: list[int]) -> list[int]:
    """Per bucket, its records stored after a record of a later bucket."""
    out = [0] * (len(edges) - 1)
    top = -1
    for ts in stamps:
        top = max(top, ts)
        own = bisect.bisect_right(edges, ts) - 1
        held = bisect.bisect_right(edges, top) - 1
        if 0 <= own < len(out) and own < held:
            out[own] += 1
    return out


def merged(stamps: dict[int, list[int]], t1: int, t2: int) -> list[tuple[int, int, int]]:
    """(partition, offset, timestamp) of the window's records as the records pages list them: the partitions
    merged by time, each in offset order (a merge of the partitions' heads)."""
    import heapq
    per = [[(ts, p, o) for o, ts in enumerate(stamps[p]) if t1 <= ts < t2] for p in sorted(stamps)]
    return [(p, o, ts) for ts, p, o in heapq.merge(*per)]


def timeline(console, topic: str, **query) -> dict:
    status, body = get(console.url(f"/api/topics/{topic}/timeline", **query))
    assert status == 200, body
    return json.loads(body)


def chart_data(page: str) -> dict:
    """The series the timeline page hands its chart (the browser tests check what the chart drew of it)."""
    m = re.search(r'<script type="application/json" id="timeline-data">(.*?)</script>', page, re.S)
    assert m, "no chart data in the page"
    return json.loads(m[1])


def test_topics_page_lists_both_topics_with_counts_and_times(loaded, broker_console, dir_console):
    for console in (broker_console, dir_console):
        status, page = get(console.url("/"))
        assert status == 200
        for topic, parts in loaded.truth.items():
            stamps = [ts for p in sorted(parts) for ts in parts[p]]
            row = re.search(rf'<a href="/topics/{topic}">{topic}</a></td><td class="num">(\d+)</td>'
                            r'<td class="num">(\d+)</td>', page)
            assert row and (int(row[1]), int(row[2])) == (len(parts), len(stamps)), page
            last = max(stamps)
            from chronolog.timetravel.timefmt import format_time
            assert format_time(last) in page


@pytest.mark.parametrize("step", [HOUR, 24 * HOUR])
def test_linux_timeline_matches_the_loghub_csv(loaded, broker_console, dir_console, step):
    """Bucket counts of the loghub sample against its CSV: exact from the data dir (its three late lines
    placed), the time index's running-maximum count from the broker (which says it is not exact)."""
    stamps = loaded.truth["linux"]
    every = [ts for p in stamps for ts in stamps[p]]
    start, end = min(every), max(every) + 1
    offline = timeline(dir_console, "linux", **{"from": start, "to": end, "step": step})
    edges = offline["edges"]
    assert edges[0] <= start < edges[1] and edges[-2] < end <= edges[-1] and offline["step"] == step
    assert offline["exact"] is True
    assert offline["totals"] == exact_counts(every, edges)
    for p, ts in stamps.items():
        assert offline["partitions"][str(p)]["counts"] == exact_counts(ts, edges)
        assert offline["partitions"][str(p)]["late"] == late_counts(ts, edges)
    online = timeline(broker_console, "linux", **{"from": start, "to": end, "step": step})
    assert online["edges"] == edges and online["exact"] is False
    for p, ts in stamps.items():
        assert online["partitions"][str(p)]["counts"] == index_counts(ts, edges)


def test_late_records_are_counted_exactly_and_marked(loaded, dir_console, broker_console):
    stamps = loaded.truth["late"]
    every = [ts for p in stamps for ts in stamps[p]]
    for start, end, step in ((min(every), max(every) + 1, 60_000), (LATE_BASE + 1_234_567, LATE_BASE + 2_000_000, 10_000),
                             (LATE_BASE + 600_000, LATE_BASE + 605_000, 1000)):
        got = timeline(dir_console, "late", **{"from": start, "to": end, "step": step})
        edges = got["edges"]
        assert got["totals"] == exact_counts(every, edges)
        assert got["late"] == [sum(c) for c in zip(*(late_counts(ts, edges) for ts in stamps.values()), strict=True)]
    # the whole topic's chart: bars carry the same counts, late ones marked
    status, page = get(dir_console.url("/topics/late", **{"step": 60_000}))
    assert status == 200
    drawn = chart_data(page)
    edges = drawn["edges"]
    assert drawn["totals"] == exact_counts(every, edges)
    lates = [sum(c) for c in zip(*(late_counts(ts, edges) for ts in stamps.values()), strict=True)]
    assert drawn["late"] == lates and sum(lates) > 50
    assert f"{sum(lates)} record(s) arrived late" in page
    # the page was sent as it was built: a line per partition, hidden once the chart came
    assert page.index("counting partition 0 (1 of 2)") < page.index("counting partition 1 (2 of 2)") \
        < page.index("<style>.progress{display:none}</style>") < page.index('<div id="timeline"')
    # over the broker the page says its counts are the time index's, and has no late series
    status, page = get(broker_console.url("/topics/late", **{"step": 60_000}))
    assert status == 200 and "counts are an estimate from the broker's time index" in html.unescape(page)
    assert chart_data(page)["late"] is None


def read_window(console, topic: str, t1: int, t2: int, **extra) -> tuple[list[tuple[int, int, int]], int]:
    """Every record the records pages show for [t1, t2), following 'next page' links; and the page count."""
    out, pages = [], 0
    url = console.url(f"/topics/{topic}/records", **{"from": t1, "to": t2, **extra})
    while url:
        status, page = get(url)
        assert status == 200, page
        pages += 1
        assert pages < 200
        out += [(int(p), int(o), int(ts)) for p, o, ts in re.findall(
            r'<tr><td class="num">(\d+)</td><td class="num">(\d+)</td><td class="time">[^<]*</td><td class="num">(\d+)</td>', page)]
        nxt = re.search(r'<a id="next" href="([^"]+)"', page)
        url = console.url("") + html.unescape(nxt[1]) if nxt else None
    return out, pages


def test_a_window_gives_exactly_its_records_paged(loaded, dir_console, broker_console):
    stamps = loaded.truth["late"]
    # both ends on timestamps records carry: the start is inclusive, the end exclusive
    t1 = min(ts for ts in stamps[1] if ts >= LATE_BASE + 900_000)
    t2 = min(ts for ts in stamps[0] if ts >= LATE_BASE + 1_500_000)
    want = merged(stamps, t1, t2)
    assert len(want) > 100 and (1, stamps[1].index(t1), t1) in want
    assert want != sorted(want)  # partition after partition would be another order
    got, pages = read_window(dir_console, "late", t1, t2, limit=50)
    assert got == want and pages >= 3
    got, _ = read_window(broker_console, "late", t1, t2, limit=50, late=1)
    assert got == want
    # without late=1 a broker reads up to the first record at or after the window's end, and says so
    got, _ = read_window(broker_console, "late", t1, t2, limit=500)
    ends = {p: next(o for o, ts in enumerate(stamps[p]) if ts >= t2) for p in stamps}
    assert got == [w for w in want if w[1] < ends[w[0]]] and len(got) < len(want)


def test_records_show_key_value_headers_in_each_format(loaded, dir_console):
    stamps = loaded.truth["linux"][0]
    t = stamps[10]
    first = loaded.lines["linux"][0][stamps.index(t)]
    for fmt, expect in (("text", first.decode()), ("hex", first[:16].hex(" ")), ("json", first.decode())):
        status, page = get(dir_console.url("/topics/linux/records", **{"from": t, "to": t + 1, "format": fmt}))
        assert status == 200
        assert html.escape(expect, quote=False) in page.replace("&#34;", '"').replace("&#39;", "'"), fmt
        assert "line: " in page
    status, page = get(dir_console.url("/topics/late/records", **{"from": LATE_BASE, "to": LATE_BASE + 10_000,
                                                                   "format": "json"}))
    assert '{\n  &#34;n&#34;: 0\n}' in page


def test_records_show_their_timestamp_type(broker_console, dir_console):
    for console in (broker_console, dir_console):
        status, page = get(console.url("/topics/appended/records", **{"from": "2020-01-01T00:00:00Z", "to": "now"}))
        assert status == 200 and page.count("<td>LogAppendTime</td>") == 5 and "CreateTime" not in page
        status, page = get(console.url("/topics/late/records", **{"from": LATE_BASE, "to": LATE_BASE + 60_000}))
        assert status == 200 and "<td>CreateTime</td>" in page and "LogAppendTime" not in page


@pytest.mark.parametrize("path,query,status,words", [
    ("/topics/linux", {"from": "yesterday-ish"}, 400, "cannot read &#39;yesterday-ish&#39; as a time"),
    ("/topics/linux/records", {"from": "2005-06-14T00:00:00Z", "to": "2005-06-13T00:00:00Z"}, 400, "must be after"),
    ("/topics/linux/records", {"from": "2001-01-01T00:00:00Z", "to": "2001-01-02T00:00:00Z"}, 200,
     "no record in this window"),
    ("/topics/linux/records", {"from": "1000000000000", "to": "1000000000001", "format": "xml"}, 400, "format is one of"),
    ("/topics/linux", {"step": "-5"}, 400, "step must be at least 1, got -5"),
    ("/topics/linux", {"step": "7000"}, 400, "step 7000 ms is not a round bucket width"),
    ("/topics/linux/records", {"limit": "0", "from": "2005-06-14T00:00:00Z", "to": "2005-06-15T00:00:00Z"}, 400,
     "limit must be between 1 and 1000"),
    ("/topics/linux/records", {"from": "2005-06-14T00:00:00Z", "to": "2005-06-15T00:00:00Z", "cursor": "x"}, 400,
     "cursor is"),
    ("/topics/linux/records", {"from": "2005-06-14T00:00:00Z", "to": "2005-06-15T00:00:00Z", "cursor": "9:0"}, 400,
     "partition 9 is not part of this window"),
    ("/topics/linux", {"count": "roughly"}, 400, "count is &#39;estimate&#39; or &#39;exact&#39;"),
    ("/topics/linux", {"from": "2005-01-01T00:00:00Z", "to": "2006-01-01T00:00:00Z", "step": "1000"}, 400,
     "at most 2000"),
    ("/topics/vanished", {}, 404, "topic &#39;vanished&#39; not found"),
    ("/nowhere", {}, 404, "no page at /nowhere"),
])
def test_bad_input_is_a_message_not_a_trace(broker_console, dir_console, path, query, status, words):
    for console in (broker_console, dir_console):
        got, page = get(console.url(path, **query))
        assert got == status, page
        assert words in page and "Traceback" not in page and "None" not in page
    assert get(dir_console.url("/"))[0] == 200  # still serving


def test_status_codes_say_whose_fault_it_is(broker_console):
    """404 for what does not exist, 400 for input the page cannot use, 502 only when the broker fails."""
    for path in ("/groups/no-such-group", "/topics/no-such-topic", "/topics/no-such-topic/records"):
        window = {"from": "2005-06-14T00:00:00Z", "to": "2005-06-15T00:00:00Z"} if "records" in path else {}
        status, page = get(broker_console.url(path, **window))
        assert status == 404, (path, page)
        assert "does not exist" in page or "not found" in page
    # a broker that went away: test_console_groups' test_a_broker_that_goes_away_is_a_message... (502)


def test_segments_page_draws_each_segment(loaded, dir_console, data_copy):
    status, page = get(dir_console.url("/topics/late/segments"))
    assert status == 200
    drawn = set(re.findall(r'<g class="segment" data-partition="(\d+)" data-base-offset="(\d+)">', page))
    on_disk = {(d.name.rsplit("-", 1)[1], str(int(f.stem))) for d in data_copy.glob("late-*") for f in d.glob("*.log")}
    assert drawn == on_disk and len(on_disk) > 2
    status, page = get(dir_console.url("/topics/late/segments").replace("late", "linux"))
    assert status == 200


def test_a_partition_written_by_apache_kafka(kafka_segments_dir, tmp_path):
    """A partition directory copied out of a real Kafka broker's log dir (four segments, its own indexes):
    the timeline and late counts against brute force over every record, and its segments."""
    from chronolog.timetravel.sources import DataDirSource
    from tests.console.conftest import ConsoleProcess
    source = DataDirSource(kafka_segments_dir)
    low, high = source.watermarks("timeindex_test", 0)
    stamps = [r.timestamp for r in source.read("timeindex_test", 0, low, high)]
    source.close()
    console = ConsoleProcess("--data-dir", str(kafka_segments_dir), log=tmp_path / "kafka.log")
    try:
        for buckets in (7, 60):
            got = timeline(console, "timeindex_test", buckets=buckets)
            edges = got["edges"]
            assert got["exact"] and got["totals"] == exact_counts(stamps, edges) and sum(got["totals"]) == len(stamps)
            assert got["late"] == late_counts(stamps, edges)
        status, page = get(console.url("/topics/timeindex_test/segments"))
        assert status == 200 and len(re.findall(r'<g class="segment" ', page)) == 4
    finally:
        console.stop()


def test_only_loopback_host_names_are_answered(dir_console):
    """A page of another site whose name resolves to 127.0.0.1 (DNS rebinding) gets nothing."""
    import urllib.error
    import urllib.request
    for host, status in ((f"evil.example:{dir_console.port}", 403), (f"localhost:{dir_console.port}", 200),
                         (f"127.0.0.1:{dir_console.port}", 200)):
        req = urllib.request.Request(dir_console.url("/"), headers={"Host": host})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                got = resp.status
        except urllib.error.HTTPError as exc:
            got = exc.code
        assert got == status, host


def test_a_huge_window_is_clamped_to_the_records_and_buckets_are_round(loaded, broker_console, dir_console):
    """1970 .. 2036 over six weeks of 2005 logs: the window is cut to the records' span and the page says so;
    every bucket width is a round one and every edge a multiple of it (round UTC times)."""
    from chronolog.timetravel.timeline import STEPS_MS
    stamps = loaded.truth["linux"]
    every = [ts for p in stamps for ts in stamps[p]]
    for console in (dir_console, broker_console):
        got = timeline(console, "linux", **{"from": "1970-01-01T00:00:00Z", "to": "2036-01-01T00:00:00Z"})
        edges = got["edges"]
        assert got["step"] in STEPS_MS and all(e % got["step"] == 0 for e in edges)
        assert edges[0] <= min(every) < edges[1] and edges[-2] <= max(every) < edges[-1]
        assert len(edges) - 1 <= 120 and sum(got["totals"]) == len(every)
        assert got["asked"] == [0, 2082758400000] and "reaches beyond the topic's records" in got["notes"][0]
        status, page = get(console.url("/topics/linux", **{"from": "1970-01-01T00:00:00Z", "to": "2036-01-01"}))
        assert status == 200 and "reaches beyond the topic&#39;s records" in page
    # whatever the window, the width is one of the list and the edges sit on its multiples
    for start, end in ((min(every) + 12_345, min(every) + 98_765), (min(every) + 1, max(every) - 77_777),
                       (min(every) - 3, min(every) + 7 * 86_400_000 + 5)):
        got = timeline(dir_console, "linux", **{"from": start, "to": end})
        assert got["step"] in STEPS_MS and all(e % got["step"] == 0 for e in got["edges"]), (start, end)
        assert got["totals"] == exact_counts(every, got["edges"])


def test_ten_digits_are_epoch_seconds_and_the_page_says_so(loaded, dir_console):
    stamps = loaded.truth["late"]
    seconds = LATE_BASE // 1000
    status, page = get(dir_console.url("/topics/late", **{"from": seconds, "to": seconds + 600}))
    assert status == 200
    assert f"{seconds} has 10 digits, so it was read as epoch seconds (2023-11-14T22:13:20.000Z)" in page
    assert chart_data(page)["edges"][0] == LATE_BASE
    got, _ = read_window(dir_console, "late", seconds, seconds + 600)
    assert got == merged(stamps, LATE_BASE, LATE_BASE + 600_000) and got
    status, page = get(dir_console.url("/topics/late/records", **{"from": seconds, "to": LATE_BASE + 600_000}))
    assert status == 200 and page.count("read as epoch seconds") == 1


def test_a_burst_of_late_records_is_not_a_tall_bar_in_the_wrong_place(loaded, broker_console, dir_console):
    """Over a broker the time index counts a replayed burst at the newest time before it; the tall bar is
    checked by reading its records, and on request every record is read: both match the data dir."""
    stamps = loaded.truth["spike"][0]
    q = {"step": 300_000}
    offline = timeline(dir_console, "spike", **q)
    edges = offline["edges"]
    assert offline["totals"] == exact_counts(stamps, edges) and sum(offline["late"]) == 500
    index = index_counts(stamps, edges)
    assert max(index) >= 500 + 30  # what the time index alone draws: the burst in the last busy bucket
    online = timeline(broker_console, "spike", **q)
    assert online["edges"] == edges and online["exact"] is False
    assert online["totals"] == exact_counts(stamps, edges) and online["moved"] == 500 and online["checked"]
    exact = timeline(broker_console, "spike", **q, count="exact")
    assert exact["exact"] is True and exact["totals"] == exact_counts(stamps, edges)
    assert exact["late"] == late_counts(stamps, edges)
    status, page = get(broker_console.url("/topics/spike", **q))
    assert status == 200 and 'data-counted="estimate"' in page and "500 late record(s) moved" in page
    assert 'id="count-exact"' in page
    status, page = get(broker_console.url("/topics/spike", **q, count="exact"))
    assert status == 200 and 'data-counted="exact"' in page and "every record of the window read" in page
    assert chart_data(page)["late"] == late_counts(stamps, edges)
