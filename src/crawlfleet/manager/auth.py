"""Bearer-token authentication, one dependency per role: ``Depends(require("operator"))``.

Missing or unknown token: 401; a role below the one needed: 403. Either way the
handler does not run, so nothing changes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from crawlfleet.manager.context import ManagerContext
from crawlfleet.state.tokens import ROLES, TokenInfo, authenticate, role_allows

__all__ = ["Admin", "Ctx", "Operator", "Viewer", "bearer", "context", "require"]

bearer = HTTPBearer(auto_error=False, description="a token from `crawlfleet manager token create`")


def context(request: Request) -> ManagerContext:
    ctx: ManagerContext = request.app.state.ctx
    return ctx


def require(role: str) -> Callable[..., Awaitable[TokenInfo]]:
    """A dependency that yields the caller's token if its role allows *role*."""
    assert role in ROLES, role

    async def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> TokenInfo:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise HTTPException(401, "an API token is needed: Authorization: Bearer TOKEN")
        ctx = context(request)
        token = await ctx.in_db(authenticate, ctx.db, credentials.credentials)
        if token is None:
            raise HTTPException(401, "the API token is not valid (unknown or revoked)")
        if not role_allows(token.role, role):
            raise HTTPException(
                403, f"token {token.name!r} ({token.role}) may not do this: {role} needed"
            )
        return token

    return dependency


#: The request's ManagerContext, and the caller's token checked for a role.
Ctx = Annotated[ManagerContext, Depends(context)]
Viewer = Annotated[TokenInfo, Depends(require("viewer"))]
Operator = Annotated[TokenInfo, Depends(require("operator"))]
Admin = Annotated[TokenInfo, Depends(require("admin"))]
