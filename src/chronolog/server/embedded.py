"""A broker in a background thread of this process, for jobs and notebooks that want one without a
separate `chronolog serve`."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from chronolog.server.broker import Broker


class EmbeddedBroker:
    def __init__(self, data_dir: Path | str, host: str = "127.0.0.1", port: int = 0,
                 configs: dict[str, str] | None = None) -> None:
        self.broker = Broker(data_dir, host, port, configs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chronolog-embedded", daemon=True)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The broker's event loop (chronolog.testing runs its fault programming and admin API on it)."""
        return self._loop

    @property
    def bootstrap(self) -> str:
        return f"{self.broker.host}:{self.broker.port}"

    def start(self) -> EmbeddedBroker:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.broker.start(), self._loop).result(60)
        return self

    def stop(self, *, durable: bool = True) -> None:
        """Stop serving and close the logs; `durable=False` for a data dir about to be deleted (`Broker.stop`)."""
        asyncio.run_coroutine_threadsafe(self.broker.stop(durable=durable), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()  # its selector and self-pipe: nothing left open after a stop

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
