"""One error shape for every failure: ``{"error": {"code", "message"}}`` with the status
that fits. Messages never carry a secret (URLs are redacted)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException  # also raised for unknown paths

from crawlfleet.exceptions import CommandFailed, ConfigError, CrawlfleetError, UnknownJob
from crawlfleet.manager.scrapyd import ScrapydError
from crawlfleet.redis.connection import redact

__all__ = ["NotFound", "error_response", "install_error_handlers"]

logger = logging.getLogger(__name__)

_CODES = {
    400: "invalid",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    422: "invalid_request",
    502: "scrapyd_error",
    503: "unavailable",
}


class NotFound(CrawlfleetError):
    """Something named in a request does not exist (404)."""


def error_response(status: int, message: str, code: str | None = None) -> JSONResponse:
    body = {"error": {"code": code or _CODES.get(status, "error"), "message": message}}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body, status_code=status, headers=headers)


def _one_line(text: str) -> str:
    return redact(" ".join(text.split()))


#: Errors whose (redacted) message is the answer: class, status, code (None: the
#: status's). A subclass's entry wins over its base's (UnknownJob over ConfigError).
_SAID_AS_IS: tuple[tuple[type[Exception], int, str | None], ...] = (
    (UnknownJob, 404, "unknown_job"),
    (ConfigError, 400, None),
    (CommandFailed, 409, "refused"),
    (NotFound, 404, None),
    (ScrapydError, 502, None),
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
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else err.get("msg", ""))
        return error_response(422, "; ".join(parts) or "invalid request")

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
