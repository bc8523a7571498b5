"""The manager's edge: what every request meets before a route runs (an ASGI middleware).

- **Bodies are bounded before they are read.** A request that carries a body (one with
  a ``Content-Length`` or a ``Transfer-Encoding``) is refused with 413 when its declared
  length is over the bound, before a byte of it is read; a body sent without a length
  is counted as it arrives and refused (413) at the first byte over. The bound is
  ``CRAWLFLEET_MANAGER_MAX_BODY`` for JSON bodies, ``CRAWLFLEET_MANAGER_MAX_EGG`` for
  an egg sent to ``/api/v1/deploy`` and :data:`SIGN_IN_MAX_BYTES` for the sign-in.
- **The caller is known before a body is read.** Apart from the sign-in (whose body is
  the token), a body is read only from a known caller (a valid token or session): 401
  otherwise. Which role a route needs is still its own dependency's to say.
- **Every answer carries the security headers** (:data:`SECURITY_HEADERS`), errors too,
  and **an unexpected failure is a JSON 500** (logged with its traceback), never a
  plain-text answer or a dropped connection.
- **A change shows at once.** When the answer to a request that may change something
  (any method but GET, HEAD and OPTIONS) starts, *on_change* is called before a byte of
  it is sent: the shared figures are made again at the next ask
  (:mod:`crawlfleet.manager.shared`), so whoever made the change sees it.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import HTTPException
from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request

from crawlfleet.manager.auth import identify
from crawlfleet.manager.problems import error_response
from crawlfleet.redis.connection import redact

__all__ = ["CSP", "SECURITY_HEADERS", "SIGN_IN_MAX_BYTES", "BodyTooLarge", "Edge"]

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
_HEADERS_RAW = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

#: The sign-in's body: a token of at most 200 characters, in JSON.
SIGN_IN_MAX_BYTES = 4096
SIGN_IN = ("POST", "/session")
DEPLOY = "/api/v1/deploy"


class BodyTooLarge(HTTPException):
    """A body over its bound (413); raised from ``receive`` as it arrives."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {_size(limit)}")


def _size(n: int) -> str:
    if n >= 2**20 and n % 2**20 == 0:
        return f"{n // 2**20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} bytes"


def _has_body(scope: Scope) -> bool:
    """Whether the request says it carries a body (a non-zero length, or chunks)."""
    for name, value in scope.get("headers", []):
        lowered = name.lower()
        if lowered == b"transfer-encoding" or (lowered == b"content-length" and value != b"0"):
            return True
    return False


#: Methods that change nothing.
READ_ONLY = frozenset({"GET", "HEAD", "OPTIONS"})


class Edge:
    """The middleware; *max_body* and *max_egg* in bytes."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body: int,
        max_egg: int,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        if max_body < 1 or max_egg < 1:
            raise ValueError("body bounds must be positive")
        self.app = app
        self.max_body = max_body
        self.max_egg = max_egg
        self.on_change = on_change

    def limit_of(self, method: str, path: str) -> int:
        if (method, path.rstrip("/")) == SIGN_IN:
            return SIGN_IN_MAX_BYTES
        if path == DEPLOY:
            return self.max_egg
        return self.max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        unread = _has_body(scope)  # True until the body's last part has been received

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if scope["method"] not in READ_ONLY:
                    self.on_change()
                headers = list(message.get("headers", []))
                have = {name.lower() for name, _ in headers}
                headers += [h for h in _HEADERS_RAW if h[0] not in have]
                if unread and b"connection" not in have:
                    # the rest of the body is not wanted: the server closes the
                    # connection instead of reading it to keep the connection alive
                    headers.append((b"connection", b"close"))
                message["headers"] = headers
            await send(message)

        async def tracked() -> Message:
            nonlocal unread
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                unread = False
            return message

        try:
            refusal = await self._check(scope)
            if refusal is not None:
                await refusal(scope, tracked, send_with_headers)
                return
            await self.app(scope, self._bounded(scope, tracked), send_with_headers)
        except Exception as exc:
            # the traceback, its secrets redacted (a URL's password in a message)
            trace = redact("".join(traceback.format_exception(exc)).rstrip())
            logger.error(
                "manager: %s %s failed:\n%s", scope.get("method"), scope.get("path"), trace
            )
            if not started:
                answer = error_response(500, "the manager failed on this request (logged)")
                await answer(scope, tracked, send_with_headers)

    async def _check(
        self, scope: Scope
    ) -> Callable[[Scope, Receive, Send], Awaitable[None]] | None:
        """An answer that refuses the request before its body is read, or None."""
        if not _has_body(scope):
            return None
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        length_text = headers.get(b"content-length")
        limit = self.limit_of(scope["method"], scope["path"])
        if length_text is not None:
            try:
                length = int(length_text)
            except ValueError:
                return error_response(400, "Content-Length is not a number")
            if length > limit:
                return error_response(413, f"the request body is larger than {_size(limit)}")
        if (scope["method"], scope["path"].rstrip("/")) == SIGN_IN:
            return None
        try:
            await identify(Request(scope))
        except HTTPException as exc:
            return error_response(exc.status_code, str(exc.detail))
        except SQLAlchemyError as exc:
            logger.warning("state DB: %s", type(exc).__name__)
            return error_response(
                503, "the state DB did not answer; try again", "state_db_unavailable"
            )
        return None

    def _bounded(self, scope: Scope, receive: Receive) -> Receive:
        """*receive* that raises :class:`BodyTooLarge` at the first byte over the bound
        (a length that was declared is already checked; this counts what arrives)."""
        limit = self.limit_of(scope.get("method", ""), scope.get("path", ""))
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        return bounded
