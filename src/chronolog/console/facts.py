"""What the console's pages show, gathered from a source (a data dir or a broker): per topic its offsets,
size, first and last timestamps and retention configs; a topic's time span; the consumer groups. A topic's
segments and a group's description come from the code the CLI prints them with (`timetravel.segments`,
`timetravel.groups`)."""

from __future__ import annotations

import json
from pathlib import Path

from chronolog.errors import ChronologError

# Where our data dir keeps topic configs (storage.manager.TOPICS_FILE); a Kafka log dir copy has none.
_TOPICS_FILE = "chronolog-topics.json"
CONFIGS = ("retention.ms", "cleanup.policy")


def _firsts_and_lasts(source, topic: str, parts: list[int]) -> dict[int, tuple[int | None, int | None]]:
    """Per partition, the timestamp of its first record (ListOffsets at time 0) and its largest timestamp
    (ListOffsets -3, KIP-734); None where there is none. Over a broker: two requests for all partitions."""
    if hasattr(source, "log"):
        out = {}
        for p in parts:
            plog = source.log(topic, p)
            first = plog.offset_for_timestamp(0)
            top = plog.offset_for_timestamp(-3)
            out[p] = (first.timestamp if first is not None else None,
                      top.timestamp if top is not None and top.timestamp >= 0 else None)
        return out
    from confluent_kafka import KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    from chronolog.timetravel.sources import OFFSET_INVALID, NoAnswer, kafka_words
    tps = [TopicPartition(topic, p) for p in parts]

    def ask() -> dict[int, tuple[int | None, int | None]]:
        firsts = source.admin.list_offsets({tp: OffsetSpec.for_timestamp(0) for tp in tps},
                                           request_timeout=source.timeout)
        tops = source.admin.list_offsets({tp: OffsetSpec.max_timestamp() for tp in tps},
                                         request_timeout=source.timeout)
        out = {}
        for tp in tps:
            a = firsts[tp].result()
            try:
                b = tops[tp].result()
            except KafkaException as exc:  # a broker before Kafka 3.0 (ListOffsets v7) has no max-timestamp lookup
                if exc.args[0].code() != KafkaError.UNSUPPORTED_VERSION:
                    raise  # anything else (a leader that died) is asked again or said, never a missing time
                b = None
            if a.offset == OFFSET_INVALID or (b is not None and b.offset == OFFSET_INVALID):
                raise NoAnswer(f"no answer for {topic}-{tp.partition} from its leader")
            last = b.timestamp if b is not None and b.offset >= 0 and b.timestamp >= 0 else None
            out[tp.partition] = (a.timestamp if a.offset >= 0 and a.timestamp >= 0 else None, last)
        return out

    try:
        return source.retrying(ask)
    except KafkaException as exc:
        raise ChronologError(f"offsets of {topic}: {kafka_words(exc)}") from None


def first_and_last(source, topic: str) -> dict[int, tuple[int | None, int | None]]:
    """Per partition of `topic`, its first record's timestamp and its largest one (None where none)."""
    return _firsts_and_lasts(source, topic, source.partitions(topic))


def topic_span(source, topic: str) -> tuple[int | None, int | None]:
    """The times a whole-topic timeline covers: from the smallest timestamp (a data dir knows it from its
    segment minima, so late records older than the first record are inside; a broker gives the first
    record's) to the largest."""
    firsts, lasts = [], []
    parts = source.partitions(topic)
    found = _firsts_and_lasts(source, topic, parts)
    for p in parts:
        first, last = found[p]
        if hasattr(source, "log"):
            lows = [e.min_timestamp for seg in source.log(topic, p).segments for e in seg.time_minima()
                    if e.min_timestamp >= 0]
            first = min(lows, default=first)
        if first is not None:
            firsts.append(first)
        if last is not None:
            lasts.append(last)
    if not firsts or not lasts:
        return None, None
    return min(firsts), max(lasts)


def _broker_configs(source, topics: list[str]) -> dict[str, dict[str, str]]:
    """The topics' CONFIGS; none for a topic deleted meanwhile; asked again while a node's answers move."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource

    from chronolog.timetravel.sources import kafka_words
    if not topics:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]

    def ask() -> dict[str, dict[str, str]]:
        out = {}
        for res, fut in source.admin.describe_configs(resources, request_timeout=source.timeout).items():
            try:
                out[res.name] = {k: v.value for k, v in fut.result().items() if k in CONFIGS}
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
                out[res.name] = {}
        return out

    try:
        return source.retrying(ask)
    except KafkaException as exc:
        raise ChronologError(f"configs of the topics: {kafka_words(exc)}") from None


def _data_dir_configs(source) -> dict[str, dict[str, str]]:
    path = Path(str(getattr(source, "path", ""))) / _TOPICS_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {name: {k: v for k, v in (m.get("configs") or {}).items() if k in CONFIGS}
            for name, m in meta.items() if isinstance(m, dict)}


def topic_rows(source, target) -> list[dict]:
    topics = sorted(source.topics())
    if hasattr(source, "log"):
        configs = _data_dir_configs(source)
        default = "default"
    else:
        configs = _broker_configs(source, topics)
        default = "-"
    rows = []
    for topic in topics:
        parts = source.partitions(topic)
        records = 0
        size: int | None = 0 if hasattr(source, "log") else None
        firsts, lasts = [], []
        found = _firsts_and_lasts(source, topic, parts)
        for p in parts:
            low, high = source.watermarks(topic, p)
            records += max(0, high - low)
            if size is not None:
                size += source.log(topic, p).size
            first, last = found[p]
            if first is not None:
                firsts.append(first)
            if last is not None:
                lasts.append(last)
        conf = configs.get(topic, {})
        rows.append({"topic": topic, "partitions": len(parts), "records": records, "size": size,
                     "first": min(firsts, default=None), "last": max(lasts, default=None),
                     "retention.ms": conf.get("retention.ms", default),
                     "cleanup.policy": conf.get("cleanup.policy", default)})
    return rows


def list_groups(source) -> list[tuple[str, str, str]]:
    """(group, type, state) of the consumer, share and streams groups (`chronolog groups list`)."""
    from confluent_kafka import KafkaException

    from chronolog.timetravel.share_groups import share_client
    def ask():
        listed = source.admin.list_consumer_groups(request_timeout=source.timeout).result()
        if listed.errors:  # a broker that did not answer: its groups would be missing from the list
            err = listed.errors[0]
            # librdkafka hands a KafkaError here: raisable, but no `except` clause matches it (its class
            # derives from no exception class), so raised as such it killed the worker thread and the
            # request never got an answer. A KafkaException is retried while the coordinator moves.
            raise err if isinstance(err, BaseException) else KafkaException(err)
        return listed

    try:
        listed = source.retrying(ask)
    except KafkaException as exc:
        arg = exc.args[0] if exc.args else exc
        raise ChronologError(f"list groups: {arg.str() if hasattr(arg, 'str') else arg}") from None
    found = {g.group_id: (g.group_id, _group_type(g), str(g.state).split(".")[-1].upper()) for g in listed.valid}
    try:
        client = share_client(source)
    except ChronologError:  # a SASL mechanism the share-group requests do not speak (GSSAPI, OAUTHBEARER)
        return sorted(found.values())
    try:  # librdkafka's list leaves out share and streams groups: ListGroups v5 says each group's type
        found.update((r["group"], (r["group"], r["type"], r["state"])) for r in client.list_groups()
                     if r["type"] in ("share", "streams"))
    finally:
        client.close()
    return sorted(found.values())


def _group_type(listed) -> str:
    kind = str(getattr(listed, "type", "")).split(".")[-1].lower()
    return "classic" if kind in ("", "unknown", "none") else kind
