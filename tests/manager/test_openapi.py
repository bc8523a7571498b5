"""Schemathesis generates requests from the manager's own OpenAPI spec: no answer is a
500, every answer matches the spec's status codes and shapes or is the one error shape,
with a token of each role and with none."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from crawlfleet.manager.app import create_app
from crawlfleet.state.db import StateDB
from crawlfleet.state.tokens import create_token
from tests.support.manager import manager_settings

ROLES = ("viewer", "operator", "admin", None)


@pytest.fixture(scope="module")
def api(
    redis_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Any, dict[str, str]]:
    prefix = f"cftapi{tmp_path_factory.mktemp('x').name[-6:]}"
    db = StateDB.open(f"sqlite:///{tmp_path_factory.mktemp('state') / 'state.sqlite3'}")
    db.upgrade()
    tokens = {role: create_token(db, role, role) for role in ROLES if role}
    app = create_app(manager_settings(prefix), redis_server_url, db)
    return app, tokens


def test_the_api_keeps_its_spec(api: tuple[Any, dict[str, str]]) -> None:
    app, tokens = api
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 10
    for operation in operations:
        if operation.path == "/api/v1/live":
            continue  # a stream of up to an hour: tested in test_dashboard_api

        @given(case=operation.as_strategy())
        @settings(
            max_examples=12,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: schemathesis.Case) -> None:  # type: ignore[type-arg]
            for role in ROLES:
                headers = {"Authorization": f"Bearer {tokens[role]}"} if role else {}
                response = case.call(headers=headers)
                assert response.status_code < 500, (case.method, case.formatted_path, response.text)
                if response.status_code >= 400:
                    body = response.json()
                    assert set(body) == {"error"}, body
                    assert set(body["error"]) == {"code", "message"}, body
                if role is None and case.path.startswith("/api/"):
                    assert response.status_code == 401

        check()
