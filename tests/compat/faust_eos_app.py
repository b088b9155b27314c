"""A faust-streaming application with processing_guarantee="exactly_once", run as a worker by
tests/compat/test_transactions.py: it counts the records of `f-in` per key in a table. Its state changelog
is written by the transactional producer of the source partition, in the transaction that also commits the
consumed offsets, so after a crash the table recovers to counts that include every input exactly once."""

import os

import faust

app = faust.App("eos-faust", broker=f"kafka://{os.environ['BROKER']}", processing_guarantee="exactly_once",
                store="memory://", web_enabled=False, topic_partitions=2, topic_replication_factor=1,
                consumer_auto_offset_reset="earliest", broker_commit_every=20, broker_commit_interval=0.3,
                # The restarted worker's join waits until the SIGKILLed worker's member is gone: its session
                # (Faust's default 60 s) is the wait, so the session is short and the heartbeats frequent.
                broker_session_timeout=10.0, broker_heartbeat_interval=1.0)
source = app.topic("f-in", partitions=2, key_type=str, value_type=bytes, key_serializer="raw",
                   value_serializer="raw")
counts = app.Table("counts", default=int, partitions=2, key_type=str, value_type=int)


@app.agent(source)
async def count(stream):
    async for key, _value in stream.items():
        counts[key] += 1


if __name__ == "__main__":
    app.main()
