"""The real broker as a subprocess on a free loopback port, for tests that drive it with real clients.

Use the `broker` fixture (import it into a test module or conftest: `from tests.brokerproc import broker`)
or `BrokerProcess` directly to restart or kill it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

TEST_CONFIGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "log.retention.check.interval.ms": "300000",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    def __init__(self, data_dir: Path, configs: dict[str, str] | None = None, port: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.configs = {**TEST_CONFIGS, **(configs or {})}
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        args = [sys.executable, "-m", "chronolog.cli.main", "serve", "--data-dir", str(self.data_dir),
                "--port", str(self.port)]
        for k, v in self.configs.items():
            args += ["--config", f"{k}={v}"]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("broker did not start listening")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(10)
        finally:
            self._log.close()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()


if __name__ != "__main__":
    import chronolog.cli.main  # noqa: F401  (fail early if the package does not import)


@pytest.fixture
def broker(tmp_path):
    proc = BrokerProcess(tmp_path / "data").start()
    yield proc
    proc.stop()
