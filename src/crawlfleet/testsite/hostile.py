"""Hostile mode of the test site: a site that pushes back, for tests of anti-blocking,
retries and campaigns. Everything is off by default (:class:`Hostile` ``()``).

- **Bans** (``ban_rate`` N > 0): a client (``ban_by="ip"``: the peer address of the TCP
  connection; ``"ua"``: the ``User-Agent`` header) that sends more than N requests in a
  sliding window of one second is banned for ``ban_seconds``: that request and every
  request from it until the ban ends get ``403`` with a page containing
  ``"Access denied"``. A ban starts the client's window afresh.
- **Flaky URLs** (``flaky`` share > 0): ``round(flaky * E)`` of the ``E`` eligible URLs
  (content pages, catalogue pages and archive documents), drawn from the model's seed,
  fail their first ``flaky_attempts`` requests, each URL in one kind of
  ``flaky_kinds`` (assigned in turn, so every kind gets its share): ``"503"`` and
  ``"429"`` (with ``Retry-After: 1``), ``"500"``, ``"captcha"`` (302 to
  ``/captcha?next=<path>``) and ``"drop"`` (the connection is closed without an
  answer). Later requests are served normally.
- ``/captcha`` (only in hostile mode) answers 200 with "Please solve the captcha".

``/robots.txt``, ``/_stats``, ``/_reset`` and ``/captcha`` are never hostile. Hostile
answers are no fetches: they are counted only in the ``hostile`` section of
``/_stats`` (see :meth:`HostileGuard.snapshot`).
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args
from urllib.parse import quote

from aiohttp import web

from crawlfleet.testsite.model import Loc, SiteModel

__all__ = ["BAN_BY", "CAPTCHA_PATH", "FLAKY_KINDS", "Hostile", "HostileGuard", "flaky_kinds"]

FlakyKind = Literal["503", "429", "captcha", "drop", "500"]
#: Every kind of flaky failure, in the order they are handed out.
FLAKY_KINDS: tuple[FlakyKind, ...] = get_args(FlakyKind)
BAN_BY = ("ip", "ua")
CAPTCHA_PATH = "/captcha"
#: Ban windows of clients that have gone quiet are dropped past this many clients.
_SWEEP_ABOVE = 4096

_DENIED = (
    b"<!DOCTYPE html>\n<html><head><title>Access denied</title></head>\n<body>\n"
    b"<h1>Access denied</h1>\n<p>Too many requests from your client. Try again later.</p>\n"
    b"</body></html>\n"
)
_CAPTCHA = (
    b"<!DOCTYPE html>\n<html><head><title>Security check</title></head>\n<body>\n"
    b'<h1>Please solve the captcha</h1>\n<form class="captcha" method="post">'
    b'<input name="answer"><button>Verify</button></form>\n</body></html>\n'
)


def flaky_kinds(spec: str) -> tuple[str, ...]:
    """The kinds of a comma-separated list such as ``"503,drop"`` (not validated)."""
    return tuple(kind.strip() for kind in spec.split(",") if kind.strip())


@dataclass(frozen=True)
class Hostile:
    """How hostile the site is; the constructor raises :class:`ValueError` naming the
    first bad field. See the module docstring for what each field does."""

    ban_rate: int = 0
    ban_seconds: float = 10.0
    ban_by: str = "ip"
    flaky: float = 0.0
    flaky_attempts: int = 1
    flaky_kinds: tuple[str, ...] = FLAKY_KINDS

    def __post_init__(self) -> None:
        if isinstance(self.ban_rate, bool) or not isinstance(self.ban_rate, int):
            raise ValueError(f"ban_rate must be an integer, got {self.ban_rate!r}")
        if self.ban_rate < 0:
            raise ValueError(f"ban_rate must be >= 0 (0: no bans), got {self.ban_rate}")
        if not _finite(self.ban_seconds) or self.ban_seconds <= 0:
            raise ValueError(f"ban_seconds must be a number > 0, got {self.ban_seconds!r}")
        if self.ban_by not in BAN_BY:
            raise ValueError(f"ban_by must be 'ip' or 'ua', got {self.ban_by!r}")
        if not _finite(self.flaky) or not 0 <= self.flaky <= 1:
            raise ValueError(f"flaky must be a share between 0 and 1, got {self.flaky!r}")
        attempts = self.flaky_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"flaky_attempts must be an integer >= 1, got {attempts!r}")
        kinds = self.flaky_kinds
        if isinstance(kinds, str) or not isinstance(kinds, Iterable):
            raise ValueError(f"flaky_kinds must be a sequence of kinds, got {kinds!r}")
        kinds = tuple(kinds)
        unknown = [kind for kind in kinds if kind not in FLAKY_KINDS]
        if unknown or not kinds or len(set(kinds)) != len(kinds):
            raise ValueError(
                f"flaky_kinds must be distinct kinds out of {', '.join(FLAKY_KINDS)}, "
                f"got {', '.join(map(str, kinds)) or 'none'}"
            )
        object.__setattr__(self, "flaky_kinds", kinds)

    @property
    def enabled(self) -> bool:
        """Whether anything is hostile (bans or flaky URLs)."""
        return self.ban_rate > 0 or self.flaky > 0

    def flaky_locs(self, model: SiteModel) -> dict[Loc, str]:
        """The flaky resources of ``model`` and the kind of failure of each: the ground
        truth, the same on every run with the same model and settings."""
        if not self.flaky:
            return {}
        archive = model.archive
        eligible = sorted((*model.content_locs(), *((0, path) for path in archive.doc_path_list())))
        rng = random.Random(f"{model.seed}:flaky")
        chosen = rng.sample(eligible, round(self.flaky * len(eligible)))
        return {loc: self.flaky_kinds[i % len(self.flaky_kinds)] for i, loc in enumerate(chosen)}

    def flaky_urls(self, model: SiteModel, port: int) -> dict[str, str]:
        """:meth:`flaky_locs` as URLs on ``port``."""
        return {model.loc_url(loc, port): kind for loc, kind in self.flaky_locs(model).items()}


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class HostileGuard:
    """The state of a hostile site: ban windows and bans, flaky attempts, counters.

    Not thread-safe: call it from the server's event loop only.
    """

    def __init__(
        self,
        hostile: Hostile,
        flaky: Mapping[Loc, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hostile = hostile
        self._flaky = dict(flaky)
        self._clock = clock
        self.reset()

    def reset(self) -> None:
        """Lift every ban, forget every window, attempt and counter."""
        self._windows: dict[str, deque[float]] = {}
        self._banned_until: dict[str, float] = {}
        self._attempts: dict[Loc, int] = {}
        self._bans: dict[str, int] = {}
        self._denied: dict[str, int] = {}
        self._served: dict[str, int] = dict.fromkeys(FLAKY_KINDS, 0)
        self._captcha = 0

    def screen(self, request: web.BaseRequest, loc: Loc) -> web.StreamResponse | None:
        """The hostile answer to ``request`` for ``loc``, or ``None`` to serve it."""
        if loc[1].partition("?")[0] == CAPTCHA_PATH:
            self._captcha += 1
            return web.Response(body=_CAPTCHA, content_type="text/html", charset="utf-8")
        if self.hostile.ban_rate and self._is_banned(_client_key(request, self.hostile.ban_by)):
            return web.Response(status=403, body=_DENIED, content_type="text/html", charset="utf-8")
        kind = self._flaky_failure(loc)
        if kind is None:
            return None
        if kind == "drop":
            if request.transport is not None:
                request.transport.abort()
            # Nothing can be written any more: aiohttp drops this answer unsent.
            return web.Response(status=500)
        if kind == "captcha":
            target = f"{CAPTCHA_PATH}?next={quote(loc[1], safe='/')}"
            return web.Response(status=302, headers={"Location": target})
        status = int(kind)
        headers = {"Retry-After": "1"} if status in (503, 429) else {}
        return web.Response(status=status, text=f"status {status}\n", headers=headers)

    def _is_banned(self, client: str) -> bool:
        """Whether ``client`` is banned, counting this request in its window first."""
        now = self._clock()
        until = self._banned_until.get(client)
        if until is not None:
            if now < until:
                self._denied[client] = self._denied.get(client, 0) + 1
                return True
            del self._banned_until[client]
        window = self._windows.get(client)
        if window is None:
            if len(self._windows) >= _SWEEP_ABOVE:
                self._sweep(now)
            window = self._windows[client] = deque()
        window.append(now)
        while window[0] <= now - 1.0:
            window.popleft()
        if len(window) <= self.hostile.ban_rate:
            return False
        window.clear()
        self._banned_until[client] = now + self.hostile.ban_seconds
        self._bans[client] = self._bans.get(client, 0) + 1
        self._denied[client] = self._denied.get(client, 0) + 1
        return True

    def _sweep(self, now: float) -> None:
        for client in [c for c, w in self._windows.items() if not w or w[-1] <= now - 1.0]:
            del self._windows[client]

    def _flaky_failure(self, loc: Loc) -> str | None:
        kind = self._flaky.get(loc)
        if kind is None:
            return None
        failed = self._attempts.get(loc, 0)
        if failed >= self.hostile.flaky_attempts:
            return None
        self._attempts[loc] = failed + 1
        self._served[kind] += 1
        return kind

    def snapshot(self) -> dict[str, Any]:
        """The ``hostile`` section of ``/_stats``::

        {"ban_by": "ip" | "ua",
         "bans": {client: int},          # bans imposed, by IP address or User-Agent
         "denied": {client: int},        # 403 answers, by client
         "banned_requests": int,         # 403 answers, all clients
         "banned_now": [client, ...],    # clients banned at this moment
         "flaky_urls": int,              # URLs that fail their first flaky_attempts
         "flaky_served": {"503": int, "429": int, "captcha": int, "drop": int, "500": int},
         "captcha_requests": int}        # /captcha pages served
        """
        now = self._clock()
        return {
            "ban_by": self.hostile.ban_by,
            "bans": dict(sorted(self._bans.items())),
            "denied": dict(sorted(self._denied.items())),
            "banned_requests": sum(self._denied.values()),
            "banned_now": sorted(c for c, until in self._banned_until.items() if now < until),
            "flaky_urls": len(self._flaky),
            "flaky_served": dict(self._served),
            "captcha_requests": self._captcha,
        }


def _client_key(request: web.BaseRequest, ban_by: str) -> str:
    if ban_by == "ua":
        return request.headers.get("User-Agent", "")
    # The TCP peer itself: proxies on 127.0.0.2.. must count as distinct clients, and
    # no forwarding header may change that.
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    return str(peer[0]) if peer else "unknown"
