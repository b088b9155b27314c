"""What the console's pages show, as a function of a request: path parts, query and form in, a `Page` (a
template and its data) or a JSON `Response` out. No HTTP here (`console.web` is the ASGI front,
`console.render` the templates).

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
import re
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from chronolog.console.render import Page
from chronolog.console.text import step_text, url
from chronolog.errors import ChronologError, UnknownTopicOrPartitionError
from chronolog.timetravel.groups import GroupNotFoundError
from chronolog.timetravel.timefmt import TimeFormatError, format_time, parse_time
from chronolog.timetravel.timeline import (
    MAX_BUCKETS,
    STEPS_MS,
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
    """A body that is not a page (the timeline as JSON)."""

    status: int
    body: bytes
    content_type: str = "application/json"


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
            from chronolog.timetravel.opener import open_data_dir
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


EPOCH_SECONDS = re.compile(r"\s*\d{10}\s*")


def _time(query, name: str, label: str, notes: list[str] | None = None) -> int | None:
    """A time the user typed or a link carries. Ten digits are epoch *seconds* (2001-09-09 .. 2286-11-20):
    read as milliseconds they would be a day in January 1970, which nobody means; they are converted and
    the page says so (in `notes`)."""
    raw = _one(query, name)
    if raw is None or not raw.strip():
        return None
    if EPOCH_SECONDS.fullmatch(raw):
        ms = int(raw) * 1000
        if notes is not None:
            notes.append(f"{label}: {raw.strip()} has 10 digits, so it was read as epoch seconds "
                         f"({format_time(ms)}); epoch milliseconds have 13 digits")
        return ms
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
        if high is None:
            raise BadRequest(f"{name} must be at least {low}, got {value}")
        if low is None:
            raise BadRequest(f"{name} must be at most {high}, got {value}")
        raise BadRequest(f"{name} must be between {low} and {high}, got {value}")
    return value


def _step(query) -> int | None:
    """A bucket width from the list of round widths (`STEPS_MS`), in ms as links carry it."""
    step = _int(query, "step", None, 1, None)
    if step is not None and step not in STEPS_MS:
        raise BadRequest(f"step {step} ms is not a round bucket width; the widths are "
                         + ", ".join(f"{s} ({step_text(s)})" for s in STEPS_MS))
    return step


class Console:
    """The console's pages as data: each method takes what a request carries (path parts, query, form) and
    returns a `Page` (a template and what it shows) or a `Response` (JSON). No HTTP here (`console.web` is
    the ASGI front), so each page is also reachable from a test directly. Methods block (librdkafka, file
    reads, a child process): the front runs them in a thread pool."""

    def __init__(self, target: Target) -> None:
        self.target = target
        # The synchronizer token of every write form (OWASP's CSRF cheat sheet): another site's page can
        # post to the console but cannot read a page of it, so it cannot know this value.
        self.csrf = secrets.token_urlsafe(32)

    def answer(self, page, *args) -> Page | Response:
        """`page(*args)`, with every expected failure turned into an error page of one line."""
        try:
            return page(*args)
        except (UnknownTopicOrPartitionError, GroupNotFoundError) as exc:
            return error_page(404, str(exc))
        except (BadRequest, TimelineRangeError) as exc:
            return error_page(400, str(exc))
        except ChronologError as exc:
            return error_page(502, str(exc))
        except Exception as exc:  # a page must never become a stack trace; the log keeps it for us
            LOG.exception("console: %s failed", getattr(page, "__name__", page))
            return error_page(500, internal_error(exc))

    # -- topics -----------------------------------------------------------------------------------------
    def topics(self, q=None) -> Page:
        from chronolog.console.facts import topic_rows
        source = self.target.records_source()
        try:
            rows = topic_rows(source, self.target)
        finally:
            source.close()
        return Page("topics.html", {"rows": rows, "segments": self.target.data_dir is not None})

    # -- timeline ---------------------------------------------------------------------------------------
    def _timeline_plan(self, topic: str, q):
        """(source, Plan) after every check a request can fail, or (source, None) when the topic holds no
        timestamped record. The caller closes the source."""
        from chronolog.console.counting import Plan, clamp
        from chronolog.console.facts import topic_span
        notes: list[str] = []
        start = _time(q, "from", "from", notes)
        end = _time(q, "to", "to", notes)
        step = _step(q)
        buckets = _int(q, "buckets", 120, 1, MAX_BUCKETS)
        count = _one(q, "count", "estimate")
        if count not in ("estimate", "exact"):
            raise BadRequest(f"count is 'estimate' or 'exact', got {count!r}")
        if start is not None and end is not None and end <= start:
            raise BadRequest(f"the window must end after it starts ({format_time(start)} .. {format_time(end)})")
        source = self.target.records_source()
        try:
            parts = source.partitions(topic)
            first, last = topic_span(source, topic)
            if first is None:
                return source, None
            start = first if start is None else start
            end = last + 1 if end is None else end
            if end <= start:
                raise BadRequest(f"the window must end after it starts ({format_time(start)} .. {format_time(end)})")
            asked = (start, end)
            start, end, clamped = clamp(start, end, first, last + 1, step, buckets)
            if clamped:
                notes.append(clamped)
            if step is None:
                step = choose_step(start, end, buckets)
            bucket_edges(start, end, step)  # a span no timeline can draw is refused before any lookup
            exact = count == "exact" and not hasattr(source, "log")
            return source, Plan(start, end, step, buckets, parts, exact, notes, asked if clamped else None)
        except BaseException:
            source.close()
            raise

    def _count(self, source, topic: str, plan, parts: list[int]) -> tuple[list, list[int], int]:
        """The lines of `parts`: exact from a data dir; over a broker the time index's count, read exactly
        on request, else with its tall bars checked (`console.counting`). Also the buckets checked and the
        records moved."""
        from chronolog.console.counting import check_tall_buckets, exact_lines
        tl = build_timeline(source, topic, plan.start, plan.end, plan.step, plan.buckets, parts)
        if tl.exact:
            return tl.partitions, [], 0
        if plan.exact:
            return exact_lines(self.target, topic, parts, tl.edges, tl.partitions), [], 0
        return tl.partitions, *check_tall_buckets(source, topic, tl.edges, tl.partitions)

    def _timeline(self, topic: str, q):
        source, plan = self._timeline_plan(topic, q)
        try:
            if plan is None:
                return None, None, [], 0
            lines, checked, moved = self._count(source, topic, plan, plan.parts)
            return Timeline(topic, bucket_edges(plan.start, plan.end, plan.step), plan.step, lines), plan, \
                checked, moved
        finally:
            source.close()

    def timeline(self, topic: str, q) -> Page:
        """A streamed page: a line per partition while its offsets are looked up and its late records placed
        (hidden once the chart arrives), so a long timeline shows how far it got. Bad input is refused
        before the first byte (a status of its own); a failure while counting is a message in the page."""
        source, plan = self._timeline_plan(topic, q)
        context = {"topic": topic, "segments": self.target.data_dir is not None}
        if plan is None:
            source.close()
            return Page("timeline.html", {**context, "empty": True})
        parts = plan.parts
        state: dict = {}

        def progress():  # its `finally` runs only once started: the page's `close` is what always runs
            try:
                lines, checked, moved = [], [], 0
                for i, p in enumerate(parts):
                    yield {"partition": p, "number": i + 1, "count": len(parts)}
                    got, c, m = self._count(source, topic, plan, [p])
                    lines += got
                    checked, moved = sorted(set(checked) | set(c)), moved + m
                tl = Timeline(topic, bucket_edges(plan.start, plan.end, plan.step), plan.step, lines)
                state["view"] = self._timeline_view(topic, tl, plan, checked, moved)
            except ChronologError as exc:
                state["error"] = str(exc)
            except Exception as exc:
                LOG.exception("console: timeline of %s failed", topic)
                state["error"] = internal_error(exc)
            finally:
                source.close()

        return Page("timeline.html", {**context, "empty": False, "progress": progress(), "state": state,
                                      "notes": plan.notes}, stream=True, close=source.close)

    def _timeline_view(self, topic: str, tl: Timeline, plan, checked: list[int], moved: int) -> dict:
        edges = tl.edges
        span = edges[-1] - edges[0]
        totals, late = tl.totals, tl.late_totals
        here = {"from": plan.start, "to": plan.end, "step": plan.step}
        if tl.exact:
            lates = sum(late)
            before = sum(line.late_before for line in tl.partitions)
            read = ("every record of the window read from the broker" if plan.exact
                    else "read from the data dir")
            exact = (f"counts are exact: {read}, late records placed at their own time"
                     + (f"; {lates} record(s) arrived late (stored after records of a later bucket), shown in orange"
                        if lates else "; no record arrived late")
                     + (f"; {before} late record(s) older than this timeline are stored inside it" if before else ""))
        else:
            exact = ("counts are an estimate from the broker's time index: exact when timestamps are in order. A "
                     "record stored after a newer one (late) is counted at the newer record's time"
                     + (f"; the {len(checked)} tallest bar(s) were checked by reading their records: {moved} late "
                        "record(s) moved to their own time" if checked else "")
                     + ". Exact counts read every record from the window's start to the log end.")
        # What the chart draws, as data in the page: the browser's chart reads it, and so can a test.
        chart = {"edges": edges, "totals": totals, "late": late if tl.exact else None, "step": tl.step,
                 "records": url("topics", topic, "records"), "zoom": url("topics", topic)}
        return {"start": plan.start, "end": plan.end, "step": tl.step, "buckets": len(totals), "total": sum(totals),
                "exact": tl.exact, "exact_note": exact, "chart": chart, "lines": tl.partitions,
                "counted": "exact" if tl.exact else "estimate", "checked": checked,
                "exact_href": None if tl.exact else url("topics", topic, **here, count="exact"),
                "estimate_href": url("topics", topic, **here) if plan.exact else None,
                "zoom_out": url("topics", topic, **{"from": edges[0] - span, "to": edges[-1] + span}),
                "window_records": url("topics", topic, "records", **{"from": edges[0], "to": edges[-1]})}

    def timeline_json(self, topic: str, q) -> Response:
        import json
        tl, plan, checked, moved = self._timeline(topic, q)
        data = {"topic": topic, "edges": [], "step": None, "totals": [], "late": [], "exact": True,
                "partitions": {}, "notes": []} if tl is None else {
            "topic": topic, "edges": tl.edges, "step": tl.step, "totals": tl.totals, "late": tl.late_totals,
            "exact": tl.exact, "notes": plan.notes, "asked": plan.asked, "checked": checked, "moved": moved,
            "partitions": {str(line.partition): {
                "counts": line.counts, "late": line.late if line.late_checked else None,
                "late_before": line.late_before, "offsets": line.offsets} for line in tl.partitions}}
        return Response(200, json.dumps(data).encode(), "application/json")

    # -- a window's records -----------------------------------------------------------------------------
    def records(self, topic: str, q) -> Page:
        from chronolog.console.window import cursor_text, merged_page, parse_cursor
        from chronolog.timetravel.timeline import window_ranges
        notes: list[str] = []
        t1 = _time(q, "from", "from", notes)
        t2 = _time(q, "to", "to", notes)
        fmt = _one(q, "format", "text")
        if fmt not in FORMATS:
            raise BadRequest(f"format is one of {', '.join(FORMATS)}, got {fmt!r}")
        limit = _int(q, "limit", PAGE_SIZE, 1, 1000)
        to_end = _one(q, "late") == "1"
        cursor = None
        raw_cursor = _one(q, "cursor")
        if raw_cursor:
            try:
                cursor = parse_cursor(raw_cursor)
            except ValueError:
                raise BadRequest(f"cursor is PARTITION:OFFSET[,PARTITION:OFFSET...], got {raw_cursor!r}") from None
        context = {"topic": topic, "title": f"topic {topic}: records", "typed_from": _one(q, "from", ""),
                   "typed_to": _one(q, "to", ""), "formats": FORMATS, "fmt": fmt, "to_end": to_end, "ask": False,
                   "notes": notes}
        if t1 is None or t2 is None:
            return Page("records.html", {**context, "ask": True})
        if t2 <= t1:
            raise BadRequest(f"'to' ({format_time(t2)}) must be after 'from' ({format_time(t1)})")
        source = self.target.records_source()
        try:
            ranges, proven = window_ranges(source, topic, t1, t2, to_log_end=to_end)
            unknown = sorted(set(cursor or ()) - set(ranges))
            if unknown:
                raise BadRequest(f"partition {unknown[0]} is not part of this window (cursor {raw_cursor!r})")
            page = merged_page(source, topic, t1, t2, ranges, cursor, limit, SCAN_BUDGET)
        finally:
            source.close()

        def here(**extra) -> str:
            return url("topics", topic, "records", **{"from": t1, "to": t2, "format": fmt,
                                                       "late": "1" if to_end else None,
                                                       "limit": limit if limit != PAGE_SIZE else None, **extra})

        nxt = page.next_cursor
        context.update(
            title=f"topic {topic}: records {format_time(t1)} .. {format_time(t2)}", proven=proven,
            late_href=url("topics", topic, "records", **{"from": t1, "to": t2, "late": 1, "format": fmt}),
            read=", ".join(f"{p}: [{a}, {b})" for p, (a, b) in sorted(ranges.items())), scanned=page.scanned,
            empty=not page.records and nxt is None and cursor is None, records=page.records,
            first_href=here() if cursor is not None else None,
            next_cursor=", ".join(f"partition {p} offset {o}" for p, o in sorted(nxt.items())) if nxt else None,
            next_href=here(cursor=cursor_text(nxt)) if nxt is not None else None)
        return Page("records.html", context)

    # -- segments ---------------------------------------------------------------------------------------
    def segments(self, topic: str, q=None) -> Page:
        if self.target.data_dir is None:
            raise BadRequest("segments are files: start the console with --data-dir to see them")
        from chronolog.console.layout import segments_chart
        from chronolog.timetravel.segments import segment_lanes, segment_rows
        source = self.target.records_source()
        try:
            rows = segment_rows(source, topic)
        finally:
            source.close()
        return Page("segments.html", {"topic": topic, "rows": rows, "chart": segments_chart(rows, segment_lanes(rows))})

    # -- groups -----------------------------------------------------------------------------------------
    def groups(self, q=None) -> Page:
        from chronolog.console.facts import list_groups
        source = self.target.broker()
        try:
            rows = list_groups(source)
        finally:
            source.close()
        return Page("groups.html", {"rows": rows})

    def group(self, group: str, q=None, done: dict | None = None) -> Page:
        from chronolog.timetravel.streams_groups import describe_any_group
        source = self.target.broker()
        try:
            info = describe_any_group(source, group)
        finally:
            source.close()
        if info.get("type") in ("share", "streams"):  # KIP-932, KIP-1071: no rewind here for those
            return Page(f"{info['type']}_group.html", {"group": group, "info": info})
        return Page("group.html", {"group": group, "info": info, "done": done, "read_only": self.target.read_only,
                                   "csrf": self.csrf, "topics": sorted({r["topic"] for r in info["partitions"]})})

    def rewind(self, group: str, form) -> Page:
        if self.target.read_only:
            return error_page(403, "the console runs with --read-only: rewinding is turned off")
        token = _one(form, "csrf", "")
        if not hmac.compare_digest(token.encode(), self.csrf.encode()):
            return error_page(403, "this form is stale or did not come from this console (CSRF token mismatch): "
                              "reload the group's page and try again")
        topic = (_one(form, "topic") or "").strip()
        if not topic:
            raise BadRequest("choose a topic")
        notes: list[str] = []
        ts = _time(form, "time", "time", notes)
        if ts is None:
            raise BadRequest("give the time to rewind to")
        action = _one(form, "action", "preview")
        if action not in ("preview", "apply"):
            raise BadRequest(f"unknown action {action!r}")
        first = self._first_record_time(topic)
        early = first is not None and ts < first
        if action == "apply" and early and _one(form, "early") != "confirmed":
            # a rewind to before the topic's first record re-reads everything there is: the confirm button
            # alone does not commit it, this second confirmation does
            action, second = "preview", True
        else:
            second = False
        result = run_reset_offsets(self.target, group, topic, ts, execute=action == "apply")
        if action == "apply":
            return self.group(group, done={"time": ts, "topic": topic, "result": result})
        return Page("rewind.html", {"group": group, "topic": topic, "time": ts, "result": result, "csrf": self.csrf,
                                    "notes": notes, "early": early, "first": first, "second": second})

    def _first_record_time(self, topic: str) -> int | None:
        """The timestamp of the topic's first record (the smallest of its partitions'), None when it has none."""
        from chronolog.console.facts import first_and_last
        source = self.target.broker()
        try:
            firsts = [a for a, _b in first_and_last(source, topic).values() if a is not None]
        finally:
            source.close()
        return min(firsts, default=None)


def error_page(status: int, message: str) -> Page:
    return Page("error.html", {"message": message}, status)


def internal_error(exc: BaseException) -> str:
    return f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


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
        text = text.removeprefix("chronolog: error: ")
        # the broker failed (a node died and nothing took over in time): 502, as every page says it; the
        # command's own refusals (members still in the group, no such topic) are the request's: 400
        raise (ChronologError if broker_failed(text) else BadRequest)(text)
    return json.loads(done.stdout)


# librdkafka's names (kafka_words ends its line with one) of a broker that is down, moving or overloaded
_BROKER_FAILED = re.compile(r"\[(TRANSPORT|ALL_BROKERS_DOWN|DESTROY_BROKER|TIMED_OUT|REQUEST_TIMED_OUT|"
                            r"LEADER_NOT_AVAILABLE|NOT_LEADER_FOR_PARTITION|NOT_LEADER_OR_FOLLOWER|"
                            r"COORDINATOR_LOAD_IN_PROGRESS|COORDINATOR_NOT_AVAILABLE|NOT_COORDINATOR)\]\s*$")


def broker_failed(text: str) -> bool:
    """Whether a `reset-offsets` error line says the broker failed, not that the request was refused."""
    return bool(_BROKER_FAILED.search(text)) or text.startswith("cannot reach ") or " no answer " in f" {text}" \
        or any(words in text for words in _RAW_BROKER_FAILED)


# librdkafka's own words for the same, where the tools have none of their own
_RAW_BROKER_FAILED = ("Broker: Not coordinator", "Broker: Leader not available", "Broker: Not leader",
                      "Broker: Coordinator load in progress", "Broker: Coordinator not available",
                      "Local: Broker transport failure", "Local: All broker connections are down", "Local: Timed out",
                      "No leaders found", "the partition has no leader")
