"""Steps the differential scenarios run on each broker: produce, ask for offsets (librdkafka and
kafka-python), consume, raw requests (kio). Each returns a plain observation to compare."""

from __future__ import annotations

import dataclasses
import io
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tests.frames import recv_frame

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
BIG_BATCH = {"linger.ms": 1000, "batch.num.messages": 100000, "batch.size": 4 * 1024 * 1024}


def wait_until(check: Callable[[], Any], timeout: float = 30, what: str = "a state") -> Any:
    """Poll `check` until it returns something true (bounded); that value."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s (last: {got!r})")
        time.sleep(0.05)


# -- produce ---------------------------------------------------------------------------------------------
Rec = tuple  # (key, value, timestamp[, headers]) ; timestamp 0: the producer's clock


def produce(side: Any, topic: str, batches: Iterable[Sequence[Rec]], partition: int = 0,
            **conf: Any) -> list[tuple[int, int, Any]]:
    """Each inner sequence goes out as one batch (queued, then flushed). Returns (partition, offset, error
    name or None) per record, in produce order."""
    from confluent_kafka import Producer

    producer = Producer(side.client_config(**{**BIG_BATCH, "acks": "all", **conf}))
    out: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        out.append((msg.partition(), msg.offset() if err is None else -1, err.name() if err else None))

    for batch in batches:
        for rec in batch:
            key, value, ts = rec[0], rec[1], rec[2]
            headers = rec[3] if len(rec) > 3 else None
            producer.produce(topic, value=value, key=key, partition=partition, timestamp=ts, headers=headers,
                             on_delivery=report)
        assert producer.flush(30) == 0, f"{side.kind}: records still queued"
    return out


def records(timestamps: Iterable[int], prefix: str = "v") -> list[Rec]:
    return [(f"k{i}".encode(), f"{prefix}{i}".encode(), ts) for i, ts in enumerate(timestamps)]


# -- offsets by time -------------------------------------------------------------------------------------
def offsets_for_times_rdkafka(side: Any, topic: str, partitions: int, timestamps: Iterable[int]) -> dict:
    """librdkafka's Consumer.offsets_for_times: {(partition, ts): offset or error}."""
    from confluent_kafka import TopicPartition

    consumer = side.consumer()
    try:
        out = {}
        for ts in timestamps:
            got = consumer.offsets_for_times([TopicPartition(topic, p, ts) for p in range(partitions)], 10)
            for tp in got:
                out[(tp.partition, ts)] = tp.offset if tp.error is None else tp.error.name()
        return out
    finally:
        consumer.close()


def list_offsets_admin(side: Any, topic: str, partitions: int, specs: Iterable[Any],
                       isolation: str | None = None) -> dict:
    """librdkafka's AdminClient.list_offsets: {(partition, spec): (offset, timestamp) or error}; a spec is
    "earliest", "latest", "max_timestamp" or a timestamp."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    kw = {}
    if isolation == "read_committed":
        kw["isolation_level"] = IsolationLevel.READ_COMMITTED
    out = {}
    for spec in specs:
        os_ = getattr(OffsetSpec, spec)() if isinstance(spec, str) else OffsetSpec.for_timestamp(spec)
        futures = side.admin().list_offsets({TopicPartition(topic, p): os_ for p in range(partitions)},
                                            request_timeout=10, **kw)
        for tp, fut in futures.items():
            try:
                info = fut.result(20)
                out[(tp.partition, spec)] = (info.offset, info.timestamp)
            except Exception as exc:
                out[(tp.partition, spec)] = exc.args[0].name() if exc.args and hasattr(exc.args[0], "name") \
                    else type(exc).__name__
    return out


def offsets_kafka_python(side: Any, topic: str, partitions: int, timestamps: Iterable[int]) -> dict:
    """kafka-python's KafkaConsumer: beginning/end offsets and offsets_for_times."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**side.python_client_config(request_timeout_ms=15000))
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        out: dict[Any, Any] = {
            "beginning": {tp.partition: o for tp, o in consumer.beginning_offsets(tps).items()},
            "end": {tp.partition: o for tp, o in consumer.end_offsets(tps).items()},
        }
        for ts in timestamps:
            got = consumer.offsets_for_times({tp: ts for tp in tps})
            for tp, oat in got.items():
                out[(tp.partition, ts)] = None if oat is None else (oat.offset, oat.timestamp)
        return out
    finally:
        consumer.close()


def time_queries(timestamps: Iterable[int]) -> list[int]:
    """Each timestamp, one before and one after, and 0: where a lookup by time can change its answer."""
    ts = {0}
    for t in timestamps:
        if t > 0:
            ts.update((t - 1, t, t + 1))
    return sorted(ts)


def observe_offsets(side: Any, topic: str, partitions: int, timestamps: Iterable[int],
                    kafka_python: bool = True) -> dict:
    """What the clients answer for `topic`: librdkafka's offsets_for_times and list_offsets (the three
    special specs and every timestamp), and kafka-python's."""
    ts = list(timestamps)
    obs = {"offsets_for_times": offsets_for_times_rdkafka(side, topic, partitions, ts),
           "list_offsets": list_offsets_admin(side, topic, partitions, ["earliest", "latest", "max_timestamp", *ts])}
    if kafka_python:
        obs["kafka_python"] = offsets_kafka_python(side, topic, partitions, ts)
    return obs


# -- consume ---------------------------------------------------------------------------------------------
def consume(side: Any, topic: str, partitions: int = 1, *, expect: int | None = None, timeout: float = 20,
            **conf: Any) -> list[dict]:
    """Every record from the start to the end offsets (librdkafka), as dicts sorted by (partition, offset)."""
    from confluent_kafka import TopicPartition

    consumer = side.consumer(**conf)
    try:
        ends = {}
        starts = {}
        for p in range(partitions):
            lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), 10)
            starts[p], ends[p] = lo, hi
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in range(partitions) if ends[p] > starts[p]])
        out = []
        done = {p for p in range(partitions) if ends[p] <= starts[p]}
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                if msg.error():
                    raise AssertionError(f"{side.kind}: {msg.error()}")
                ts_type, ts = msg.timestamp()
                out.append({"partition": msg.partition(), "offset": msg.offset(), "key": msg.key(),
                            "value": msg.value(), "headers": msg.headers(), "timestamp_type": ts_type,
                            "timestamp": ts})
            # the position passes control records and aborted ones that are never delivered
            for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions) if p not in done]):
                if tp.offset >= ends[tp.partition]:
                    done.add(tp.partition)
        assert len(done) == partitions, f"{side.kind}: consumed {len(out)} records, ends {ends}"
        return sorted(out, key=lambda r: (r["partition"], r["offset"]))
    finally:
        consumer.close()


def consume_kafka_python(side: Any, topic: str, partitions: int = 1, **conf: Any) -> list[dict]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**side.python_client_config(enable_auto_commit=False, **conf))
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(tps)
        out = []
        deadline = time.monotonic() + 20
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for _tp, msgs in consumer.poll(200).items():
                for m in msgs:
                    out.append({"partition": m.partition, "offset": m.offset, "key": m.key, "value": m.value,
                                "headers": [(k, v) for k, v in m.headers] or None,
                                "timestamp_type": m.timestamp_type, "timestamp": m.timestamp})
        return sorted(out, key=lambda r: (r["partition"], r["offset"]))
    finally:
        consumer.close()


# -- raw requests ----------------------------------------------------------------------------------------
def raw_call(side: Any, api_key: int, version: int, body: dict, *, sock: socket.socket | None = None) -> dict:
    """One request built by kio from `body` (field values by name), its response as nested dicts."""
    from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
    from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
    from kio.serial import entity_reader, entity_writer

    from chronolog.protocol import codec

    cls = codec.request_schema(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=7, client_id="differential"))
    entity_writer(cls)(out, codec.build(cls, body))
    frame = struct.pack(">i", out.tell()) + out.getvalue()
    own = sock is None
    if own:
        host, port = side.bootstrap.split(",")[0].rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=30)
    try:
        sock.sendall(frame)
        reply = recv_frame(sock)
    finally:
        if own:
            sock.close()
    rcls = codec.response_schema(api_key, version)
    start = 4 + (1 if rcls.__flexible__ and api_key != 18 else 0)
    entity, _ = entity_reader(rcls)(reply, start)
    return _plain(entity)


def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "total_seconds"):  # kio's timedelta fields (throttle times)
        return int(x.total_seconds() * 1000)
    if isinstance(x, uuid.UUID):
        return str(x)
    return x


def produce_raw(side: Any, topic: str, batch: bytes, *, version: int = 9, partition: int = 0,
                acks: int = -1) -> dict:
    """A Produce request carrying `batch` (bytes) to one partition: that partition's answer."""
    resp = raw_call(side, 0, version, {"transactional_id": None, "acks": acks, "timeout": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return resp["responses"][0]["partition_responses"][0]


def build_batch(recs: Iterable[Rec], **kw: Any) -> bytes:
    from chronolog.records.batch import SimpleRecord
    from chronolog.records.batch_builder import build_batch as _build

    return _build([SimpleRecord(r[2], r[0], r[1], tuple(r[3]) if len(r) > 3 else ()) for r in recs], **kw)


def now_ms() -> int:
    return int(time.time() * 1000)
