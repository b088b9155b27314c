"""The real broker as a subprocess on a free loopback port, for tests that drive it with real clients.

Use the `broker` fixture (import it into a test module or conftest: `from tests.brokerproc import broker`)
or `BrokerProcess` directly to restart or kill it.

With a `listeners` config (`SASL_SSL://127.0.0.1:0,...`) the ports are read from the broker's
"chronolog serving on NAME://host:port" lines: `proc.listeners` maps each listener name to its
(host, port), `proc.bootstrap_for(NAME)` gives its bootstrap address, and a restart keeps the same ports.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
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


METADATA_V0 = struct.pack(">hhi", 3, 0, 1) + struct.pack(">h", 6) + b"probes" + struct.pack(">i", 0)


def answers_metadata(port: int) -> bool:
    """A Metadata v0 request (no topics) to 127.0.0.1:`port` is answered: the broker has opened its logs and
    serves (what a client or a test fixture waits for after a start)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(struct.pack(">i", len(METADATA_V0)) + METADATA_V0)
            head = s.recv(8)
            return len(head) == 8 and struct.unpack(">i", head[4:8])[0] == 1
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortTaken(Exception):
    """The port picked for a first start was bound by another process before the broker bound it."""


class BrokerProcess:
    def __init__(self, data_dir: Path, configs: dict[str, str] | None = None, port: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.configs = {**TEST_CONFIGS, **(configs or {})}
        self.port = port or free_port()
        # A port picked here may be taken by another process (another xdist worker) before the broker binds
        # it: the first start then tries another. A restart keeps its port, which clients reconnect to.
        self._may_move = port is None
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"broker-{self.port}.log"
        self.listeners: dict[str, tuple[str, int]] = {}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap_for(self, listener: str) -> str:
        host, port = self.listeners[listener.upper()]
        return f"{host}:{port}"

    def start(self, timeout: float = 120.0) -> BrokerProcess:
        for _ in range(3):
            try:
                return self._start(timeout)
            except PortTaken:
                self.port = free_port()
        return self._start(timeout)

    def _start(self, timeout: float) -> BrokerProcess:
        args = [sys.executable, "-m", "chronolog.cli.main", "serve", "--data-dir", str(self.data_dir),
                "--port", str(self.port)]
        for k, v in self.configs.items():
            args += ["--config", f"{k}={v}"]
        self._log = open(self.log_path, "ab")
        log_start = self._log.tell()
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.close()
                text = self.log_path.read_bytes()[log_start:].decode(errors="replace")
                if self._may_move and not self.listeners and "address already in use" in text:
                    raise PortTaken(self.port)
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {text[-2000:]}")
            # Our own process's "serving on" line, not a connection to the port: on a busy machine another
            # process may hold a port this one was given, and a start that returned before the broker had
            # installed its signal handlers would let a SIGTERM kill it uncleanly.
            if self._read_listeners(log_start):
                return self
            time.sleep(0.05)
        self.proc.kill()  # a start that failed leaves no broker behind for the rest of the session
        self.proc.wait(10)
        raise RuntimeError("broker did not start listening")

    def _read_listeners(self, log_start: int) -> bool:
        """True once every configured listener has printed its "serving on" line; pins port 0 listeners
        to the ports they got, so that a restart serves the same addresses."""
        with open(self.log_path, "rb") as f:
            f.seek(log_start)
            text = f.read().decode(errors="replace")
        found = {m[1]: (m[2], int(m[3])) for m in re.finditer(r"chronolog serving on (\w+)://(\S+):(\d+) ", text)}
        wanted = [item.split("://")[0].strip().upper() for item in self.configs.get("listeners", "").split(",")
                  if item.strip()]
        if not found or any(name not in found for name in wanted):
            return False
        self.listeners = found
        if wanted:
            self.configs["listeners"] = ",".join(f"{n}://{found[n][0]}:{found[n][1]}" for n in wanted)
            self.port = found[wanted[0]][1]
        return True

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120.0) -> int | None:
        """Signal the broker and wait for it to exit (a clean stop syncs its file system, which on a busy
        disk can take tens of seconds); SIGKILL after `timeout`, a bound only for a hung run."""
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

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

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
