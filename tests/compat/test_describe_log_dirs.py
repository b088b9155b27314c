"""DescribeLogDirs (API 35) against the real broker: kafka-python's `KafkaAdminClient.describe_log_dirs()`
for the client view, raw requests over a socket for the versions a client does not pick (v0/v1 without
flexible fields, v3's top-level error code, v4's volume sizes), and the CLUSTER describe ACL hook."""

from __future__ import annotations

import importlib
import io
import shutil
import socket
import struct
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from tests.brokerproc import broker  # noqa: F401  (fixture)

pytestmark = pytest.mark.compat


def partition_sizes(data_dir: Path, topic: str, partitions: int) -> dict[int, int]:
    return {p: sum(f.stat().st_size for f in (data_dir / f"{topic}-{p}").glob("*.log")) for p in range(partitions)}


def fill(bootstrap: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic("alpha", 3, 1), NewTopic("beta", 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    for i in range(40):
        producer.send("alpha", b"a" * (10 + i), partition=i % 2)  # partition 2 stays empty
    producer.send("beta", b"b" * 500, partition=0)
    producer.flush(15)
    producer.close()


def as_sizes(log_dirs: list[dict]) -> dict[tuple[str, int], int]:
    out = {}
    for d in log_dirs:
        for t in d["topics"]:
            for p in t["partitions"]:
                assert p["offset_lag"] == 0 and p["is_future_key"] is False
                out[(t["name"], p["partition_index"])] = p["partition_size"]
    return out


def test_kafka_python_describe_log_dirs(broker):  # noqa: F811
    fill(broker.bootstrap)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        everything = admin.describe_log_dirs()
        some = admin.describe_log_dirs({"alpha": [1, 2, 9], "nosuch": [0]})
        by_topic = admin.describe_log_dirs(["beta"])
    finally:
        admin.close()
    (node,) = everything
    (log_dir,) = node["log_dirs"]
    assert log_dir["error_code"] == 0
    assert Path(log_dir["log_dir"]) == broker.data_dir.resolve()
    usage = shutil.disk_usage(broker.data_dir)
    assert log_dir["total_bytes"] == usage.total and 0 < log_dir["usable_bytes"] <= usage.total
    alpha, beta = partition_sizes(broker.data_dir, "alpha", 3), partition_sizes(broker.data_dir, "beta", 1)
    assert alpha[0] > 0 and alpha[1] > 0 and alpha[2] == 0
    assert as_sizes(node["log_dirs"]) == {**{("alpha", p): s for p, s in alpha.items()}, ("beta", 0): beta[0]}
    # Unknown partitions and topics are left out, not answered with an error (ReplicaManager.describeLogDirs).
    assert as_sizes(some[0]["log_dirs"]) == {("alpha", 1): alpha[1], ("alpha", 2): 0}
    assert [t["name"] for t in some[0]["log_dirs"][0]["topics"]] == ["alpha"]
    assert as_sizes(by_topic[0]["log_dirs"]) == {("beta", 0): beta[0]}


def raw_describe(port: int, version: int, topics: list[tuple[str, list[int]]] | None):
    req_cls = load_request_schema(35, max(version, 1))  # v0 is v1 on the wire; kio has no v0 class
    resp_cls = load_response_schema(35, max(version, 1))
    nested = importlib.import_module(req_cls.__module__).DescribableLogDirTopic
    body_topics = None if topics is None else tuple(
        nested(topic=name, partitions=tuple(i32(p) for p in parts)) for name, parts in topics)
    flexible = version >= 2
    buf = io.BytesIO()
    header_cls = RequestHeaderV2 if flexible else RequestHeaderV1
    entity_writer(header_cls)(buf, header_cls(request_api_key=i16(35), request_api_version=i16(version),
                                              correlation_id=i32(7), client_id="raw"))
    entity_writer(req_cls)(buf, req_cls(topics=body_topics))
    frame = buf.getvalue()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "broker closed the connection"
            data += chunk
    payload = data[4:]
    header, used = entity_reader(ResponseHeaderV1 if flexible else ResponseHeaderV0)(payload, 0)
    assert header.correlation_id == 7
    body, _ = entity_reader(resp_cls)(payload, used)
    return body


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5])
def test_every_version_over_a_socket(broker, version):  # noqa: F811
    fill(broker.bootstrap)
    alpha = partition_sizes(broker.data_dir, "alpha", 3)
    body = raw_describe(broker.port, version, None)
    (result,) = body.results
    assert result.error_code == 0 and result.log_dir == str(broker.data_dir.resolve())
    sizes = {(t.name, p.partition_index): p.partition_size for t in result.topics for p in t.partitions}
    assert {k: v for k, v in sizes.items() if k[0] == "alpha"} == {("alpha", p): s for p, s in alpha.items()}
    assert ("beta", 0) in sizes
    if version >= 3:
        assert body.error_code == 0
    if version >= 4:
        assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
    if version >= 5:
        assert result.is_cordoned is False
    only = raw_describe(broker.port, version, [("beta", [0, 5])])
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in only.results[0].topics] == [("beta", [0])]
    empty = raw_describe(broker.port, version, [])
    assert empty.results[0].topics == ()


class DenyCluster:
    def authorize(self, principal: str, operation: str, resource_type: str, resource_name: str) -> bool:
        return not (resource_type == "cluster" and resource_name == "kafka-cluster" and operation == "describe")


def test_cluster_describe_acl_hook(tmp_path):
    """Without DESCRIBE on the cluster: no log dirs and CLUSTER_AUTHORIZATION_FAILED (KafkaApis)."""
    from chronolog.config import BrokerConfig
    from chronolog.errors import ErrorCode
    from chronolog.protocol.admin import describe_log_dirs
    from chronolog.protocol.codec import build_response
    from chronolog.protocol.registry import BrokerState, RequestContext
    from chronolog.storage import LogManager

    manager = LogManager(tmp_path / "data", BrokerConfig())
    manager.startup(background=False)
    try:
        manager.create_topic("t", 1)
        request = load_request_schema(35, 4)(topics=None)
        for authorizer, expected in ((DenyCluster(), ErrorCode.CLUSTER_AUTHORIZATION_FAILED), (None, 0)):
            state = BrokerState(manager, BrokerConfig(), "127.0.0.1", 0)
            if authorizer is not None:
                state.authorizer = authorizer
            ctx = RequestContext(state, 35, 4, 1, "test", "127.0.0.1")
            body = build_response(35, 4, describe_log_dirs(request, ctx))
            assert body.error_code == expected
            assert len(body.results) == (0 if expected else 1)
    finally:
        manager.shutdown()
