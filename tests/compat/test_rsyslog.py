"""A real syslog daemon feeds the broker: rsyslog's imfile reads Linux_2k.log, its RFC 3164 parser takes each
line's own time, and omkafka (librdkafka) produces with that time as the record's CreateTime."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from datetime import UTC, datetime

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.timetravel.sources import BrokerSource
from tests.brokerproc import BrokerProcess

pytestmark = pytest.mark.compat

CONF = """
global(workDirectory="{work}" parser.escapeControlCharactersOnReceive="off")
module(load="imfile" mode="polling" PollingInterval="1")
module(load="omkafka")
template(name="raw" type="string" string="%rawmsg%")
input(type="imfile" File="{file}" Tag="linux" ruleset="tokafka" needParse="on")
ruleset(name="tokafka") {{
  action(type="omkafka" broker=["{bootstrap}"] topic="syslog" template="raw" partitions.number="1"
         confParam=["compression.codec=lz4", "queue.buffering.max.ms=50"])
}}
"""


@pytest.mark.skipif(shutil.which("rsyslogd") is None, reason="rsyslogd is installed by `make` (scripts/sysdeps.sh)")
def test_rsyslog_omkafka_delivers_every_line_with_its_syslog_time(shared_data, tmp_path):
    source_file = shared_data / "loghub" / "Linux_2k.log"
    # imfile emits a line when its newline arrives; this file's last line has none, so it stays pending
    # (as it would for a log still being written).
    lines = source_file.read_bytes().decode().split("\n")[:-1]
    # rsyslog guesses the year and may pick next year's date in the future: let such timestamps in.
    proc = BrokerProcess(tmp_path / "data", {"auto.create.topics.enable": "false"}).start()
    rsyslog = None
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic("syslog", 1, 1, config={
            "message.timestamp.after.max.ms": str(400 * 86_400_000)})])["syslog"].result(15)
        work = tmp_path / "work"
        work.mkdir()
        conf = tmp_path / "rsyslog.conf"
        conf.write_text(CONF.format(work=work, file=source_file, bootstrap=proc.bootstrap))
        rsyslog = subprocess.Popen(["rsyslogd", "-n", "-f", str(conf), "-i", str(tmp_path / "rsyslog.pid")],
                                   env={**os.environ, "TZ": "UTC"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        source = BrokerSource(proc.bootstrap)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and source.watermarks("syslog", 0)[1] < len(lines):
            time.sleep(0.5)
        records = list(source.read("syslog", 0, 0, source.watermarks("syslog", 0)[1]))
        source.close()
    finally:
        if rsyslog is not None:
            os.kill(rsyslog.pid, signal.SIGTERM)
            rsyslog.wait(20)
        proc.stop()
    assert len(records) == len(lines)
    for rec, line in zip(records, lines, strict=True):
        assert rec.value.decode() == line  # byte for byte, CRs included
        # CreateTime is the line's own syslog time (month, day, time; rsyslog supplies the year).
        stamped = datetime.fromtimestamp(rec.timestamp / 1000, UTC)
        assert stamped.strftime("%b ") + f"{stamped.day:>2} " + stamped.strftime("%H:%M:%S") == line[:15]
