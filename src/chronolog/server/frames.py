"""Size-prefixed request frames read from a connection with as few copies as the frame's size calls for.

asyncio's StreamReader hands every chunk the socket gives as a new `bytes`, appends it to its buffer and
copies the frame out again: three new copies of each megabyte a librdkafka producer sends (`batch.size`),
each in fresh memory. `FrameReader` is a buffered protocol instead: small frames are assembled in one
scratch buffer it keeps for the connection (and copied out, a few KiB), and a frame larger than
`SMALL_FRAME` gets a `bytearray` that the kernel fills directly, so its bytes are copied once, from the
socket into the frame, and the Produce reader hands storage slices of it. That buffer starts at 1 MiB (a
librdkafka batch) and doubles as bytes arrive, so a size prefix alone never reserves the 100 MB that
`socket.request.max.bytes` allows. Buffers of half a MiB to a few MiB are taken from a small pool
(`FramePool`) once nobody holds them any more: a fresh megabyte per request was zero-filled, faulted in page
by page and handed back to the kernel, about a sixth of the broker's CPU in a librdkafka produce.

Like Kafka's muted channels, nothing past the frame asked for is interpreted before it is asked for: the
size limit in force when a frame is read (which depends on whether SASL has completed) is the one checked,
and when the scratch buffer is full the protocol stops reading the socket until the next frame is asked
for. `StreamWriter` writes, with the flow control it expects (`WriteFlow`).
"""

from __future__ import annotations

import asyncio
import collections
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any

SCRATCH_BYTES = 64 * 1024  # per connection (zero-filled, so resident): thousands of connections cost little
SMALL_FRAME = 32 * 1024  # frames up to this size are assembled in the scratch buffer
FIRST_CAPACITY = 1 << 20  # a larger frame's buffer starts at this size and doubles as its bytes arrive
POOLED_BYTES = 4 << 20  # frame buffers up to this size are kept for reuse (`FramePool`) ...
POOLED_FROM = FIRST_CAPACITY // 2  # ... and from this size: a smaller frame's new buffer costs less
POOLED_BUFFERS = 8  # ... at most this many, for all connections (librdkafka's pipelined Produce holds 5-6)
_BYTEARRAY_HEAD = bytearray().__sizeof__()  # a bytearray's `__sizeof__` is this plus its allocation


class FramePool:
    """Large frame buffers kept for the next large frames, as Kafka's `MemoryPool` keeps its receive
    buffers. A buffer handed out stays listed and is reused only once no one else refers to it: the request
    built on it, its records' memoryviews and anything storage kept of them are gone (CPython's reference
    count says so exactly; a view's buffer holds a reference too). A lock makes taking one atomic where
    event loops run in several threads of one process."""

    def __init__(self, buffers: int = POOLED_BUFFERS, largest: int = POOLED_BYTES) -> None:
        self._buffers: list[bytearray] = []
        self._keep = buffers
        self._largest = largest
        self._lock = threading.Lock()

    def take(self, size: int) -> bytearray:
        """A buffer of `size` bytes whose contents are stale (the caller overwrites them all). A listed one
        is reused only where `size` fits its allocation as it is: CPython reallocates a bytearray shrunk
        below half its allocation or grown past it, and a large one's realloc is an `mremap` whose pages are
        faulted in and zero-filled again (librdkafka's Produce frames run from 100 KB to 1 MB). A frame below
        `POOLED_FROM` gets a new buffer: the allocator hands back the block just freed, still in the CPU's
        cache, where the kernel's copy into a pooled buffer gone cold costs more than zero-filling a warm one
        (docs/benchmarks.md, the A/B's sink rows)."""
        if size < POOLED_FROM:
            return bytearray(size)
        with self._lock:
            spare = -1
            for i in range(len(self._buffers)):
                buf = self._buffers[i]
                # references: the list, this name and getrefcount's argument; any other is a holder
                if sys.getrefcount(buf) == 3:
                    allocated = buf.__sizeof__() - _BYTEARRAY_HEAD
                    if allocated // 2 <= size < allocated:
                        if len(buf) > size:
                            del buf[size:]
                        elif len(buf) < size:
                            buf.extend(bytes(size - len(buf)))
                        return buf
                    spare = i
            # A new buffer is allocated to the next power of two, so that later frames down to half its size
            # fit it; in a full pool it replaces an unused one of another size (the pool follows the sizes).
            buf = bytearray(1 << (size - 1).bit_length())
            del buf[size:]
            if spare >= 0 and len(self._buffers) >= self._keep:
                self._buffers[spare] = buf
            return buf

    def keep(self, buf: bytearray) -> None:
        """List `buf` (just handed out as a frame) for reuse once its frame is done with."""
        with self._lock:
            if POOLED_FROM <= len(buf) <= self._largest and len(self._buffers) < self._keep \
                    and all(b is not buf for b in self._buffers):
                self._buffers.append(buf)


POOL = FramePool()


class FrameSizeError(Exception):
    """A frame's size prefix outside what the connection accepts now; nothing of it was read."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class WriteFlow:
    """What `asyncio.StreamWriter` needs of its protocol: `drain` waits while the transport has paused
    writing, and fails once the connection is lost. asyncio's own `FlowControlMixin` does this but is an
    `asyncio.Protocol`, and an event loop may then treat the connection as a plain Protocol (uvloop
    does: it calls `data_received`, never `get_buffer`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._paused = False
        self._drain_waiters: collections.deque[asyncio.Future] = collections.deque()
        self._connection_lost = False

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection_lost = True
        for waiter in self._drain_waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)

    async def _drain_helper(self) -> None:
        if self._connection_lost:
            raise ConnectionResetError("Connection lost")
        if not self._paused:
            return
        waiter = self._loop.create_future()
        self._drain_waiters.append(waiter)
        try:
            await waiter
        finally:
            self._drain_waiters.remove(waiter)


class FrameReader(WriteFlow, asyncio.BufferedProtocol):
    """One connection: `read_frame` returns its frames in order; `connection_made` starts
    `serve(self)` as the connection's task."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 serve: Callable[[FrameReader], Coroutine[Any, Any, None]]) -> None:
        WriteFlow.__init__(self, loop)
        self._serve = serve
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task | None = None
        self._scratch = bytearray(SCRATCH_BYTES)
        self._scratch_view = memoryview(self._scratch)
        self._start = 0  # unread bytes are scratch[_start:_end]
        self._end = 0
        self._frame: bytearray | None = None  # a large frame being filled by the kernel
        self._frame_view: memoryview | None = None
        self._filled = 0
        self._frame_size = 0
        self._waiter: asyncio.Future | None = None
        self._eof = False
        self._error: BaseException | None = None
        self._reading_paused = False
        self.last_active = loop.time()  # the last byte received or response written (connections.max.idle.ms)
        self.busy = False  # a request of this connection is being served

    # -- protocol callbacks ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.task = self._loop.create_task(self._serve(self))

    def set_transport(self, transport: asyncio.Transport) -> None:
        """After `loop.start_tls`: the TLS transport replaces the TCP one."""
        self.transport = transport

    def _filling_frame(self) -> bool:
        """Bytes go into the large frame being read. Once it is whole, later bytes are the next frame's
        and go to scratch (empty since the large frame began), even before the reader has taken it: an
        event loop may read again at once (uvloop does; asyncio's runs the waiting reader first)."""
        return self._frame_view is not None and self._filled < self._frame_size

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._filling_frame():
            return self._frame_view[self._filled:]
        if self._end == len(self._scratch):
            self._compact()
        return self._scratch_view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self._loop.time()
        if self._filling_frame():
            self._filled += nbytes
            if self._filled < len(self._frame):
                return  # the reader waits for the whole frame, or for its buffer to be full
            if self._filled < self._frame_size:
                self._pause_reading()  # the reader grows the buffer, then reading goes on
        else:
            self._end += nbytes
            if self._end == len(self._scratch):
                self._compact()
                if self._end == len(self._scratch):  # full of frames not asked for yet: Kafka mutes here
                    self._pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # As StreamReaderProtocol: keep a plain socket open for the answer to what was already sent; TLS
        # closes (returning True has no effect there).
        return self.transport is not None and self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if exc is not None:
            self._error = exc
        self._eof = True
        self._wake()

    # -- reading -----------------------------------------------------------------------------------
    async def read_frame(self, minimum: int, maximum: int) -> bytes | bytearray:
        """The next frame without its size prefix; FrameSizeError if the prefix is outside
        [minimum, maximum] (nothing allocated), IncompleteReadError if the peer stops mid-frame."""
        if self._end - self._start < 4:  # (a frame already here is taken without a wait)
            await self._want(4)
        size = int.from_bytes(self._scratch_view[self._start:self._start + 4], "big", signed=True)
        if not minimum <= size <= maximum:
            raise FrameSizeError(size)
        self._start += 4
        if size <= SMALL_FRAME or self._end - self._start >= size:
            if self._end - self._start < size:
                await self._want(size)
            frame = bytes(self._scratch_view[self._start:self._start + size])
            self._start += size
            self._resume_reading()
            return frame
        # The buffer grows with the bytes that arrive (a size prefix alone does not reserve 100 MB).
        frame = POOL.take(min(size, FIRST_CAPACITY))
        have = self._end - self._start
        frame[:have] = self._scratch_view[self._start:self._end]
        self._start = self._end = 0
        self._frame, self._frame_view, self._filled, self._frame_size = frame, memoryview(frame), have, size
        try:
            while self._filled < size:
                if self._filled == len(frame):
                    self._frame_view.release()
                    frame.extend(bytes(min(len(frame), size - len(frame))))
                    self._frame_view = memoryview(frame)
                self._resume_reading()
                await self._wait(size)
        finally:
            self._frame_view.release()
            self._frame = self._frame_view = None
        POOL.keep(frame)
        return frame

    async def _want(self, n: int) -> None:
        """Until scratch holds `n` unread bytes (n <= its size)."""
        while self._end - self._start < n:
            if len(self._scratch) - self._start < n:
                self._compact()
            self._resume_reading()
            await self._wait(n)

    async def _wait(self, expected: int) -> None:
        if self._error is not None:
            raise self._error
        if self._eof:
            raise asyncio.IncompleteReadError(b"", expected)
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _compact(self) -> None:
        n = self._end - self._start
        if self._start:
            self._scratch[:n] = bytes(self._scratch_view[self._start:self._end])
            self._start, self._end = 0, n

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.transport.is_closing():
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self._end < len(self._scratch) and self.transport is not None:
            self._reading_paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()
