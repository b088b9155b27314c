"""`chronolog sql` against a broker that only speaks SASL_SSL (SCRAM-SHA-512, a CA of its own): client
configs as the other broker commands take them (--command-config, -X pairs); the raw fetcher cannot speak
SASL, so the window is read through librdkafka (one log line says why) and is still exact. Wrong
credentials and client configs given with --data-dir are one line and a non-zero exit."""

from __future__ import annotations

import csv
import io

import pytest

from tests.cli.test_sql import sql
from tests.console.test_console_sasl import BASE, sasl_broker  # noqa: F401  (fixture: topic "secure", 40 records)

pytest.importorskip("duckdb")


def test_a_window_through_sasl_ssl_with_command_config_and_x(sasl_broker, tmp_path):  # noqa: F811
    proc, conf, base = sasl_broker
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\n"
                     f"ssl.ca.location={base / 'ca.pem'}\n")
    out = sql("SELECT count(*) AS n, min(\"offset\") AS lo, max(\"offset\") AS hi, string_agg(CAST(value AS VARCHAR), "
              "',' ORDER BY \"offset\") AS v FROM secure", "--topic", "secure", "--from", str(BASE + 5_000),
              "--to", str(BASE + 15_000), "--bootstrap-server", conf["bootstrap.servers"], "--command-config",
              str(props), "-X", "sasl.password=admin-secret", "--format", "csv")
    assert out.returncode == 0, out.stderr
    row = next(csv.DictReader(io.StringIO(out.stdout)))
    assert (row["n"], row["lo"], row["hi"]) == ("10", "5", "14")
    assert row["v"] == ",".join(str(i) for i in range(5, 15))


def test_wrong_credentials_and_misplaced_configs_are_one_line(sasl_broker, tmp_path):  # noqa: F811
    proc, conf, base = sasl_broker
    out = sql("SELECT count(*) FROM secure", "--topic", "secure", "--bootstrap-server", conf["bootstrap.servers"],
              "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=admin",
              "-X", "sasl.password=wrong", "-X", f"ssl.ca.location={base / 'ca.pem'}")
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode != 0 and "Traceback" not in out.stderr and len(lines) == 1, out.stderr
    assert "authentication failed with " in lines[0] and "invalid credentials" in lines[0], lines[0]
    out = sql("SELECT 1", "--topic", "secure", "--data-dir", str(tmp_path), "-X", "sasl.password=x")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "go with --bootstrap-server" in out.stderr
