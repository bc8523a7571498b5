"""Where the state DB is (``CRAWLFLEET_STATE_DB_URL``), read without SQLAlchemy: nodes
import this at start, and only open the state DB when they first write to it.
"""

from __future__ import annotations

import importlib.util
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

from scrapy.settings import BaseSettings

from crawlfleet.exceptions import ConfigError

__all__ = ["ENV_VAR", "check_state_db_url", "state_db_identity", "state_db_url"]

ENV_VAR = "CRAWLFLEET_STATE_DB_URL"
#: Dialect -> (default driver module, driver modules by name).
_DRIVERS = {
    "sqlite": ("sqlite3", {"pysqlite": "sqlite3"}),
    "postgresql": ("psycopg2", {"psycopg": "psycopg", "psycopg2": "psycopg2"}),
    "mysql": ("MySQLdb", {"pymysql": "pymysql", "mysqldb": "MySQLdb"}),
    "mariadb": ("MySQLdb", {"pymysql": "pymysql", "mysqldb": "MySQLdb"}),
}
_URL = re.compile(r"^([a-z]+)(?:\+([a-z0-9_]+))?://")
_SQLITE_FILE = re.compile(r"^sqlite(?:\+[a-z0-9_]+)?:///([^?]+)")


def state_db_url(settings: BaseSettings) -> str:
    """The state DB URL of *settings*: CRAWLFLEET_STATE_DB_URL (which the environment
    variable sets: see crawlfleet.settings.config.apply_defaults), else the state DB of
    the manager that started the node (CRAWLFLEET_MANAGER_STATE_DB_URL), else SQLite
    under CRAWLFLEET_DATA_DIR."""
    for name in ("CRAWLFLEET_STATE_DB_URL", "CRAWLFLEET_MANAGER_STATE_DB_URL"):
        url = str(settings.get(name) or "")
        if url:
            return url
    return f"sqlite:///{Path(str(settings.get('CRAWLFLEET_DATA_DIR'))) / 'state.sqlite3'}"


def state_db_identity(url: str) -> str:
    """Which database *url* is, to compare with another process's (never a password):
    a SQLite file as its absolute path on this machine (``sqlite:///PATH on HOST``: a
    relative path means another file in another folder), any other URL as
    ``dialect://host:port/database``."""
    found = _SQLITE_FILE.match(url)
    if found and found.group(1) == ":memory:":
        return f"sqlite in the memory of a process on {socket.gethostname()}"
    if found:
        path = Path(found.group(1)).absolute()
        return f"sqlite:///{path} on {socket.gethostname()}"
    parts = urlsplit(re.sub(r"^([a-z]+)\+[a-z0-9_]+://", r"\1://", url))
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"


def check_state_db_url(url: str) -> str:
    """*url* if it names a state DB crawlfleet can use (a known dialect whose driver is
    installed); else ConfigError, one line, without the URL's password."""
    found = _URL.match(url)
    shown = re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)
    if not found or found.group(1) not in _DRIVERS:
        raise ConfigError(
            f"{ENV_VAR} is not a database URL crawlfleet knows: {shown!r} (e.g. "
            "sqlite:///state.sqlite3, postgresql+psycopg://user@host/db, "
            "mysql+pymysql://user@host/db)"
        )
    dialect, driver = found.group(1), found.group(2)
    default, modules = _DRIVERS[dialect]
    module = modules.get(driver, driver) if driver else default
    if module is None or importlib.util.find_spec(module) is None:
        raise ConfigError(f"{ENV_VAR} {shown}: its driver ({module}) is not installed")
    return url
