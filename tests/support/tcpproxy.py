"""A loopback TCP proxy that can delay answers, so tests can hold many object-store
requests in flight at once."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from tests.support.cluster import free_port_block


class DelayProxy:
    def __init__(self, target_port: int, delay_s: float) -> None:
        self.target_port = target_port
        self.delay_s = delay_s
        self.port = free_port_block(1)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> DelayProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", self.port)
        )
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._close_loop()

    def _close_loop(self) -> None:
        """End the connections still piped and close the loop, sockets included (its
        self-pipe too: an unclosed loop leaks it, a ResourceWarning later)."""
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.run_until_complete(asyncio.sleep(0))  # closed transports drop their sockets
        self._loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        # The proxy stopping cancels this: end quietly (asyncio's stream callback would
        # log a cancelled connection handler as an error).
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(
                self._pipe(reader, up_writer, 0.0), self._pipe(up_reader, writer, self.delay_s)
            )

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float) -> None:
        try:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while chunk := await src.read(65536):
                    if delay:
                        await asyncio.sleep(delay)
                    dst.write(chunk)
                    await dst.drain()
        finally:  # also when the proxy stops (cancelled)
            with contextlib.suppress(OSError):
                dst.close()
