"""Forwarding HTTP proxies on loopback, for tests of proxy rotation, reuse and eviction.

A :class:`ProxyServer` listens on ``127.0.0.1:<port>`` and forwards absolute-URI requests
(``GET http://127.0.0.5:8080/p/1 HTTP/1.1``, as Scrapy sends them to an http proxy) from
its own **source address** (``127.0.0.2``, ...: all of ``127.0.0.0/8`` is loopback on
Linux), so the target sees one client IP per proxy. The answer comes back as the target
gave it (no redirect followed, no decompression) minus hop-by-hop headers. Only IPv4
loopback literals are valid targets, anything else gets ``403`` (no name is resolved, so
nothing leaves the machine); ``CONNECT`` gets ``405``, a request that is not an absolute
``http://`` URI ``400``, a chunked request body ``411``. With ``username`` and
``password``, a request without them in ``Proxy-Authorization: Basic`` gets ``407``.

``mode`` (:data:`MODES`, changed at run time by ``set_mode``): ``"ok"`` forwards;
``"refuse"`` does not listen (the port stays bound, so connecting is refused; at the
switch idle connections are cut, and the others once their answer is relayed); ``"drop"``
reads the request and closes without an answer; ``"502"`` answers ``502 Bad Gateway``;
``"slow"`` waits ``slow_seconds``, then forwards (unless the client left). With
``fail_after`` N, the mode becomes ``then`` after N requests got past those checks. A
target that cannot be reached gives ``502``, one that does not answer in
``upstream_timeout_seconds`` ``504``. ``stats()`` (never the password)::

    {"address": "127.0.0.1:PORT", "port": int, "source_address": "127.0.0.2",
     "mode": str, "auth": bool,
     "connections": int,   # TCP connections accepted
     "received": int,      # requests read = rejected + failed + forwarded (+ in flight)
     "rejected": int,      # answered 400, 403, 405, 407, 411, 413 or 431
     "failed": int,        # failed by the mode, an unreachable target, a client that left
     "forwarded": int,     # answered with the target's response
     "hosts": {"127.0.0.5": int, ...}}  # target host of each request not rejected

:class:`ProxyFarm` runs K of them in a background thread, like
:class:`~crawlfleet.testsite.server.TestSite`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import ipaddress
import logging
import socket
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from http import HTTPStatus
from typing import Any, Literal, NamedTuple, TypedDict, TypeVar, get_args
from urllib.parse import quote, urlsplit

import aiohttp
from yarl import URL

__all__ = ["MODES", "REALM", "ProxyFarm", "ProxyOptions", "ProxyServer"]

log = logging.getLogger(__name__)

Mode = Literal["ok", "refuse", "drop", "502", "slow"]
#: The failure modes, ``"ok"`` first.
MODES: tuple[str, ...] = get_args(Mode)
#: The realm of the ``Proxy-Authenticate`` challenge.
REALM = "crawlfleet-test"

_T = TypeVar("_T")
_Headers = list[tuple[str, str]]
_HOP_BY_HOP = frozenset((
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
    "proxy-connection", "te", "trailer", "trailers", "transfer-encoding", "upgrade",
))  # fmt: skip
# the body is re-framed and the Host taken from the URI, so these are not copied either
_NOT_FORWARDED = _HOP_BY_HOP | {"host", "content-length", "expect"}
_COUNTERS = ("connections", "received", "rejected", "failed", "forwarded")
_MAX_HEAD = 64 * 1024
_MAX_BODY = 16 * 1024 * 1024
_CHUNK = 64 * 1024


class _Request(NamedTuple):
    method: str
    target: str
    headers: _Headers
    body: bytes
    keep_alive: bool


class _BadRequest(Exception):
    """The request cannot be read: answer ``status`` (``args[0]``) and close."""


class ProxyServer:
    """One forwarding proxy (see the module docstring). :meth:`start`, :meth:`stop` and
    :meth:`set_mode` run in one event loop, :meth:`stats` in that loop's thread.

    ``port`` 0 picks a free port; ``fail_after`` None never switches to ``then``;
    ``username`` and ``password`` go together. Invalid arguments raise ``ValueError``.
    """

    def __init__(
        self,
        *,
        source_address: str = "127.0.0.1",
        port: int = 0,
        username: str | None = None,
        password: str | None = None,
        mode: str = "ok",
        slow_seconds: float = 5.0,
        fail_after: int | None = None,
        then: str = "502",
        upstream_timeout_seconds: float = 30.0,
    ) -> None:
        if not _is_loopback(source_address):
            raise ValueError(f"source_address must be in 127.0.0.0/8, got {source_address!r}")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be between 0 and 65535, got {port}")
        if (username is None) != (password is None):
            raise ValueError("username and password must be set together")
        if username is not None and (not username or ":" in username):
            raise ValueError("username must be non-empty and contain no ':'")
        _check_mode("mode", mode)
        _check_mode("then", then)
        if slow_seconds < 0:
            raise ValueError(f"slow_seconds must be >= 0, got {slow_seconds}")
        if fail_after is not None and fail_after < 0:
            raise ValueError(f"fail_after must be >= 0 or None, got {fail_after}")
        if upstream_timeout_seconds <= 0:
            raise ValueError(
                f"upstream_timeout_seconds must be > 0, got {upstream_timeout_seconds}"
            )
        self.source_address = source_address
        self.username = username
        self._password = password
        self._credentials = None if password is None else f"{username}:{password}".encode()
        self.mode = mode
        self.slow_seconds = slow_seconds
        self.fail_after = fail_after
        self.then = then
        self._timeout = upstream_timeout_seconds
        self._requested_port = port
        self._port: int | None = None
        self._reserved: socket.socket | None = None  # bound, never listening: "refuse"
        self._server: asyncio.Server | None = None
        self._session: aiohttp.ClientSession | None = None
        self._clients: set[asyncio.Task[None]] = set()
        self._idle: set[asyncio.StreamWriter] = set()  # waiting for their next request
        self._counts: Counter[str] = Counter()
        self._hosts: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"<ProxyServer 127.0.0.1:{self._port} from {self.source_address} {self.mode}>"

    @property
    def port(self) -> int:
        """The bound port; ``RuntimeError`` before :meth:`start`."""
        if self._port is None:
            raise RuntimeError("the proxy is not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://[user:password@]127.0.0.1:PORT``, for a crawler's proxy setting."""
        if self.username is None or self._password is None:
            return f"http://127.0.0.1:{self.port}"
        user, password = quote(self.username, safe=""), quote(self._password, safe="")
        return f"http://{user}:{password}@127.0.0.1:{self.port}"

    async def start(self) -> int:
        """Bind, and listen unless the mode is ``"refuse"``; returns the port."""
        if self._session is not None:
            raise RuntimeError("the proxy is already started")
        self._reserved = _bind(self._requested_port)
        self._port = self._reserved.getsockname()[1]
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(local_addr=(self.source_address, 0)),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
            timeout=aiohttp.ClientTimeout(total=self._timeout),
        )
        if self.mode != "refuse":
            await self._listen()
        return self.port

    async def stop(self) -> None:
        """Stop listening, cut every connection, free the port. Idempotent."""
        self._unlisten()
        tasks = list(self._clients)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        if self._reserved is not None:
            self._reserved.close()
        self._session = self._reserved = None

    async def set_mode(self, mode: str) -> None:
        """Switch to ``mode`` now; a pending ``fail_after`` switch is cancelled."""
        _check_mode("mode", mode)
        self.fail_after = None
        previous, self.mode = self.mode, mode
        if mode == "refuse" and previous != "refuse":
            self._unlisten()
            for writer in self._idle:
                writer.transport.abort()
        elif mode != "refuse" and previous == "refuse" and self._reserved is not None:
            await self._listen()

    def stats(self) -> dict[str, Any]:
        """The counters (see the module docstring)."""
        return {
            "address": f"127.0.0.1:{self._port}",
            "port": self._port,
            "source_address": self.source_address,
            "mode": self.mode,
            "auth": self._credentials is not None,
            **{name: self._counts[name] for name in _COUNTERS},
            "hosts": dict(self._hosts),
        }

    def reset(self) -> None:
        """Clear the counters (not the mode)."""
        self._counts.clear()
        self._hosts.clear()

    async def _listen(self) -> None:
        sock, self._reserved = self._reserved, None
        assert sock is not None
        self._server = await asyncio.start_server(self._serve, sock=sock, limit=_MAX_HEAD)

    def _unlisten(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()  # this closes the socket: bind a quiet one to keep the port
            self._reserved = _bind(self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        self._counts["connections"] += 1
        try:
            while True:
                self._idle.add(writer)
                request = await _read_request(reader)
                self._idle.discard(writer)
                if request is None:
                    break
                self._counts["received"] += 1
                if not await self._answer(reader, writer, request) or self.mode == "refuse":
                    break
        except _BadRequest as bad:
            self._counts.update(("received", "rejected"))
            with contextlib.suppress(ConnectionError):
                await _reply(writer, bad.args[0], keep_alive=False)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away, or the mode became "refuse"
        except asyncio.CancelledError:
            pass  # stop() ends this task; asyncio would report it
        finally:
            self._idle.discard(writer)
            self._clients.discard(task)
            writer.close()

    async def _answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: _Request
    ) -> bool:
        """Answer one request; whether the connection stays open."""
        method, target, headers, _, keep_alive = request
        status = self._reject(method, target, headers)
        if status:
            self._counts["rejected"] += 1
            log.debug("%r: %s %s rejected with %d", self, method, target, status)
            await _reply(writer, status, keep_alive=keep_alive and status != 405)
            return keep_alive and status != 405
        self._hosts[urlsplit(target).hostname or ""] += 1
        if self.fail_after is not None and self._hosts.total() > self.fail_after:
            await self.set_mode(self.then)
        if self.mode == "slow":
            await asyncio.sleep(self.slow_seconds)
            if reader.at_eof():  # the client gave up
                self._counts["failed"] += 1
                return False
        if self.mode in ("drop", "refuse"):
            self._counts["failed"] += 1
            return False
        if self.mode == "502":
            self._counts["failed"] += 1
            await _reply(writer, 502, keep_alive=keep_alive)
            return keep_alive
        return await self._forward(writer, request)

    def _reject(self, method: str, target: str, headers: _Headers) -> int:
        """The status a request is refused with before it is forwarded, or 0."""
        if self._credentials is not None and not self._authorized(headers):
            return 407
        if method == "CONNECT":
            return 405
        parts = urlsplit(target)
        try:
            parts.port  # noqa: B018 (raises ValueError for a bad port)
        except ValueError:
            return 400
        if parts.scheme != "http" or not parts.hostname:
            return 400
        return 0 if _is_loopback(parts.hostname) else 403

    def _authorized(self, headers: _Headers) -> bool:
        scheme, _, token = _header(headers, "proxy-authorization").partition(" ")
        if scheme.lower() != "basic" or self._credentials is None:
            return False
        try:
            given = base64.b64decode(token.strip(), validate=True)
        except binascii.Error:
            return False
        return hmac.compare_digest(given, self._credentials)

    async def _forward(self, writer: asyncio.StreamWriter, request: _Request) -> bool:
        assert self._session is not None
        method, target, headers, body, keep_alive = request
        dropped = _NOT_FORWARDED | _connection_tokens(headers)
        outgoing = [(k, v) for k, v in headers if k.lower() not in dropped]
        answered = False
        try:
            async with self._session.request(
                method,
                URL(target, encoded=True),
                headers=outgoing,
                data=body or None,
                allow_redirects=False,
            ) as response:
                answered = True
                self._counts["forwarded"] += 1
                await _relay(writer, method, response, keep_alive)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.debug("%r: %s %s failed: %r", self, method, target, exc)
            if answered:
                return False  # the answer had begun: cut it short
            self._counts["failed"] += 1
            status = 504 if isinstance(exc, TimeoutError) else 502
            await _reply(writer, status, keep_alive=keep_alive)
        return keep_alive


class ProxyOptions(TypedDict, total=False):
    """One proxy of a :class:`ProxyFarm`: :class:`ProxyServer`'s arguments but
    ``source_address``."""

    port: int
    username: str
    password: str
    mode: str
    slow_seconds: float
    fail_after: int
    then: str
    upstream_timeout_seconds: float


class ProxyFarm:
    """K :class:`ProxyServer` in a background thread with its own event loop; proxy ``i``
    connects out from ``127.0.0.{2+i}``. Every method is safe to call from any thread::

        with ProxyFarm([{}, {"username": "u", "password": "p"}, {"mode": "502"}]) as farm:
            farm.urls, farm.stats(), farm.set_mode(0, "drop")
    """

    def __init__(self, configs: Sequence[ProxyOptions]) -> None:
        if not 1 <= len(configs) <= 253:
            raise ValueError(f"configs must list 1 to 253 proxies, got {len(configs)}")
        for i, config in enumerate(configs):
            unknown = sorted(set(config) - ProxyOptions.__optional_keys__)
            if unknown:
                raise ValueError(f"configs[{i}]: unknown proxy option {unknown[0]!r}")
        self.proxies = [
            ProxyServer(source_address=f"127.0.0.{2 + i}", **config)
            for i, config in enumerate(configs)
        ]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def urls(self) -> list[str]:
        """Each proxy's URL, with its credentials if it has any."""
        return [proxy.url for proxy in self.proxies]

    def start(self) -> None:
        """Start the thread and the proxies; returns once they listen."""
        if self._loop is not None:
            raise RuntimeError("the farm is already started")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=_run, args=(self._loop,), name="proxyfarm")
        self._thread.daemon = True
        self._thread.start()
        try:
            self._await(lambda: asyncio.gather(*(p.start() for p in self.proxies)))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every proxy and join the thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self._await(lambda: asyncio.gather(*(p.stop() for p in self.proxies)))
        finally:
            self._loop = self._thread = None
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)

    def set_mode(self, i: int, mode: str) -> None:
        """Switch proxy ``i`` to ``mode`` (one of :data:`MODES`)."""
        self._await(lambda: self.proxies[i].set_mode(mode))

    def stats(self) -> list[dict[str, Any]]:
        """Every proxy's counters, in order, read in the proxies' loop."""
        return self._await(lambda: _now([proxy.stats() for proxy in self.proxies]))

    def reset(self) -> None:
        """Clear every proxy's counters."""

        async def clear() -> None:
            for proxy in self.proxies:
                proxy.reset()

        self._await(clear)

    def __enter__(self) -> ProxyFarm:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _await(self, make: Callable[[], Awaitable[_T]]) -> _T:
        """Run ``make()`` and await its result in the loop (``make`` runs there too)."""
        if self._loop is None:
            raise RuntimeError("the farm is not started")

        async def call() -> _T:
            return await make()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=30)


async def _now(value: _T) -> _T:
    return value


def _run(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _check_mode(name: str, mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"{name} must be one of {', '.join(MODES)}; got {mode!r}")


def _is_loopback(host: str) -> bool:
    """Whether ``host`` is an IPv4 literal in ``127.0.0.0/8`` (names are not resolved)."""
    try:
        return ipaddress.IPv4Address(host).is_loopback
    except ValueError:
        return False


def _bind(port: int) -> socket.socket:
    """A socket bound to ``127.0.0.1:port``, not listening: connecting to it is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return sock


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """The next request on a connection, ``None`` if the client closed it between two."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise _BadRequest(431) from None
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise _BadRequest(400) from None
        return None
    request_line, *lines = head.decode("latin-1").split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(400)
    headers = []
    for line in filter(None, lines):
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise _BadRequest(400)
        headers.append((name, value.strip()))
    if _header(headers, "transfer-encoding"):
        raise _BadRequest(411)  # crawlers send a Content-Length; a test tool needs no more
    length = _header(headers, "content-length") or "0"
    if not length.isdigit():
        raise _BadRequest(400)
    if int(length) > _MAX_BODY:
        raise _BadRequest(413)
    body = await reader.readexactly(int(length))
    keep_alive = parts[2] == "HTTP/1.1" and "close" not in _connection_tokens(headers)
    return _Request(parts[0], parts[1], headers, body, keep_alive)


def _header(headers: _Headers, name: str) -> str:
    """The first value of header ``name`` (lower case), or ``""``."""
    return next((v for k, v in headers if k.lower() == name), "")


def _connection_tokens(headers: _Headers) -> set[str]:
    """The tokens of ``Connection``: ``close``, or headers that are hop-by-hop too."""
    return {t.strip().lower() for t in _header(headers, "connection").split(",") if t.strip()}


def _head(status: int, reason: str, lines: list[str]) -> bytes:
    return "\r\n".join([f"HTTP/1.1 {status} {reason}", *lines, "", ""]).encode("latin-1")


async def _reply(writer: asyncio.StreamWriter, status: int, *, keep_alive: bool) -> None:
    """The proxy's own short plain-text answer."""
    phrase = HTTPStatus(status).phrase
    body = f"{status} {phrase} (crawlfleet test proxy)\n".encode()
    lines = [
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Connection: " + ("keep-alive" if keep_alive else "close"),
    ]
    if status == 407:
        lines.append(f'Proxy-Authenticate: Basic realm="{REALM}"')
    writer.write(_head(status, phrase, lines) + body)
    await writer.drain()


async def _relay(
    writer: asyncio.StreamWriter, method: str, response: aiohttp.ClientResponse, keep_alive: bool
) -> None:
    """Write the target's answer: its raw headers minus hop-by-hop ones, its body as is."""
    raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers]
    dropped = _HOP_BY_HOP | _connection_tokens(raw)
    lines = [f"{k}: {v}" for k, v in raw if k.lower() not in dropped]
    bodiless = method == "HEAD" or response.status in (204, 304) or response.status < 200
    # without a length: chunks on a kept-alive connection, else the body ends at the close
    chunked = not bodiless and keep_alive and not _header(raw, "content-length")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    lines.append("Connection: " + ("keep-alive" if keep_alive else "close"))
    writer.write(_head(response.status, response.reason or "", lines))
    if not bodiless:
        async for chunk in response.content.iter_chunked(_CHUNK):
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            await writer.drain()
        if chunked:
            writer.write(b"0\r\n\r\n")
    await writer.drain()
