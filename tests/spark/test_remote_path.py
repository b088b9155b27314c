"""`path` as a URI (pyarrow filesystems; `file://` here, no network) reads what the local path reads, in
batch with pushdown and in streaming."""

from __future__ import annotations

import datetime
import random

import pytest

from chronolog.records import SimpleRecord, build_batch
from chronolog.spark.options import SourceOptions
from chronolog.spark.planning import plan
from chronolog.spark.ranges import Bounds
from tests.s3server import s3_server
from tests.storage.helpers import write_data_dir

pytestmark = pytest.mark.spark
BASE = 1_700_000_000_000


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    rng = random.Random(3)
    batches = {}
    for p in range(2):
        stamps = [BASE + i * 100 - (rng.randint(0, 5000) if rng.random() < 0.1 else 0) for i in range(800)]
        batches[p] = [build_batch([SimpleRecord(t, b"k", b"v%d-%d" % (p, i + j)) for j, t in enumerate(stamps[i:i + 25])])
                      for i in range(0, len(stamps), 25)]
    return write_data_dir(tmp_path_factory.mktemp("remote-spark") / "data", "ev", batches, {"segment.bytes": "20000"})


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.select("partition", "offset", "timestamp", "key", "value").collect())


@pytest.mark.parametrize("t1,t2", [(BASE + 10_000, BASE + 20_000), (BASE - 1_000, BASE + 500), (BASE + 79_000, BASE + 90_000)])
def test_file_uri_equals_local_path_with_pushdown(spark, data_dir, t1, t2):
    def load(path: str):
        return spark.read.format("chronolog").option("path", path).option("subscribe", "ev").load()

    where = f"timestamp >= '{iso(t1)}' AND timestamp < '{iso(t2)}'"
    local = rows(load(str(data_dir)).where(where))
    remote = rows(load(data_dir.as_uri()).where(where))
    assert remote == local and local
    assert rows(load(data_dir.as_uri())) == rows(load(str(data_dir)))


def test_the_planner_proves_the_same_ranges_through_a_uri(data_dir):
    bounds = Bounds(ts_min_us=(BASE + 30_000) * 1000, ts_max_us=(BASE + 40_000) * 1000 - 1)

    def ranges(path: str):
        found = plan(SourceOptions.parse({"path": path, "subscribe": "ev"}), bounds)
        flat = [r for item in found for r in getattr(item, "ranges", (item,))]
        return [(r.topic, r.partition, r.start, r.end) for r in flat]

    local = ranges(str(data_dir))
    assert ranges(data_dir.as_uri()) == local
    assert len(local) == 2 and all(end - start < 800 for _t, _p, start, end in local)  # the end was proven, not the log end


def test_streaming_through_a_file_uri(spark, data_dir, tmp_path):
    query = (spark.readStream.format("chronolog").option("path", data_dir.as_uri()).option("subscribe", "ev")
             .option("startingTimestamp", str(BASE)).option("maxOffsetsPerTrigger", "500").load()
             .selectExpr("value", "partition", "offset")
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    got = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in range(2) for o in range(800)]


def test_a_missing_uri_is_one_clear_line(spark, tmp_path):
    from chronolog.errors import ChronologError
    with pytest.raises(ChronologError, match="does not exist"):
        plan(SourceOptions.parse({"path": (tmp_path / "nothing").as_uri(), "subscribe": "ev"}), Bounds())


def test_s3_uri_read_by_executors_that_resolve_it_themselves(spark, kafka_segments_dir):
    """Spark's Python workers get only the URI (credentials in it here; normally pyarrow's environment)
    and open the store themselves: moto's S3-compatible server on 127.0.0.1 stands in for S3."""
    with s3_server("backups", environment=False) as (_server, client, query):
        topic = kafka_segments_dir.name
        for f in kafka_segments_dir.iterdir():
            client.upload_file(str(f), "backups", f"kafka/{topic}/{f.name}")
        uri = f"s3://testing:testing@backups/kafka/{topic}{query}"

        def load(path: str):
            return spark.read.format("chronolog").option("path", path).option("subscribe", topic).load()

        t = 1753819246011
        where = f"timestamp >= '{iso(t)}' AND timestamp < '{iso(t + 20_000)}'"
        local = rows(load(str(kafka_segments_dir)).where(where))
        assert rows(load(uri).where(where)) == local and local
        assert load(uri).count() == 30565
