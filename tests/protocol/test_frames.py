"""`chronolog.server.frames.FrameReader` over real loopback sockets: frames of every size class (in the
scratch buffer, larger than it, filled by the kernel directly) arrive whole and in order however the
client's writes split them, a reader slower than the client (the scratch buffer fills, reading pauses)
loses nothing, a size outside the limit is refused before anything is read, and a peer that stops mid-frame
ends the reading."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading

import pytest

from chronolog.server.frames import (
    POOLED_FROM,
    SCRATCH_BYTES,
    SMALL_FRAME,
    FramePool,
    FrameReader,
    FrameSizeError,
)


def _serve(script, client) -> list:
    """Runs a server whose connection task is `script(frames)` and a client thread `client(port)`;
    returns what the script returned."""
    result: list = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        async def serve(frames: FrameReader) -> None:
            try:
                result.append(await script(frames))
            except BaseException as exc:  # noqa: BLE001 (handed to the test)
                result.append(exc)
            finally:
                frames.transport.close()
                done.set_result(None)

        server = await loop.create_server(lambda: FrameReader(loop, serve), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        thread = threading.Thread(target=client, args=(port,), daemon=True)
        thread.start()
        await asyncio.wait_for(done, 30)
        server.close()
        await asyncio.to_thread(thread.join, 10)

    asyncio.run(main())
    return result


def _send_in_pieces(port: int, data: bytes, rng: random.Random, close: bool = True) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        pos = 0
        while pos < len(data):
            n = rng.choice([1, 3, 4, 5, 100, 4096, 65536, 300_000])
            sock.sendall(data[pos:pos + n])
            pos += n
        if not close:
            sock.recv(1)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("slow", [False, True])
def test_frames_of_every_size_arrive_whole_and_in_order(seed, slow):
    rng = random.Random(seed)
    sizes = [0, 8, 1000, SMALL_FRAME, SMALL_FRAME + 1, SCRATCH_BYTES - 4, SCRATCH_BYTES + 1, 1 << 20, 3_000_000]
    sizes += [rng.choice([rng.randrange(0, 200), rng.randrange(0, 70_000), rng.randrange(0, 2_000_000)])
              for _ in range(30)]
    rng.shuffle(sizes)
    frames = [rng.randbytes(n) for n in sizes]
    wire = b"".join(struct.pack(">i", len(f)) + f for f in frames)

    async def script(reader: FrameReader) -> list:
        got = []
        for _ in frames:
            if slow:
                await asyncio.sleep(0.01)  # the client runs ahead; the scratch buffer fills and reading pauses
            got.append(bytes(await reader.read_frame(0, 1 << 30)))
        return got

    (got,) = _serve(script, lambda port: _send_in_pieces(port, wire, random.Random(seed), close=False))
    assert not isinstance(got, BaseException), got
    assert [len(g) for g in got] == sizes and got == frames


@pytest.mark.parametrize("size", [-1, 7, 1025, 2**31 - 1])
def test_a_size_outside_the_limit_is_refused_before_reading(size):
    async def script(reader: FrameReader):
        with pytest.raises(FrameSizeError) as caught:
            await reader.read_frame(8, 1024)
        return caught.value.size

    def client(port: int) -> None:
        try:
            _send_in_pieces(port, struct.pack(">i", size) + b"x" * 64, random.Random(1), close=False)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed on the refused prefix while the rest was being sent

    (refused,) = _serve(script, client)
    assert refused == size


@pytest.mark.parametrize("stop_at", [2, 4, 1000, SMALL_FRAME + 100, 500_000])
def test_a_peer_that_stops_mid_frame_ends_the_reading(stop_at):
    frame = struct.pack(">i", 1_000_000) + bytes(1_000_000)

    async def script(reader: FrameReader):
        with pytest.raises(asyncio.IncompleteReadError):
            await reader.read_frame(0, 1 << 30)
        return "ended"

    assert _serve(script, lambda port: _send_in_pieces(port, frame[:stop_at], random.Random(2))) == ["ended"]


def test_large_frames_are_filled_in_place_not_copied_out_of_scratch():
    """A frame above SMALL_FRAME comes back as the bytearray the kernel wrote into."""
    frame = bytes(range(256)) * 4096  # 1 MiB

    async def script(reader: FrameReader):
        return await reader.read_frame(0, 1 << 30)

    (got,) = _serve(script, lambda port: _send_in_pieces(port, struct.pack(">i", len(frame)) + frame,
                                                      random.Random(3), close=False))
    assert isinstance(got, bytearray) and got == frame


class _Transport:
    """Just what FrameReader calls on its transport, for driving its callbacks by hand."""

    def __init__(self) -> None:
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name, default=None):
        return default

    def close(self) -> None:
        pass


def _feed(reader: FrameReader, data: bytes) -> None:
    """The loop's side: get_buffer / buffer_updated until `data` is in, never yielding to the reader, as
    an event loop that reads several times per readiness event does (uvloop)."""
    view = memoryview(data)
    while view:
        buf = reader.get_buffer(-1)
        assert len(buf) > 0, "get_buffer handed out an empty buffer"
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        reader.buffer_updated(n)
        view = view[n:]


def test_bytes_after_a_whole_large_frame_are_the_next_frames_before_the_reader_takes_it():
    big = bytes(range(256)) * (4 * SMALL_FRAME // 256)
    small = b"the next frame"
    got: list = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def serve(frames: FrameReader) -> None:
            got.append(await frames.read_frame(0, 1 << 30))
            got.append(await frames.read_frame(0, 1 << 30))

        reader = FrameReader(loop, serve)
        reader.connection_made(_Transport())
        _feed(reader, struct.pack(">i", len(big)) + big[:1000])
        for _ in range(3):
            await asyncio.sleep(0)  # the reader takes the prefix and starts filling the large frame
        _feed(reader, big[1000:] + struct.pack(">i", len(small)) + small)
        await asyncio.wait_for(reader.task, 5)

    asyncio.run(main())
    assert got == [big, small]


def test_the_reader_is_only_a_buffered_protocol():
    """An event loop may treat a protocol that is also an `asyncio.Protocol` as a plain one and call its
    `data_received` (uvloop does): asyncio's FlowControlMixin is one, so FrameReader has its own."""

    async def make() -> FrameReader:
        return FrameReader(asyncio.get_running_loop(), None)

    reader = asyncio.run(make())
    assert isinstance(reader, asyncio.BufferedProtocol) and not isinstance(reader, asyncio.Protocol)


def test_a_large_frame_buffer_is_reused_only_once_nothing_holds_it():
    """FramePool: the frames of a connection come back whole whether their buffer is new or reused; a
    frame (or a view of it, as the Produce reader hands storage) still held is never written into."""
    first, second, third = (bytes([n]) * (POOLED_FROM + n) for n in (1, 2, 3))
    pool = FramePool()
    got: list = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def serve(frames: FrameReader) -> None:
            kept = await frames.read_frame(0, 1 << 30)
            view = memoryview(kept)[10:20]  # held, as a slice of a Produce's records would be
            got.append(bytes(kept))
            frame = await frames.read_frame(0, 1 << 30)
            got.append((frame is kept, bytes(frame)))
            second_id = id(frame)  # the pool holds it: the id stays this object's
            del frame
            frame = await frames.read_frame(0, 1 << 30)
            got.append((frame is not kept, id(frame) == second_id, bytes(frame)))
            got.append(bytes(view))

        reader = FrameReader(loop, serve)
        reader.connection_made(_Transport())
        for f in (first, second, third):
            _feed(reader, struct.pack(">i", len(f)) + f[:1000])
            for _ in range(3):
                await asyncio.sleep(0)  # the reader takes the prefix and starts filling the large frame
            _feed(reader, f[1000:])
            for _ in range(3):
                await asyncio.sleep(0)
        await asyncio.wait_for(reader.task, 5)

    import chronolog.server.frames as frames_module

    saved, frames_module.POOL = frames_module.POOL, pool
    try:
        asyncio.run(main())
    finally:
        frames_module.POOL = saved
    assert got == [first, (False, second), (True, True, third), first[10:20]]
    buf = pool.take(len(first))  # nothing holds the pooled buffers now: one comes back, resized
    assert len(buf) == len(first) and any(b is buf for b in pool._buffers)


def test_a_pooled_buffer_is_resized_only_within_its_allocation():
    """FramePool.take: a listed buffer serves frames from half its allocation up to all of it, without a
    realloc (for a large buffer an `mremap` whose pages are faulted in again); a frame below or above that
    gets a new buffer, which in a full pool takes the place of an unused one of another size. A frame below
    `POOLED_FROM` gets a plain new buffer, never listed."""
    pool = FramePool(buffers=2)
    first = pool.take(600_000)  # allocated to 1 MiB
    allocated = first.__sizeof__()
    pool.keep(first)
    del first
    for size in (800_000, 1 << 19, 1 << 20, 600_000):
        buf = pool.take(size)
        assert buf is pool._buffers[0] and len(buf) == size and buf.__sizeof__() == allocated
        del buf
    small = pool.take(POOLED_FROM - 1)
    pool.keep(small)
    assert all(b is not small for b in pool._buffers) and pool._buffers[0].__sizeof__() == allocated
    pool.keep(bytearray(3 << 20))  # a frame grown past the first capacity, as `read_frame` grows one
    assert len(pool._buffers) == 2
    held = pool._buffers[0]
    frame = pool.take(700_000)  # the 1 MiB one is held, the 3 MiB one too large: a new one replaces it
    assert len(frame) == 700_000 and len(pool._buffers) == 2
    assert pool._buffers[0] is held and pool._buffers[1] is frame
