"""The CLI tests' broker, one per module; the runner is tests/clirun.py."""

from __future__ import annotations

import pytest

from tests.brokerproc import BrokerProcess
from tests.clirun import Run, assert_one_line_error, chronolog, chronolog_process

__all__ = ["Run", "assert_one_line_error", "chronolog", "chronolog_process"]


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("cli") / "data").start()
    yield proc
    proc.stop()
