"""A pausable TCP proxy on loopback: the link between a Cohort node and one etcd member, cut at will.

`hold()` black-holes the link without closing anything: new connections are accepted, every byte
either way is read and kept, none is delivered. `heal()` delivers what was held, in order, then
forwards as usual, so a request that was sent during the cut reaches etcd late, exactly like a
stalled network path (and unlike a refused connection, which a client notices at once). Bytes a
client sent before it gave the connection up are still delivered to the member on heal.

Runs its own event loop in a thread, so a test may block (sleep, wait for a process) while the proxy
keeps reading.
"""
from __future__ import annotations

import asyncio
import threading

from cohort_process import free_port


class LinkProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._open: asyncio.Event | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"link-proxy-{self.port}", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "LinkProxy":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._accepted, "127.0.0.1", self.port)

    def hold(self) -> None:
        """Stop delivering bytes (both ways); keep every one read meanwhile."""
        self._loop.call_soon_threadsafe(self._open.clear)

    def heal(self) -> None:
        """Deliver what was held, in order, and forward again."""
        self._loop.call_soon_threadsafe(self._open.set)

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                task.cancel()
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    async def _accepted(self, client_reader, client_writer) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(self._pump(client_reader, upstream_writer), self._pump(upstream_reader, client_writer),
                             return_exceptions=True)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read into a queue at once (so the sender never blocks), deliver while the link is open."""
        held: asyncio.Queue[bytes] = asyncio.Queue()

        async def read() -> None:
            try:
                while data := await reader.read(65536):
                    held.put_nowait(data)
            except OSError:
                pass
            held.put_nowait(b"")

        reading = asyncio.create_task(read())
        try:
            while True:
                data = await held.get()
                await self._open.wait()
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            reading.cancel()
            writer.close()
