"""Alert rules, the alerts they raise, and the deliveries of those alerts to webhooks.

An alert goes pending -> firing -> resolved; each move is a compare-and-set on its
status, so of several managers exactly one makes it (and delivers it)."""

from __future__ import annotations

import operator
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import delete, select, update

from crawlfleet.exceptions import ConfigError, NotFound
from crawlfleet.state.db import StateDB
from crawlfleet.state.models import Alert, AlertRule, Delivery, check_name, iso, utcnow

__all__ = [
    "OPERATORS",
    "create_rule",
    "delete_rule",
    "list_alerts",
    "list_rules",
    "move_alert",
    "open_alert",
    "open_alerts",
    "record_delivery",
    "rules_enabled",
    "shown_url",
]

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}


def shown_url(url: str) -> str:
    """A webhook URL as shown: scheme and host only (its path often is a token)."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}/..."


def _rule_view(r: AlertRule, db: StateDB) -> dict[str, Any]:
    return {
        "name": r.name,
        "job": r.job,
        "metric": r.metric,
        "op": r.op,
        "threshold": r.threshold,
        "for_seconds": r.for_seconds,
        "webhook": shown_url(db.secrets.unseal(r.webhook_url)),
        "enabled": r.enabled,
        "created_by": r.created_by,
        "created_at": iso(r.created_at),
    }


def create_rule(
    db: StateDB,
    *,
    name: str,
    job: str | None,
    metric: str,
    op: str,
    threshold: float,
    for_seconds: float,
    webhook_url: str,
    secret: str | None,
    actor: str,
    metrics: tuple[str, ...],
) -> tuple[dict[str, Any], str]:
    """A new rule and its signing secret (made when not given; shown once).
    ConfigError naming what is wrong."""
    check_name("alert", name)
    if metric not in metrics:
        raise ConfigError(f"unknown metric {metric!r}; one of {', '.join(metrics)}")
    if op not in OPERATORS:
        raise ConfigError(f"operator must be one of {' '.join(OPERATORS)}, got {op!r}")
    parts = urlsplit(webhook_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("webhook must be an http(s):// URL")
    secret = secret or secrets.token_urlsafe(32)
    row = AlertRule(
        name=name,
        job=job,
        metric=metric,
        op=op,
        threshold=threshold,
        for_seconds=for_seconds,
        webhook_url=db.secrets.seal(webhook_url),
        secret=db.secrets.seal(secret),
        enabled=True,
        created_by=actor,
        created_at=utcnow(),
    )
    if not db.add_new(row):
        raise ConfigError(f"an alert rule is already named {name!r}")
    return _rule_view(row, db), secret


def list_rules(db: StateDB) -> list[dict[str, Any]]:
    with db.session() as s:
        return [_rule_view(r, db) for r in s.scalars(select(AlertRule).order_by(AlertRule.name))]


def rules_enabled(db: StateDB) -> list[dict[str, Any]]:
    """Enabled rules with what evaluation and delivery need (URL and secret included)."""
    with db.session() as s:
        return [
            {
                **_rule_view(r, db),
                "id": r.id,
                "webhook_url": db.secrets.unseal(r.webhook_url),
                "secret": db.secrets.unseal(r.secret),
            }
            for r in s.scalars(select(AlertRule).where(AlertRule.enabled.is_(True)))
        ]


def delete_rule(db: StateDB, name: str) -> None:
    with db.session() as s:
        rid = s.scalar(select(AlertRule.id).where(AlertRule.name == name))
        if rid is None:
            raise NotFound(f"no alert rule named {name!r}")
        ids = select(Alert.id).where(Alert.rule_id == rid)
        s.execute(delete(Delivery).where(Delivery.alert_id.in_(ids)))
        s.execute(delete(Alert).where(Alert.rule_id == rid))
        s.execute(delete(AlertRule).where(AlertRule.id == rid))


def open_alerts(db: StateDB, rule_id: int) -> dict[str, dict[str, Any]]:
    """job -> its open (pending or firing) alert of the rule."""
    with db.session() as s:
        query = select(Alert).where(Alert.rule_id == rule_id, Alert.open_key.is_not(None))
        return {
            a.job: {"id": a.id, "status": a.status, "since": a.since, "value": a.value}
            for a in s.scalars(query)
        }


def open_alert(db: StateDB, rule_id: int, job: str, value: float) -> bool:
    """A pending alert of the rule for *job*, unless one is open; True if made here."""
    return db.add_new(
        Alert(
            rule_id=rule_id,
            job=job,
            open_key=f"{rule_id}:{job}",
            status="pending",
            since=utcnow(),
            value=value,
        )
    )


def move_alert(db: StateDB, alert_id: int, before: str, after: str, value: float) -> bool:
    """Move an alert from *before* to *after* (firing, resolved); True for the one
    caller that did."""
    values: dict[str, Any] = {"status": after, "value": value}
    if after == "firing":
        values["fired_at"] = utcnow()
    if after == "resolved":
        values.update(resolved_at=utcnow(), open_key=None)
    with db.session() as s:
        done = s.execute(
            update(Alert).where(Alert.id == alert_id, Alert.status == before).values(**values)
        )
        return bool(getattr(done, "rowcount", 0))


def record_delivery(
    db: StateDB, alert_id: int, event: str, attempt: int, ok: bool, status: int | None, error: str
) -> None:
    with db.session() as s:
        s.add(
            Delivery(
                alert_id=alert_id,
                event=event,
                attempt=attempt,
                at=utcnow(),
                ok=ok,
                http_status=status,
                error=error,
            )
        )


def list_alerts(db: StateDB, *, limit: int = 100) -> list[dict[str, Any]]:
    """Alerts newest first, each with its rule's name and its deliveries."""
    with db.session() as s:
        rules = {r.id: r.name for r in s.scalars(select(AlertRule))}
        alerts = list(
            s.scalars(select(Alert).order_by(Alert.since.desc(), Alert.id.desc()).limit(limit))
        )
        deliveries: dict[int, list[dict[str, Any]]] = {}
        ids = [a.id for a in alerts]
        if ids:
            query = select(Delivery).where(Delivery.alert_id.in_(ids)).order_by(Delivery.id)
            for d in s.scalars(query):
                deliveries.setdefault(d.alert_id, []).append(
                    {
                        "event": d.event,
                        "attempt": d.attempt,
                        "at": iso(d.at),
                        "ok": d.ok,
                        "http_status": d.http_status,
                        "error": d.error,
                    }
                )
        return [
            {
                "id": a.id,
                "rule": rules.get(a.rule_id, "?"),
                "job": a.job,
                "status": a.status,
                "since": iso(a.since),
                "fired_at": iso(a.fired_at),
                "resolved_at": iso(a.resolved_at),
                "value": a.value,
                "deliveries": deliveries.get(a.id, []),
            }
            for a in alerts
        ]
