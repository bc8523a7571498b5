"""One error shape for every failure: ``{"error": {"code", "message"}}`` with the status
that fits. Messages never carry a secret (URLs are redacted)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException  # also raised for unknown paths

from crawlfleet.exceptions import (
    CommandFailed,
    ConfigError,
    ItemStoreUnavailable,
    NotFound,
    UnknownJob,
)
from crawlfleet.manager.scrapyd import ScrapydError
from crawlfleet.redis.connection import redact

__all__ = ["MESSAGE_MAX_CHARS", "NotFound", "error_response", "install_error_handlers"]

logger = logging.getLogger(__name__)

_CODES = {
    400: "invalid",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    429: "too_many_requests",
    500: "internal_error",
    502: "scrapyd_error",
    503: "unavailable",
}


#: Characters of an error's message that are sent: an error never echoes back more than
#: an excerpt of what it refuses.
MESSAGE_MAX_CHARS = 500


def error_response(
    status: int,
    message: str,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    if len(message) > MESSAGE_MAX_CHARS:
        message = message[: MESSAGE_MAX_CHARS - 1] + "…"
    body = {"error": {"code": code or _CODES.get(status, "error"), "message": message}}
    sent = dict(headers or {})
    if status == 401:
        sent["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body, status_code=status, headers=sent or None)


def _one_line(text: str) -> str:
    return redact(" ".join(text.split()))


#: Errors whose (redacted) message is the answer: class, status, code (None: the
#: status's). A subclass's entry wins over its base's (UnknownJob over ConfigError).
_SAID_AS_IS: tuple[tuple[type[Exception], int, str | None], ...] = (
    (UnknownJob, 404, "unknown_job"),
    (NotFound, 404, None),
    (ConfigError, 400, None),
    (CommandFailed, 409, "refused"),
    (ScrapydError, 502, None),
    (ItemStoreUnavailable, 503, "item_store_unavailable"),
)


def _said_as_is(
    status: int, code: str | None
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handler(_: Request, exc: Exception) -> JSONResponse:
        return error_response(status, _one_line(str(exc)), code)

    return handler


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        """400: ``invalid`` for a name or value that crawlfleet's own checks refuse,
        ``invalid_request`` for a request that does not fit the route's schema."""
        parts = []
        errors = exc.errors()
        for err in errors[:5]:
            where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "path"))
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            parts.append(f"{where}: {msg}" if where else msg)
        ours = all(err.get("type") == "value_error" for err in errors)
        code = "invalid" if errors and ours else "invalid_request"
        return error_response(400, "; ".join(parts) or "invalid request", code)

    for cls, status, code in _SAID_AS_IS:
        app.add_exception_handler(cls, _said_as_is(status, code))

    @app.exception_handler(RedisError)
    async def redis_down(_: Request, exc: RedisError) -> JSONResponse:
        logger.warning("Redis: %s", _one_line(str(exc)) or type(exc).__name__)
        return error_response(503, "Redis did not answer; try again", "redis_unavailable")

    @app.exception_handler(SQLAlchemyError)
    async def db_down(_: Request, exc: SQLAlchemyError) -> JSONResponse:
        logger.warning("state DB: %s", type(exc).__name__)
        return error_response(503, "the state DB did not answer; try again", "state_db_unavailable")
