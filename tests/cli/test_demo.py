"""`chronolog demo` (what `make run` runs) on the real loghub samples."""

from __future__ import annotations

from typer.testing import CliRunner

from chronolog.cli.main import app
from chronolog.storage import PartitionLog
from chronolog.timetravel.syslog import parse_syslog_line


def test_demo_loads_syslog_times_as_create_time_and_is_idempotent(shared_data, tmp_path):
    runner = CliRunner()
    args = ["demo", "--data-dir", str(tmp_path / "d"), "--input", str(shared_data / "loghub"), "--year", "2024"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "linux_2k" in first.output and "first record at or after T" in first.output
    again = runner.invoke(app, args)
    assert again.exit_code == 0
    plog = PartitionLog.open_readonly(tmp_path / "d" / "linux_2k-0")
    lines = (shared_data / "loghub" / "Linux_2k.log").read_text().splitlines()
    records = list(plog.read_records(0))
    assert len(records) == len(lines) == 2000  # the rerun replaced the topic instead of doubling it
    for rec, line in zip(records, lines, strict=True):
        parsed = parse_syslog_line(line, 2024)
        assert rec.value.decode() == line
        if parsed:
            assert rec.timestamp == parsed.timestamp


def test_demo_with_no_input_is_one_clear_error(tmp_path):
    result = CliRunner().invoke(app, ["demo", "--data-dir", str(tmp_path / "d"), "--input", str(tmp_path)])
    assert result.exit_code != 0
