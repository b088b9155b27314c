"""A faust-streaming application with processing_guarantee="exactly_once", run as a worker by
tests/compat/test_transactions.py: it counts the records of `f-in` per key in a table. Its state changelog
is written by the transactional producer of the source partition, in the transaction that also commits the
consumed offsets, so after a crash the table recovers to counts that include every input exactly once.

faust-streaming 0.15 does not keep that promise by itself, against any broker. A table write goes into the
producer's buffer (`send_soon`) and reaches the transactional producer only when the buffer's own task gets
to it, while the record that caused it is acked at once. A commit then takes the acked offsets and commits
whatever writes the producer holds by then: writes still in the buffer go into the next transaction (lost
if the worker dies before that commits: the committed offset is ahead of the committed table), and writes
of records processed after the offsets were taken go into this one (counted twice after a crash). Both
were seen after SIGKILLs against Apache Kafka 4.4 as against chronolog (tests compare the group's committed
offset with the committed changelog). `keep_table_writes_with_their_offsets` closes the gap from outside:
a commit sends exactly the writes buffered up to the moment its offsets were taken (the write of a record
and its ack happen in one step of the event loop), and holds back later ones until it has ended.
FAUST_AS_RELEASED=1 runs Faust without it.

A transactional worker takes the end of each changelog partition, where its table's recovery stops, from
aiokafka's last_stable_offset, which is None until a Fetch of that partition came back; Faust reads None as
"empty" and recovers nothing (once in 14 restarts in a kill loop against chronolog, the counts started again
from 0). `ask_the_broker_for_highwaters` asks ListOffsets at the consumer's read_committed isolation, which
answers the same last stable offset at any time.

Once in a dozen worker runs Faust also handed the agent a record it had processed already (the last record
of a partition, long after, with no rebalance and no seek by the app; aiokafka skips records below its
fetch position, so it was seeked back): the agent skips a record at or below the last offset it counted of
that partition, a bookkeeping forgotten when the partition is revoked."""

import asyncio
import os

import faust
from faust.exceptions import ProducerSendError
from faust.transport.consumer import Consumer
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.producer import ProducerBuffer

# A commit whose writes cannot be sent in this long crashes the worker rather than commit without them.
SEND_TIMEOUT = 60.0


class _Writes:
    """Table writes through one ProducerBuffer: how many were buffered and sent (its one task sends them
    in order), and the bounds of the commits under way (a write past the lowest waits)."""

    def __init__(self) -> None:
        self.buffered = 0
        self.sent = 0
        self.bounds: list[int] = []
        self.changed = asyncio.Condition()

    def may_send(self, number: int) -> bool:
        return not self.bounds or number <= min(self.bounds)

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait(self, predicate) -> None:
        async with self.changed:
            await self.changed.wait_for(predicate)


def _writes(buffer: ProducerBuffer) -> _Writes:
    if "_eos_writes" not in buffer.__dict__:
        buffer._eos_writes = _Writes()
    return buffer._eos_writes


def keep_table_writes_with_their_offsets() -> None:
    put, send_pending, commit_tps = ProducerBuffer.put, ProducerBuffer._send_pending, Consumer._commit_tps

    def counted_put(self: ProducerBuffer, fut) -> None:
        _writes(self).buffered += 1
        put(self, fut)

    async def held_send(self: ProducerBuffer, fut) -> None:
        writes = _writes(self)
        number = writes.sent + 1
        if not writes.may_send(number):
            await writes.wait(lambda: writes.may_send(number))
        await send_pending(self, fut)
        writes.sent = number
        await writes.notify()

    async def commit_with_writes(self: Consumer, tps, start_new_transaction: bool) -> bool:
        if not self.in_transaction:
            return await commit_tps(self, tps, start_new_transaction)
        writes = _writes(self.app.producer.buffer)
        offsets = self._filter_committable_offsets(tps)
        if not offsets:
            return False
        bound = writes.buffered  # no await since the offsets were taken: the writes of exactly those records
        writes.bounds.append(bound)
        try:
            try:
                await self._handle_attached(offsets)
            except ProducerSendError as exc:
                await self.crash(exc)
                return False
            await asyncio.wait_for(writes.wait(lambda: writes.sent >= bound), SEND_TIMEOUT)
            return await self._commit_offsets(offsets, start_new_transaction=start_new_transaction)
        finally:
            writes.bounds.remove(bound)
            await writes.notify()

    ProducerBuffer.put = counted_put
    ProducerBuffer._send_pending = held_send
    Consumer._commit_tps = commit_with_writes


def ask_the_broker_for_highwaters() -> None:
    async def highwaters(self: AIOKafkaConsumerThread, partitions) -> dict:
        return await self._ensure_consumer().end_offsets(partitions)

    AIOKafkaConsumerThread._highwaters = highwaters


if os.environ.get("FAUST_AS_RELEASED") != "1":
    keep_table_writes_with_their_offsets()
    ask_the_broker_for_highwaters()

app = faust.App("eos-faust", broker=f"kafka://{os.environ['BROKER']}", processing_guarantee="exactly_once",
                store="memory://", web_enabled=False, topic_partitions=2, topic_replication_factor=1,
                consumer_auto_offset_reset="earliest", broker_commit_every=20, broker_commit_interval=0.3,
                # The restarted worker's join waits until the SIGKILLed worker's member is gone: its session
                # (Faust's default 60 s) is the wait, so the session is short and the heartbeats frequent.
                broker_session_timeout=10.0, broker_heartbeat_interval=1.0)
source = app.topic("f-in", partitions=2, key_type=str, value_type=bytes, key_serializer="raw",
                   value_serializer="raw")
counts = app.Table("counts", default=int, partitions=2, key_type=str, value_type=int)


counted_to: dict[int, int] = {}  # input partition -> the last offset this worker counted


async def forget_revoked(sender, revoked, **kwargs) -> None:
    for tp in revoked:
        if tp.topic == source.get_topic_name():
            counted_to.pop(tp.partition, None)


app.on_partitions_revoked.connect(forget_revoked)


@app.agent(source)
async def count(stream):
    async for event in stream.events():
        message = event.message
        if message.offset <= counted_to.get(message.partition, -1):
            continue  # delivered again: counted already (see above)
        counted_to[message.partition] = message.offset
        counts[event.key] += 1


if __name__ == "__main__":
    app.main()
