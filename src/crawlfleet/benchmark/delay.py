"""A TCP proxy on loopback that delays what it forwards: Redis "a network hop away".

``DelayProxy(target_port, delay_ms)`` listens on ``127.0.0.1`` and forwards every
connection to ``127.0.0.1:target_port``; each chunk read in either direction is written
on ``delay_ms / 2`` later (order kept), so a request and its reply take ``delay_ms`` more
per round trip, as across a zone or a region (no loss, no reordering, no bandwidth
limit). What it cannot model: a path whose two directions differ.

Run it in its own process (``python -m crawlfleet.benchmark.delay TARGET_PORT DELAY_MS``
prints its port, then forwards until killed) so that the processes measured behind it
cannot starve it of its event loop; :func:`start_delay_proxy` does that and returns the
process and port. The target is always loopback: nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys

__all__ = ["DelayProxy", "start_delay_proxy", "stop_delay_proxy"]

_CHUNK = 65536


class DelayProxy:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target_port``, each way ``delay_ms / 2``
    late. ``port`` 0 picks a free one (read :attr:`port` after :meth:`start`)."""

    def __init__(self, target_port: int, delay_ms: float, *, port: int = 0) -> None:
        if not 0 < target_port <= 65535:
            raise ValueError(f"target port must be between 1 and 65535, got {target_port}")
        if delay_ms < 0:
            raise ValueError(f"delay must be >= 0 ms, got {delay_ms}")
        self.target_port = target_port
        self.one_way = delay_ms / 2000
        self._port = port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the delay proxy is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", self._port)
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        pumps = [
            asyncio.ensure_future(self._pump(reader, up_writer)),
            asyncio.ensure_future(self._pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
                self._tasks.discard(task)
            for w in (writer, up_writer):
                w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read chunks as they come; each is written *one_way* after it was read."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    return
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        delivering = asyncio.ensure_future(deliver())
        try:
            while True:
                data = await reader.read(_CHUNK)
                queue.put_nowait((loop.time() + self.one_way, data))
                if not data:
                    break
            await delivering
        finally:
            delivering.cancel()


def start_delay_proxy(target_port: int, delay_ms: float) -> tuple[subprocess.Popen[str], int]:
    """A :class:`DelayProxy` in a process of its own: (the process, its port). The caller
    ends it with :func:`stop_delay_proxy`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawlfleet.benchmark.delay", str(target_port), str(delay_ms)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # its port, or nothing when it failed to start
    if not line.strip().isdigit():
        proc.kill()
        raise RuntimeError(f"the delay proxy did not start (it printed {line!r})")
    return proc, int(line)


def stop_delay_proxy(proc: subprocess.Popen[str]) -> None:
    """End a proxy :func:`start_delay_proxy` started: terminated, killed if it lingers,
    reaped, its pipe closed."""
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


async def _serve(target_port: int, delay_ms: float) -> None:
    proxy = DelayProxy(target_port, delay_ms)
    print(await proxy.start(), flush=True)
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m crawlfleet.benchmark.delay",
        description="forward 127.0.0.1:PORT (printed) to 127.0.0.1:TARGET, DELAY ms a round trip",
    )
    parser.add_argument("target_port", type=int)
    parser.add_argument("delay_ms", type=float)
    args = parser.parse_args(argv)
    try:
        asyncio.run(_serve(args.target_port, args.delay_ms))
    except ValueError as exc:
        parser.exit(2, f"{parser.prog}: {exc}\n")
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
