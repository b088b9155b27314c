"""The console's pages as a function of a request: (method, path, query, form) -> (status, type, body).
No sockets here (`console.server` moves the bytes), so every page is also reachable from a test directly.

Where answers come from: a data dir (read-only, as the CLI's `--data-dir` reads it; exact timelines with
late records placed) and/or a Kafka-protocol broker (`--bootstrap-server`, with the CLI's client configs
for SASL/TLS). Topics, timelines, records and segments use the data dir when there is one; consumer groups
and rewinds need the broker. Each request opens its own source and closes it, so a broker that went away
and came back, or a topic that vanished, is seen at the next request. Any expected failure is a message
on the page (never a stack trace) and the server keeps running.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from urllib.parse import parse_qs, unquote

from chronolog.console import html as h
from chronolog.errors import ChronologError, UnknownTopicOrPartitionError
from chronolog.timetravel.timefmt import TimeFormatError, format_time, parse_time
from chronolog.timetravel.timeline import (
    Timeline,
    TimelineRangeError,
    bucket_edges,
    build_timeline,
    choose_step,
)

LOG = logging.getLogger("chronolog.console")
PAGE_SIZE = 100
SCAN_BUDGET = 20_000
FORMATS = ("text", "json", "hex")


class BadRequest(ChronologError):
    """Input the page cannot use (a time that does not parse, a window that ends before it starts...)."""


@dataclass
class Response:
    status: int
    body: bytes | Iterator[bytes]  # an iterator is sent as it comes (a page that shows progress)
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Target:
    """What the console reads: a data dir, a broker, or both; `conf` holds the broker's client configs."""

    data_dir: str | None = None
    bootstrap: str | None = None
    conf: dict = field(default_factory=dict)
    read_only: bool = False

    @property
    def where(self) -> str:
        return " + ".join(x for x in (f"data dir {self.data_dir}" if self.data_dir else "",
                                      f"broker {self.bootstrap}" if self.bootstrap else "") if x)

    def records_source(self):
        """Topics, timelines, records: the data dir when there is one, else the broker."""
        if self.data_dir is not None:
            from chronolog.timetravel.sources import open_data_dir
            return open_data_dir(self.data_dir)
        return self.broker()

    def broker(self):
        if self.bootstrap is None:
            raise BadRequest("consumer groups live in a broker: start the console with --bootstrap-server")
        from chronolog.timetravel.client import ClientSource
        return ClientSource(self.bootstrap, dict(self.conf))


def _one(query: dict[str, list[str]], name: str, default: str | None = None) -> str | None:
    values = query.get(name)
    return values[-1] if values else default


def _time(query, name: str, label: str) -> int | None:
    raw = _one(query, name)
    if raw is None or not raw.strip():
        return None
    try:
        return parse_time(raw)
    except TimeFormatError as exc:
        raise BadRequest(f"{label}: {exc}") from None


def _int(query, name: str, default: int | None = None, low: int | None = None, high: int | None = None) -> int | None:
    raw = _one(query, name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, got {raw!r}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadRequest(f"{name} must be between {low} and {high}, got {value}")
    return value


class Console:
    def __init__(self, target: Target) -> None:
        self.target = target
        # The synchronizer token of every write form (OWASP's CSRF cheat sheet): another site's page can
        # post to the console but cannot read a page of it, so it cannot know this value.
        self.csrf = secrets.token_urlsafe(32)

    # -- dispatch ---------------------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: str = "", form: bytes = b"") -> Response:
        q = parse_qs(query, keep_blank_values=True)
        parts = [p for p in path.split("/") if p]
        try:
            parts = [unquote(p) for p in parts]
            if parts[:1] == ["static"] and len(parts) == 2 and method in ("GET", "HEAD"):
                return self._static(parts[1])
            if method == "POST":
                if len(parts) == 3 and parts[0] == "groups" and parts[2] == "rewind":
                    return self.rewind(parts[1], parse_qs(form.decode("utf-8", "replace"), keep_blank_values=True))
                return self._error(405, "not a form of this console")
            if method not in ("GET", "HEAD"):
                return self._error(405, f"{method} is not supported")
            if not parts:
                return self.topics()
            if parts[0] == "topics" and len(parts) == 2:
                return self.timeline(parts[1], q)
            if parts[0] == "topics" and len(parts) == 3 and parts[2] == "records":
                return self.records(parts[1], q)
            if parts[0] == "topics" and len(parts) == 3 and parts[2] == "segments":
                return self.segments(parts[1])
            if parts == ["groups"]:
                return self.groups()
            if parts[0] == "groups" and len(parts) == 2:
                return self.group(parts[1], q)
            if parts[:2] == ["api", "topics"] and len(parts) == 4 and parts[3] == "timeline":
                return self.timeline_json(parts[2], q)
            return self._error(404, f"no page at {path}")
        except UnknownTopicOrPartitionError as exc:
            return self._error(404, str(exc))
        except (BadRequest, TimelineRangeError) as exc:
            return self._error(400, str(exc))
        except ChronologError as exc:
            return self._error(502, str(exc))
        except Exception as exc:  # a page must never become a stack trace; the log keeps it for us
            LOG.exception("console: %s %s failed", method, path)
            return self._error(500, f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")

    def _html(self, title: str, body: str, status: int = 200, script: bool = False) -> Response:
        return Response(status, h.page(title, body, self.target.where, script).encode())

    def _error(self, status: int, message: str) -> Response:
        return self._html("error", h.error_box(message) + "<p><a href=/>back to topics</a></p>", status)

    def _static(self, name: str) -> Response:
        types = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
        if name not in types:
            return self._error(404, f"no static file {name}")
        data = resources.files("chronolog.console").joinpath("static", name).read_bytes()
        return Response(200, data, types[name], {"Cache-Control": "max-age=3600"})

    # -- topics -----------------------------------------------------------------------------------------
    def topics(self) -> Response:
        from chronolog.console.facts import topic_rows
        source = self.target.records_source()
        try:
            rows = topic_rows(source, self.target)
        finally:
            source.close()
        body = h.table(
            ["topic", "partitions", "records", "size", "first timestamp", "last timestamp", "retention.ms",
             "cleanup.policy", ""],
            [[f"<a href='{h.esc(h.url('topics', r['topic']))}'>{h.esc(r['topic'])}</a>", r["partitions"],
              r["records"], h.size_text(r["size"]), h.time_text(r["first"]), h.time_text(r["last"]),
              r["retention.ms"], r["cleanup.policy"],
              f"<a href='{h.esc(h.url('topics', r['topic'], 'segments'))}'>segments</a>"
              if self.target.data_dir else ""] for r in rows],
            raw={0, 8}, numeric={1, 2, 3}, css_id="topics")
        if not rows:
            body = h.note("no topics yet") + body
        return self._html("topics", body)

    # -- timeline ---------------------------------------------------------------------------------------
    def _timeline_plan(self, topic: str, q):
        """(source, start, end, step, buckets, partitions) after every check a request can fail, or a
        source and None when the topic holds no timestamped record. The caller closes the source."""
        from chronolog.console.facts import topic_span
        start = _time(q, "from", "from")
        end = _time(q, "to", "to")
        step = _int(q, "step", None, 1, None)
        buckets = _int(q, "buckets", 120, 1, 2000)
        source = self.target.records_source()
        try:
            parts = source.partitions(topic)
            if start is None or end is None:
                first, last = topic_span(source, topic)
                if first is None:
                    return source, None
                start = first if start is None else start
                end = last + 1 if end is None else end
            if end <= start:
                raise BadRequest(f"the window must end after it starts ({format_time(start)} .. {format_time(end)})")
            if step is None:
                step = choose_step(start, end, buckets)
            bucket_edges(start, end, step)  # a span no timeline can draw is refused before any lookup
            return source, (start, end, step, buckets, parts)
        except BaseException:
            source.close()
            raise

    def _timeline(self, topic: str, q):
        source, plan = self._timeline_plan(topic, q)
        try:
            if plan is None:
                return None, None
            start, end, step, buckets, parts = plan
            return build_timeline(source, topic, start, end, step, buckets, parts), (start, end)
        finally:
            source.close()

    def timeline(self, topic: str, q) -> Response:
        """The page is sent as it is built: a line per partition while its offsets are looked up and its late
        records placed (hidden once the chart arrives), so a long timeline shows how far it got."""
        source, plan = self._timeline_plan(topic, q)
        title = f"topic {topic}: timeline"
        if plan is None:
            source.close()
            return self._html(f"topic {topic}", self._timeline_nav(topic)
                              + h.note("this topic holds no records with a timestamp"))
        start, end, step, buckets, parts = plan

        def stream():
            try:
                yield h.page_head(title, self.target.where).encode()
                lines = []
                for i, p in enumerate(parts):
                    yield (f"<p class='progress muted'>counting partition {p} ({i + 1} of {len(parts)})"
                           "&hellip;</p>\n").encode()
                    lines += build_timeline(source, topic, start, end, step, buckets, [p]).partitions
                tl = Timeline(topic, bucket_edges(start, end, step), step, lines)
                yield ("<style>.progress{display:none}</style>" + self._timeline_html(topic, tl, (start, end))
                       + h.page_tail(script=True)).encode()
            except ChronologError as exc:
                yield (h.error_box(str(exc)) + h.page_tail()).encode()
            except Exception as exc:
                LOG.exception("console: timeline of %s failed", topic)
                yield (h.error_box(f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
                       + h.page_tail()).encode()
            finally:
                source.close()

        return Response(200, stream())

    def _timeline_nav(self, topic: str) -> str:
        records = h.url("topics", topic, "records")
        return (f"<p><a href='{h.esc(records)}'>records</a>"
                + (f" · <a href='{h.esc(h.url('topics', topic, 'segments'))}'>segments</a>" if self.target.data_dir
                   else "") + "</p>")

    def _timeline_html(self, topic: str, tl, window) -> str:
        base = h.url("topics", topic)
        records = h.url("topics", topic, "records")
        nav = self._timeline_nav(topic)
        start, end = window
        edges = tl.edges
        span = edges[-1] - edges[0]
        form = (f"<form class=inline method=get action='{h.esc(base)}'>from <input type=text name=from "
                f"value='{h.esc(format_time(start))}'> to <input type=text name=to value='{h.esc(format_time(end))}'>"
                "<button>show timeline</button>"
                f"<button formaction='{h.esc(records)}'>read records</button></form>")
        zoom_out = h.url("topics", topic, **{"from": edges[0] - span, "to": edges[-1] + span})
        totals, late = tl.totals, tl.late_totals
        summary = (f"<p>{sum(totals)} record(s) in {len(totals)} buckets of {h.step_text(tl.step)} · "
                   f"<a href='{h.esc(zoom_out)}'>zoom out</a> · <a href='{h.esc(base)}'>whole topic</a> · "
                   f"<a href='{h.esc(h.url('topics', topic, 'records', **{'from': edges[0], 'to': edges[-1]}))}'>"
                   "records of this timeline</a></p>")
        if tl.exact:
            lates = sum(late)
            before = sum(line.late_before for line in tl.partitions)
            exact = ("counts are exact: read from the data dir, late records placed at their own time"
                     + (f"; {lates} record(s) arrived late (stored after records of a later bucket), shown in orange"
                        if lates else "; no record arrived late")
                     + (f"; {before} late record(s) older than this timeline are stored inside it" if before else ""))
        else:
            exact = ("counts come from the broker's time index: exact when timestamps are in order. A record stored "
                     "after a newer one (late) is counted at the newer record's time; finding late records takes a "
                     "data dir (chronolog console --data-dir) or reading the window's records")
        legend = "<p class='legend muted'><span style='background:#4a7bd0'></span>records"
        legend += ("<span style='background:#e8892b'></span>late records" if tl.exact else "") + \
            " · click a bar to zoom in, drag across the chart to read that window's records</p>"

        def zoom(a: int, b: int) -> str:
            return h.url("topics", topic, **{"from": a, "to": b})

        chart = h.timeline_svg(edges, totals, late, zoom, records)
        per_part = h.table(["partition", "start offset", "end offset", "records in timeline", "late records"],
                           [[line.partition, line.start_offset, line.end_offset, sum(line.counts),
                             sum(line.late) if line.late_checked else "unknown (broker)"]
                            for line in tl.partitions], numeric={0, 1, 2, 3}, css_id="partitions")
        return nav + form + summary + h.note(exact) + chart + legend + "<h2>partitions</h2>" + per_part

    def timeline_json(self, topic: str, q) -> Response:
        import json
        tl, _w = self._timeline(topic, q)
        data = {"topic": topic, "edges": [], "step": None, "totals": [], "late": [], "exact": True,
                "partitions": {}} if tl is None else {
            "topic": topic, "edges": tl.edges, "step": tl.step, "totals": tl.totals, "late": tl.late_totals,
            "exact": tl.exact, "partitions": {str(line.partition): {
                "counts": line.counts, "late": line.late if line.late_checked else None,
                "late_before": line.late_before, "offsets": line.offsets} for line in tl.partitions}}
        return Response(200, json.dumps(data).encode(), "application/json")

    # -- a window's records -----------------------------------------------------------------------------
    def records(self, topic: str, q) -> Response:
        from chronolog.timetravel.timeline import window_page, window_ranges
        t1 = _time(q, "from", "from")
        t2 = _time(q, "to", "to")
        fmt = _one(q, "format", "text")
        if fmt not in FORMATS:
            raise BadRequest(f"format is one of {', '.join(FORMATS)}, got {fmt!r}")
        limit = _int(q, "limit", PAGE_SIZE, 1, 1000)
        to_end = _one(q, "late") == "1"
        cursor = None
        raw_cursor = _one(q, "cursor")
        if raw_cursor:
            try:
                cp, co = raw_cursor.split(":")
                cursor = (int(cp), int(co))
            except ValueError:
                raise BadRequest(f"cursor is PARTITION:OFFSET, got {raw_cursor!r}") from None
        base = h.url("topics", topic, "records")
        form = (f"<form class=inline method=get action='{h.esc(base)}'>from <input type=text name=from "
                f"value='{h.esc(_one(q, 'from', ''))}'> to <input type=text name=to value='{h.esc(_one(q, 'to', ''))}'>"
                "format <select name=format>" + "".join(
                    f"<option{' selected' if f == fmt else ''}>{f}</option>" for f in FORMATS) + "</select>"
                + ("<input type=hidden name=late value=1>" if to_end else "") + "<button>read</button></form>"
                f"<p><a href='{h.esc(h.url('topics', topic))}'>timeline</a></p>")
        if t1 is None or t2 is None:
            return self._html(f"topic {topic}: records",
                              form + h.note("give the window: from and to (ISO-8601, epoch ms or '2h ago')"))
        if t2 <= t1:
            raise BadRequest(f"'to' ({format_time(t2)}) must be after 'from' ({format_time(t1)})")
        source = self.target.records_source()
        try:
            ranges, proven = window_ranges(source, topic, t1, t2, to_log_end=to_end)
            page = window_page(source, topic, t1, t2, ranges, cursor, limit, SCAN_BUDGET)
        finally:
            source.close()
        title = f"topic {topic}: records {format_time(t1)} .. {format_time(t2)}"
        notes = ""
        if not proven:
            notes = h.note("over a broker the window is read up to the first record at or after its end; a late "
                           "record (older than records before it) stored after that is not shown. ") + \
                f"<p><a href='{h.esc(h.url('topics', topic, 'records', **{'from': t1, 'to': t2, 'late': 1, 'format': fmt}))}'>" \
                "also look for late records up to the log end</a></p>"
        read = ", ".join(f"{p}: [{a}, {b})" for p, (a, b) in sorted(ranges.items()))
        info = f"<p class=muted>offsets read per partition {h.esc(read)}; this page scanned {page.scanned} record(s)</p>"
        if not page.records and page.next_cursor is None and cursor is None:
            return self._html(title, form + notes + info + h.note("no record in this window"))
        rows = []
        for p, rec, kind in page.records:
            headers = "<br>".join(f"{h.esc(k)}: {h.esc(h.value_text(v, fmt))}" for k, v in rec.headers or ())
            rows.append([p, rec.offset, format_time(rec.timestamp), rec.timestamp, kind,
                         f"<pre class=value>{h.esc(h.value_text(rec.key, fmt))}</pre>",
                         f"<pre class=value>{h.esc(h.value_text(rec.value, fmt))}</pre>", headers])
        pager = "<p class=pager>"
        if cursor is not None:
            pager += f"<a href='{h.esc(h.url('topics', topic, 'records', **{'from': t1, 'to': t2, 'format': fmt, 'late': '1' if to_end else None, 'limit': limit if limit != PAGE_SIZE else None}))}'>first page</a>"
        if page.next_cursor is not None:
            nxt = f"{page.next_cursor[0]}:{page.next_cursor[1]}"
            pager += (f"<a id=next href='{h.esc(h.url('topics', topic, 'records', **{'from': t1, 'to': t2, 'format': fmt, 'cursor': nxt, 'late': '1' if to_end else None, 'limit': limit if limit != PAGE_SIZE else None}))}'>"
                      f"next page (from partition {page.next_cursor[0]} offset {page.next_cursor[1]})</a>")
        else:
            pager += "<span class=muted>end of the window</span>"
        pager += "</p>"
        body = form + notes + info + h.table(["partition", "offset", "timestamp", "epoch ms", "type", "key", "value",
                                              "headers"], rows, raw={5, 6, 7}, numeric={0, 1, 3}, css_id="records") + pager
        return self._html(title, body)

    # -- segments ---------------------------------------------------------------------------------------
    def segments(self, topic: str) -> Response:
        if self.target.data_dir is None:
            raise BadRequest("segments are files: start the console with --data-dir to see them")
        from chronolog.console.facts import segment_lanes, segment_rows
        source = self.target.records_source()
        try:
            rows = segment_rows(source, topic)
        finally:
            source.close()
        chart = h.segments_svg(rows, segment_lanes(rows))
        body = (f"<p><a href='{h.esc(h.url('topics', topic))}'>timeline</a></p>" + chart + "<h2>segments</h2>"
                + h.table(["partition", "base offset", "size", "first record time", "largest timestamp",
                           "time index entries"],
                          [[r["partition"], r["base_offset"], h.size_text(r["size"]), h.time_text(r["first_timestamp"]),
                            h.time_text(r["largest_timestamp"]), r["time_index_entries"]] for r in rows],
                          numeric={0, 1, 2, 5}, css_id="segment-table"))
        return self._html(f"topic {topic}: segments", body)

    # -- groups -----------------------------------------------------------------------------------------
    def groups(self) -> Response:
        from chronolog.console.facts import list_groups
        source = self.target.broker()
        try:
            rows = list_groups(source)
        finally:
            source.close()
        body = h.table(["group", "state"], [[f"<a href='{h.esc(h.url('groups', g))}'>{h.esc(g)}</a>", s]
                                            for g, s in rows], raw={0}, css_id="groups")
        if not rows:
            body = h.note("no consumer groups") + body
        return self._html("consumer groups", body)

    def group(self, group: str, q, message: str = "") -> Response:
        from chronolog.console.facts import describe_group
        source = self.target.broker()
        try:
            info = describe_group(source, group)
        finally:
            source.close()
        topics = sorted({r["topic"] for r in info["partitions"]})
        body = message + (f"<p>state <b>{h.esc(info['state'])}</b>, {len(info['members'])} member(s)</p>")
        body += h.table(["topic", "partition", "committed", "log end", "lag (records)", "lag (record time)", "member"],
                        [[r["topic"], r["partition"], r["committed"], r["log_end"], r["lag"],
                          h.duration_text(r["lag_ms"]), r["member"]] for r in info["partitions"]],
                        numeric={1, 2, 3, 4}, css_id="offsets")
        if info["members"]:
            body += "<h2>members</h2>" + h.table(
                ["member id", "client id", "host", "partitions"],
                [[m["member_id"], m["client_id"], m["host"], ", ".join(m["partitions"])] for m in info["members"]],
                css_id="members")
        body += "<h2>rewind to a time</h2>"
        if self.target.read_only:
            body += h.note("the console runs with --read-only: rewinding is turned off")
        else:
            options = "".join(f"<option>{h.esc(t)}</option>" for t in topics)
            body += ("<form class=inline method=post action='" + h.esc(h.url("groups", group, "rewind")) + "'>"
                     f"<input type=hidden name=csrf value='{self.csrf}'><input type=hidden name=action value=preview>"
                     + (f"topic <select name=topic>{options}</select>" if topics else
                        "topic <input type=text name=topic>")
                     + " time <input type=text name=time placeholder='2024-06-14T15:00:00Z or 2h ago'>"
                     "<button>preview</button></form><p class=muted>A preview shows old and new offsets per "
                     "partition (chronolog reset-offsets --to-datetime, dry run); nothing is committed until you "
                     "confirm. Refused while the group has active members, as the CLI refuses it.</p>")
        return self._html(f"group {group}", body)

    def rewind(self, group: str, form) -> Response:
        if self.target.read_only:
            return self._error(403, "the console runs with --read-only: rewinding is turned off")
        token = _one(form, "csrf", "")
        if not hmac.compare_digest(token.encode(), self.csrf.encode()):
            return self._error(403, "this form is stale or did not come from this console (CSRF token mismatch): "
                               "reload the group's page and try again")
        topic = (_one(form, "topic") or "").strip()
        if not topic:
            raise BadRequest("choose a topic")
        ts = _time(form, "time", "time")
        if ts is None:
            raise BadRequest("give the time to rewind to")
        action = _one(form, "action", "preview")
        if action not in ("preview", "apply"):
            raise BadRequest(f"unknown action {action!r}")
        result = run_reset_offsets(self.target, group, topic, ts, execute=action == "apply")
        rows = h.table(["topic", "partition", "current offset", "new offset", "note"],
                       [[r["topic"], r["partition"], r["current"], r["new"], r["note"]] for r in result["partitions"]],
                       numeric={1, 2, 3}, css_id="rewind")
        if action == "apply":
            msg = f"<div class=ok>group {h.esc(group)} rewound to {h.esc(format_time(ts))} on {h.esc(topic)}</div>"
            return self.group(group, {}, message=msg + rows)
        body = (f"<p>rewind group <b>{h.esc(group)}</b> on <b>{h.esc(topic)}</b> to <b>{h.esc(format_time(ts))}</b>"
                " (dry run, nothing committed yet):</p>" + rows
                + "<form class=inline method=post action='" + h.esc(h.url("groups", group, "rewind")) + "'>"
                f"<input type=hidden name=csrf value='{self.csrf}'><input type=hidden name=action value=apply>"
                f"<input type=hidden name=topic value='{h.esc(topic)}'><input type=hidden name=time value='{ts}'>"
                f"<button id=confirm>commit these offsets</button> <a href='{h.esc(h.url('groups', group))}'>cancel</a>"
                "</form>")
        return self._html(f"group {group}: rewind preview", body)


def run_reset_offsets(target: Target, group: str, topic: str, ts: int, execute: bool) -> dict:
    """`chronolog reset-offsets --to-datetime` itself, as a child process with --json: the console rewinds
    through the very code the CLI runs (its checks, its refusal while the group has members). The client
    configs go in a private --command-config file, never on a command line other users can read."""
    import json
    if target.bootstrap is None:
        raise BadRequest("rewinding a group needs a broker: start the console with --bootstrap-server")
    args = [sys.executable, "-m", "chronolog.cli.main", "reset-offsets", "--group", group, "--topic", topic,
            "--to-datetime", str(ts), "--bootstrap-server", target.bootstrap, "--json"]
    if execute:
        args.append("--execute")
    conf = {k: v for k, v in target.conf.items() if k not in ("bootstrap.servers", "logger")
            and isinstance(v, str | int | bool)}
    path = None
    try:
        if conf:
            fd, path = tempfile.mkstemp(prefix="chronolog-console-", suffix=".properties")
            with os.fdopen(fd, "w") as f:  # mkstemp's file is 0600
                f.writelines(f"{k}={v}\n" for k, v in conf.items())
            args += ["--command-config", path]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ChronologError("reset-offsets did not answer within 120 s") from None
    finally:
        if path is not None:
            os.unlink(path)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        text = next((ln for ln in lines if ln.startswith("chronolog: error: ")), lines[-1] if lines else "failed")
        raise BadRequest(text.removeprefix("chronolog: error: "))
    return json.loads(done.stdout)
