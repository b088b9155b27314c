"""A new user's replay of old records through the real broker: records from 2005 produced by librdkafka
into a topic with the default retention.ms (7 days) are named in a WARNING at once, each segment retention
deletes is logged with its breach, and a time lookup afterwards says the records were deleted by retention
instead of only "no record at or after T"."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.timetravel.sources import BrokerSource
from tests.brokerproc import BrokerProcess

YEAR_2005 = 1_118_761_200_000  # 2005-06-14T15:00:00Z


def test_old_records_warn_on_produce_are_logged_when_deleted_and_the_lookup_says_so(tmp_path):
    broker = BrokerProcess(tmp_path / "data", {"log.retention.check.interval.ms": "200",
                                               "file.delete.delay.ms": "0"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("syslog2005", 1, 1)])["syslog2005"].result(15)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for i in range(50):
            producer.produce("syslog2005", value=b"line %d" % i, timestamp=YEAR_2005 + i * 1000)
        assert producer.flush(30) == 0
        source = BrokerSource(broker.bootstrap)
        try:
            deadline = time.monotonic() + 60
            while source.watermarks("syslog2005", 0)[0] == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            low, high = source.watermarks("syslog2005", 0)
            assert low == high == 50
            answer = source.offsets_for_time("syslog2005", YEAR_2005)[0]
            assert not answer.found
            assert answer.deleted_note(YEAR_2005) == "every record deleted by retention (log start offset 50)"
        finally:
            source.close()
    finally:
        broker.stop()
    text = broker.log_path.read_text()
    warning = next(line for line in text.splitlines() if "already older than retention.ms" in line)
    assert warning.startswith("WARNING") and "syslog2005-0" in warning
    assert "retention.ms=-1" in warning and "log.retention.hours=-1" in warning
    assert ("Deleting segment LogSegment(baseOffset=0, " in text
            and "due to log retention time 604800000ms breach based on the largest record timestamp" in text)
