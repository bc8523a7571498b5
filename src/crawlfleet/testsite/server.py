"""The test site's HTTP server: a :class:`SiteModel` served by aiohttp on loopback.

Host ``i`` listens on ``127.0.0.{i+1}``, all hosts on one port. Bodies are rendered once
at start-up; a request costs a dict lookup and a counter update. Every host answers:

- the model's pages, catalogues and files; ``/r/<n>`` (302 to page ``n``),
  ``/status/<code>`` (that status), ``/slow`` (200 after ``timeout_seconds``),
  anything else 404; ``latency_seconds`` is added to all of these;
- with an archive in the model, its listing pages and documents on host 0 (see
  :mod:`crawlfleet.testsite.archive`);
- ``/robots.txt`` (allow all, with ``Crawl-delay: robots_crawl_delay`` when set;
  counted apart, no latency);
- with ``ban_above_rate`` N > 0, a request arriving when its host has already
  answered N requests in the last second gets ``429 Too Many Requests`` instead (counted
  in ``banned``, not as a fetch), like a site that defends itself;
- with ``hostile`` (:class:`~crawlfleet.testsite.hostile.Hostile`, off by default): bans
  (403 "Access denied"), flaky URLs that fail their first attempts (503, 429, 500, a
  captcha redirect, a dropped connection) and ``/captcha``; checked before
  ``ban_above_rate`` and never for ``/robots.txt`` or the control endpoints. Hostile
  answers are no fetches: they are counted in ``hostile`` only;
- with ``changing`` (:class:`~crawlfleet.testsite.changing.Changing`, off by default):
  content pages change on known schedules, some send ``ETag`` / ``Last-Modified`` and
  answer conditional requests with 304 (see :mod:`crawlfleet.testsite.changing`); the
  site clock is ``clock`` (injectable) times ``time_scale``;
- ``GET /_stats`` (``?brief=1`` leaves out ``requests``, ``?arrivals=1`` adds each
  host's arrival times) and ``POST /_reset``, never counted. ``/_stats`` returns (URLs
  are ``http://127.0.0.X:PORT/path``)::

    {"port": int, "total_requests": int, "max_rate_1s": int, "rate_window": str,
     "active_seconds": float,            # first to last counted request
     "hosts": {"127.0.0.1": {"requests": int, "max_rate_1s": int,
                             # the first busiest 1-s window: [seconds after the first
                             # counted request, "path client"] per request in it
                             "peak_window": [[float, str], ...],
                             "robots_at": [float, ...]},  # its first 4 robots.txt
                                                          # requests, same clock
               ...},
     "expected_urls": int, "content_requests": int, "content_fetched": int,
     "fetched_twice": [{"url": str, "count": int}, ...],   # content URLs only
     "never_fetched": [str, ...],                           # expected, not requested
     "problem_requests": {url: int},     # /status/*, /slow, /r/*, odd files
     "unknown_requests": {url: int},     # neither content, problem nor archive (404s)
     "robots_requests": {"127.0.0.1": int, ...},
     "banned": {"127.0.0.1": int, ...},  # 429 answers (ban_above_rate)
     "clients": {label: {"requests": int, "banned": int, "first": float, "last": float,
                         "max_rate_1s": {"127.0.0.1": int, ...}}},
     "archive": {"units": int, "expected_urls": int,   # listing pages + documents
                 "total_requests": int, "fetched": int, # requests, distinct URLs
                 "fetched_twice": [{"url": str, "count": int}, ...],
                 "requests": {url: int}},               # archive URLs only; not if brief
     "hostile": {"ban_by": "ip" | "ua",
                 "bans": {client: int},          # bans imposed, by IP or User-Agent
                 "denied": {client: int},        # 403 answers, by client
                 "banned_requests": int,         # 403 answers, all clients
                 "banned_now": [client, ...],    # clients banned at this moment
                 "flaky_urls": int,              # how many URLs are flaky
                 "flaky_served": {"503": int, "429": int, "captcha": int, "drop": int,
                                  "500": int},   # failures served, by kind
                 "captcha_requests": int},       # /captcha pages served
     "changing": None | {                # a changing site's freshness figures
         "time_scale": float, "site_seconds": float, "counted_seconds": float,
         "clients": int, "total": FIGURES,
         "classes": {"minute" | "hourly" | "never" | "stamp": FIGURES},
         "validators": {"etag" | "none": FIGURES}},
     "loop_stalls": None | {             # with stall_tick_seconds: the site's own stalls
         "tick_ms": float, "ticks": int, # its ticker's period, ticks so far
         "max_ms": float,                # the latest a tick fired
         "stalls": [[float, float], ...]},  # [seconds after the first counted request,
                                         # ms late] of the largest (>= 1 ms), by time
     "requests": {url: int},             # every counted URL (archive ones too)
     "arrivals_kept": int,               # ?arrivals=1 only: the first N a host, and
     "arrivals": {"127.0.0.1": [float, ...], ...}}  # their times, as peak_window's

FIGURES (:class:`~crawlfleet.testsite.changelog.ChangeCounts`, read them with
:class:`~crawlfleet.testsite.changelog.ChangeStats`)::

    {"pages": int, "interval_seconds": float | None,   # real seconds between changes
     "fetches": int,              # 200s and 304s of these pages
     "unchanged_fetches": int,    # the client had that version (304s included)
     "not_modified": int,         # 304s sent
     "changes": int,              # versions born since start or /_reset
     "picked_up": int,            # ... fetched at least once
     "missed": int,               # ... replaced before anyone fetched them
     "pending": int,              # ... current, not fetched yet (stale copies)
     "due": int, "on_time": int,  # born >= 2 intervals ago / of them fetched within 2
     "on_time_share": float | None,
     "delay_seconds": {"median": float | None, "p95": ..., "max": ...}}  # birth -> fetch

``clients`` counts requests by the label a crawler sends in the ``X-Crawlfleet-Client``
header (tests and the benchmark give each node, or each group of nodes, its own label);
``first`` and ``last`` are arrival times on the server's ``time.monotonic()`` clock.

Two ways to run it: :class:`SiteServer` inside a running event loop, or
:class:`TestSite`, which runs one in a background thread for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypedDict, TypeVar, Unpack

from aiohttp import web

from crawlfleet.testsite.changelog import ChangeLog
from crawlfleet.testsite.changing import (
    Changing,
    Schedule,
    etag_matches,
    iso_time,
    modified_since,
    site_datetime,
)
from crawlfleet.testsite.hostile import Hostile, HostileGuard
from crawlfleet.testsite.model import Loc, SiteModel, host_address
from crawlfleet.testsite.render import Resource, page_resource, render_page_text, render_site
from crawlfleet.testsite.stats import RequestLog

#: Requests carrying this header are also counted per client label (see ``clients``).
CLIENT_HEADER = "X-Crawlfleet-Client"

__all__ = ["SiteOptions", "SiteServer", "TestSite", "bind_loopback"]

_T = TypeVar("_T")
_ROBOTS = b"User-agent: *\nAllow: /\n"
_BACKLOG = 1024
_Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


def bind_loopback(hosts: int, port: int = 0, attempts: int = 10) -> list[socket.socket]:
    """Listening sockets on ``127.0.0.1`` .. ``127.0.0.{hosts}``, all on one port.

    With ``port == 0`` a free port is chosen on ``127.0.0.1`` and the other addresses
    are bound to it; if one of them has it taken, everything is closed and another port
    tried, up to ``attempts`` times. Raises :class:`OSError` naming the address that
    could not be bound.
    """
    for attempt in range(attempts):
        socks: list[socket.socket] = []
        address = host_address(0)
        try:
            for host in range(hosts):
                address = host_address(host)
                chosen = port if host == 0 else socks[0].getsockname()[1]
                socks.append(socket.create_server((address, chosen), backlog=_BACKLOG))
            return socks
        except OSError as exc:
            for sock in socks:
                sock.close()
            if port or attempt == attempts - 1:
                bound = socks[0].getsockname()[1] if socks else port
                raise OSError(exc.errno, f"cannot bind {address}:{bound}: {exc}") from exc
    raise ValueError(f"attempts must be >= 1, got {attempts}")


class SiteServer:
    """Serves ``model`` on the loopback hosts; :meth:`start` and :meth:`stop` must run in
    the same event loop, and all other methods in that loop's thread.

    ``port`` 0 picks a free port. ``latency_seconds`` delays every counted response;
    ``/slow`` answers after ``timeout_seconds`` (or at :meth:`stop`). ``hostile``
    (default: nothing hostile) makes the site push back; ``changing`` (default: a
    static site) makes its content pages change. ``clock`` (real seconds, never
    decreasing) times requests and, times ``changing.time_scale``, the site clock.
    ``stall_tick_seconds`` > 0 runs a ticker of that period that notes how late each
    tick fires: the site's own event-loop stalls (``loop_stalls`` in the stats).
    """

    def __init__(
        self,
        model: SiteModel,
        *,
        port: int = 0,
        latency_seconds: float = 0.0,
        timeout_seconds: float = 30.0,
        ban_above_rate: int = 0,
        robots_crawl_delay: float = 0.0,
        hostile: Hostile | None = None,
        changing: Changing | None = None,
        clock: Callable[[], float] = time.monotonic,
        stall_tick_seconds: float = 0.0,
    ) -> None:
        if hostile is not None and not isinstance(hostile, Hostile):
            raise ValueError(f"hostile must be a Hostile, got {hostile!r}")
        if changing is not None and not isinstance(changing, Changing):
            raise ValueError(f"changing must be a Changing, got {changing!r}")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be between 0 and 65535, got {port}")
        if latency_seconds < 0:
            raise ValueError(f"latency_seconds must be >= 0, got {latency_seconds}")
        if timeout_seconds < 0:
            raise ValueError(f"timeout_seconds must be >= 0, got {timeout_seconds}")
        if ban_above_rate < 0:
            raise ValueError(f"ban_above_rate must be >= 0, got {ban_above_rate}")
        if robots_crawl_delay < 0:
            raise ValueError(f"robots_crawl_delay must be >= 0, got {robots_crawl_delay}")
        if stall_tick_seconds < 0:
            raise ValueError(f"stall_tick_seconds must be >= 0, got {stall_tick_seconds}")
        self.stall_tick_seconds = stall_tick_seconds
        self._ticker: asyncio.Task[None] | None = None
        self.model = model
        self.latency_seconds = latency_seconds
        self.ban_above_rate = ban_above_rate
        self.hostile = hostile if hostile is not None else Hostile()
        self._guard: HostileGuard | None = None
        self.changing = changing
        self.schedule = Schedule(model, changing) if changing is not None else None
        self._changes: ChangeLog | None = None
        #: page -> (version, updated_at, body) of the last body rendered (changing site)
        self._bodies: dict[int, tuple[int, float, Resource]] = {}
        self._clock = clock
        self._robots = _ROBOTS + (
            f"Crawl-delay: {robots_crawl_delay:g}\n".encode() if robots_crawl_delay else b""
        )
        self._answered: list[deque[float]] = []
        self.timeout_seconds = timeout_seconds
        self._requested_port = port
        self._port: int | None = None
        self._runners: list[web.ServerRunner] = []
        self._log: RequestLog | None = None
        self._closing: asyncio.Event | None = None

    @property
    def port(self) -> int:
        """The bound port; ``RuntimeError`` before :meth:`start`."""
        if self._port is None:
            raise RuntimeError("the site is not started")
        return self._port

    @property
    def seed_urls(self) -> list[str]:
        return self.model.seed_urls(self.port)

    def url(self, n: int) -> str:
        return self.model.url(n, self.port)

    def flaky_urls(self) -> dict[str, str]:
        """URL -> kind of failure of every flaky URL (see :meth:`Hostile.flaky_locs`)."""
        return self.hostile.flaky_urls(self.model, self.port)

    async def start(self) -> int:
        """Bind, render and start serving; returns the port."""
        socks = bind_loopback(self.model.hosts, self._requested_port)
        try:
            port: int = socks[0].getsockname()[1]
            by_host: list[dict[str, Resource]] = [{} for _ in range(self.model.hosts)]
            for (host, path), resource in render_site(self.model, port).items():
                by_host[host][path] = resource
            self._log = RequestLog(self.model, port, clock=self._clock)
            if self.schedule is not None:
                self._changes = ChangeLog(self.schedule, clock=self._clock)
            self._guard = HostileGuard(self.hostile, self.hostile.flaky_locs(self.model))
            self._closing = asyncio.Event()
            if self.stall_tick_seconds:
                self._log.watch_stalls(self.stall_tick_seconds)
                self._ticker = asyncio.ensure_future(self._tick(self._log))
            for host, sock in enumerate(socks):
                server = web.Server(
                    self._handler(host, by_host[host]), handler_cancellation=True, access_log=None
                )
                runner = web.ServerRunner(server, shutdown_timeout=1.0)
                await runner.setup()
                self._runners.append(runner)
                await web.SockSite(runner, sock, backlog=_BACKLOG).start()
        except BaseException:
            await self.stop()
            for sock in socks:
                sock.close()
            raise
        self._port = port
        return port

    async def stop(self) -> None:
        """Stop serving; pending ``/slow`` requests are answered at once. Idempotent."""
        if self._closing is not None:
            self._closing.set()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        runners, self._runners = self._runners, []
        for runner in runners:
            await runner.cleanup()

    def stats(self, *, brief: bool = False, arrivals: bool = False) -> dict[str, Any]:
        """The request counters (see the module docstring); ``brief`` drops
        ``requests``, ``arrivals`` adds each host's arrival times."""
        if self._log is None or self._guard is None:
            raise RuntimeError("the site is not started")
        snapshot = self._log.snapshot(arrivals=arrivals)
        snapshot["hostile"] = self._guard.snapshot()
        snapshot["changing"] = None if self._changes is None else self._changes.snapshot()
        if brief:
            del snapshot["requests"]
            del snapshot["archive"]["requests"]
        return snapshot

    def reset(self) -> None:
        """Clear all counters, bans and flaky attempts."""
        if self._log is not None:
            self._log.reset()
        if self._guard is not None:
            self._guard.reset()
        if self._changes is not None:
            self._changes.reset()

    async def _tick(self, log: RequestLog) -> None:
        """Every ``stall_tick_seconds``, note how late this tick fired (the loop was
        busy, or this process had no core, that long)."""
        tick, clock = self.stall_tick_seconds, self._clock
        due = clock() + tick
        while True:
            await asyncio.sleep(max(0.0, due - clock()))
            now = clock()
            log.record_tick(due, max(0.0, now - due))
            due = now + tick

    def _handler(self, host: int, resources: dict[str, Resource]) -> _Handler:
        log, guard = self._log, self._guard
        assert log is not None and guard is not None
        hostile = self.hostile.enabled

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            path = request.raw_path
            if path.startswith("/_"):
                control = self._control(request, path)
                if control is not None:
                    return control
            if path == "/robots.txt":
                log.record_robots(host)
                return web.Response(body=self._robots, content_type="text/plain")
            if hostile:
                answer = guard.screen(request, (host, path))
                if answer is not None:
                    return answer
            if self.ban_above_rate and self._too_fast(host):
                log.record_banned(host, request.headers.get(CLIENT_HEADER))
                return web.Response(status=429, text="too many requests\n")
            client = request.headers.get(CLIENT_HEADER)
            log.record(host, path, client)
            if self.latency_seconds:
                await asyncio.sleep(self.latency_seconds)
            if self._changes is not None:
                n = self.model.page_at((host, path))
                if n is not None:
                    return self._changing_page(request, n, client)
            resource = resources.get(path)
            if resource is None:
                return await self._dynamic((host, path))
            return web.Response(
                body=resource.body,
                status=resource.status,
                headers={"Content-Type": resource.content_type},
            )

        return handle

    def _changing_page(
        self, request: web.BaseRequest, n: int, client: str | None
    ) -> web.StreamResponse:
        """Page ``n`` of a changing site as it is now: 304 if the request's validators
        still hold, else its current version."""
        changes, schedule = self._changes, self.schedule
        assert changes is not None and schedule is not None
        t = changes.site_time()
        version = schedule.version(n, t)
        headers = {}
        if schedule.has_validators(n):
            headers["ETag"] = etag = schedule.etag(n, version)
            headers["Last-Modified"] = last_modified = schedule.last_modified(n, version)
            if _not_modified(request, etag, last_modified):
                changes.record(n, version, t, client, not_modified=True)
                return web.Response(status=304, headers=headers)
        changes.record(n, version, t, client)
        resource = self._changing_body(n, version, schedule.updated_at(n, t))
        headers["Content-Type"] = resource.content_type
        return web.Response(body=resource.body, status=resource.status, headers=headers)

    def _changing_body(self, n: int, version: int, updated_at: float) -> Resource:
        cached = self._bodies.get(n)
        if cached is not None and cached[:2] == (version, updated_at):
            return cached[2]
        schedule = self.schedule
        assert schedule is not None
        model = self.model
        item = schedule.article(n, version) if model.is_article(n) else schedule.product(n, version)
        updated = (iso_time(updated_at), f"{site_datetime(updated_at):%d %B %Y, %H:%M:%S}")
        html = render_page_text(model, n, self.port, item=item, updated=updated)
        resource = page_resource(model, n, html)
        self._bodies[n] = (version, updated_at, resource)
        return resource

    def _too_fast(self, host: int) -> bool:
        """Whether *host* already answered ``ban_above_rate`` requests in the last
        second (else this request counts as answered)."""
        while len(self._answered) <= host:
            self._answered.append(deque())
        times = self._answered[host]
        now = time.monotonic()
        while times and times[0] <= now - 1.0:
            times.popleft()
        if len(times) >= self.ban_above_rate:
            return True
        times.append(now)
        return False

    def _control(self, request: web.BaseRequest, path: str) -> web.StreamResponse | None:
        name, _, query = path.partition("?")
        if name == "/_stats":
            if request.method not in ("GET", "HEAD"):
                return web.Response(status=405, text="use GET\n")
            flags = urllib.parse.parse_qs(query)
            brief, arrivals = (
                flags.get(flag, [""])[-1] in ("1", "true") for flag in ("brief", "arrivals")
            )
            return web.Response(
                text=json.dumps(self.stats(brief=brief, arrivals=arrivals)),
                content_type="application/json",
            )
        if name == "/_reset":
            if request.method != "POST":
                return web.Response(status=405, text="use POST\n")
            self.reset()
            return web.Response(text='{"reset": true}', content_type="application/json")
        return None

    async def _dynamic(self, loc: Loc) -> web.StreamResponse:
        host, path = loc
        page = self.model.archive.resolve(path) if host == 0 else None
        if page is not None:
            return web.Response(
                body=self.model.archive.render(page),
                headers={"Content-Type": "text/html; charset=utf-8"},
            )
        if path == "/slow":
            assert self._closing is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self.timeout_seconds)
            return web.Response(text="finally, the slow page\n")
        if path.startswith("/status/") and path[8:].isdigit():
            code = int(path[8:])
            if 200 <= code <= 599:
                text = None if code in (204, 304) else f"status {code}\n"
                return web.Response(status=code, text=text)
        target = self.model.redirect_target(loc)
        if target is not None:
            return web.Response(status=302, headers={"Location": self.url(target)})
        return web.Response(status=404, text="not found\n")


def _not_modified(request: web.BaseRequest, etag: str, last_modified: str) -> bool:
    """Whether ``request``'s conditional headers say it has this version (RFC 9110:
    ``If-None-Match`` first; ``If-Modified-Since`` only without it)."""
    none_match = request.headers.get("If-None-Match")
    if none_match is not None:
        return etag_matches(none_match, etag)
    since = request.headers.get("If-Modified-Since")
    return since is not None and modified_since(since, last_modified) is False


class SiteOptions(TypedDict, total=False):
    """How a :class:`SiteServer` serves (see it); what a :class:`TestSite` hands on."""

    port: int
    latency_seconds: float
    timeout_seconds: float
    ban_above_rate: int
    robots_crawl_delay: float
    hostile: Hostile | None
    changing: Changing | None
    clock: Callable[[], float]
    stall_tick_seconds: float


class TestSite:
    """A :class:`SiteServer` running in a background thread with its own event loop,
    for tests: ``with TestSite(model) as site: ... site.stats()``; *options* as
    :class:`SiteServer` takes them.

    :meth:`stats` and :meth:`reset` run in the server's loop, so they are consistent and
    safe to call from any thread.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, model: SiteModel | None = None, **options: Unpack[SiteOptions]) -> None:
        self.model = model if model is not None else SiteModel()
        self.server = SiteServer(self.model, **options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def seed_urls(self) -> list[str]:
        """The root URL of every host."""
        return self.server.seed_urls

    def url(self, n: int) -> str:
        """The canonical URL of page ``n``."""
        return self.server.url(n)

    def expected_urls(self) -> frozenset[str]:
        return self.model.expected_urls(self.port)

    def flaky_urls(self) -> dict[str, str]:
        """URL -> kind of failure of every flaky URL (empty unless ``hostile.flaky``)."""
        return self.server.flaky_urls()

    def start(self) -> None:
        """Start the thread and serve; returns once the site accepts connections."""
        if self._loop is not None:
            raise RuntimeError("the site is already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=self._run, args=(loop,), name="testsite")
        self._thread.daemon = True
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.server.start(), loop).result(timeout=60)
        except BaseException:
            self._halt()
            raise

    def stop(self) -> None:
        """Stop serving and join the thread. Idempotent."""
        if self._loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(timeout=30)
        finally:
            self._halt()

    def stats(self, *, brief: bool = False, arrivals: bool = False) -> dict[str, Any]:
        """The counters, read in-process (same shape as ``GET /_stats``)."""
        return self._call(lambda: self.server.stats(brief=brief, arrivals=arrivals))

    def reset(self) -> None:
        """Clear all counters."""
        self._call(self.server.reset)

    def __enter__(self) -> TestSite:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _call(self, fn: Callable[[], _T]) -> _T:
        if self._loop is None:
            raise RuntimeError("the site is not started")

        async def call() -> _T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=30)

    def _halt(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=30)

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
