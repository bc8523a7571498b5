"""What Redis answers, as Python values: text, and the status each node publishes.

Every client of this project reads binary replies (``decode_responses=False``); these
are the words that turn them into what the layers above show and compare.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["json_object", "json_objects", "node_status", "node_statuses", "text"]


def text(value: Any) -> str:
    """A Redis reply as str: bytes as UTF-8 (a byte that is not UTF-8 becomes U+FFFD,
    so that showing or logging a reply never fails), a str as it is, anything else
    (a number) by ``str()``."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def json_object(raw: bytes | str) -> dict[str, Any] | None:
    """The JSON object stored in a hash field or key; None when the value is not JSON or
    not an object."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def json_objects(reply: Mapping[Any, Any]) -> dict[str, dict[str, Any]]:
    """A hash of JSON objects as HGETALL returns it: field -> :func:`json_object`, the
    fields that hold no JSON object left out."""
    out: dict[str, dict[str, Any]] = {}
    for field_name, raw in reply.items():
        doc = json_object(raw)
        if doc is not None:
            out[text(field_name)] = doc
    return out


def node_status(raw: bytes | str) -> dict[str, Any]:
    """The status a node published in its job's ``nodeinfo`` hash (a JSON object, see
    :mod:`crawlfleet.node.telemetry`). A value that is not one comes back as
    ``{"status_error": "not a JSON object"}``: a node's bad write shows as such, not as
    an error of the reader."""
    status = json_object(raw)
    return {"status_error": "not a JSON object"} if status is None else status


def node_statuses(reply: Mapping[Any, Any]) -> dict[str, dict[str, Any]]:
    """A job's ``nodeinfo`` hash as HGETALL returns it: node id -> :func:`node_status`."""
    return {text(node): node_status(raw) for node, raw in reply.items()}
