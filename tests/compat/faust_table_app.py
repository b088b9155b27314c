"""A faust-streaming application run as a worker by tests/compat/test_faust_compaction.py: it keeps the
latest value of each key of `c-in` in a table (a `DEL` value deletes the key), so its changelog topic is
a compacted topic written by updates and tombstones. Once its table is recovered from that changelog
after a start, it writes the table to $TABLE_DUMP (JSON) every half second."""

import json
import os

import faust

app = faust.App("compact-faust", broker=f"kafka://{os.environ['BROKER']}", store="memory://", web_enabled=False,
                topic_partitions=1, topic_replication_factor=1, consumer_auto_offset_reset="earliest",
                broker_commit_every=50, broker_commit_interval=0.3)
source = app.topic("c-in", partitions=1, key_type=str, value_type=bytes, key_serializer="raw",
                   value_serializer="raw")
latest = app.Table("latest", partitions=1, key_type=str, value_type=int)


@app.agent(source)
async def keep_latest(stream):
    async for key, value in stream.items():
        if value == b"DEL":
            latest.pop(key, None)
        else:
            latest[key] = int(value)


@app.timer(interval=0.5)
async def dump():
    if app.tables.recovery.completed.is_set():
        path = os.environ["TABLE_DUMP"]
        with open(path + ".tmp", "w") as f:
            json.dump(dict(latest.items()), f)
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    app.main()
