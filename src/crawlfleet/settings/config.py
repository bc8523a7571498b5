"""The one rule for where crawlfleet's settings come from, and their generic checks.

crawlfleet's defaults are installed below a project's own settings and the environment's
``CRAWLFLEET_*`` variables above them (:func:`apply_defaults`); an unknown
``CRAWLFLEET_*`` name is refused with the closest known one (:func:`check_unknown`).
Components read their settings through typed views that live beside them
(``crawlfleet.redis.config``, ``crawlfleet.frontier.config``), never with
``settings.get(NAME, default)``: the defaults live in ``default_settings`` only, and a
wrong value stops start-up with a :class:`~crawlfleet.exceptions.ConfigError` naming the
setting.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from typing import Any

from scrapy.settings import BaseSettings, Settings

from crawlfleet.exceptions import ConfigError
from crawlfleet.settings import default_settings
from crawlfleet.settings.access import defaults

__all__ = [
    "ENV_PRIORITY",
    "apply_defaults",
    "check_unknown",
    "defaults",
    "redact_url",
    "settings_with_defaults",
]

logger = logging.getLogger(__name__)


_SECRET_IN_URL = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]+@", re.IGNORECASE)


def redact_url(text: str) -> str:
    """*text* with the password of every URL in it replaced by ``***``."""
    return _SECRET_IN_URL.sub(r"\1***@", text)


def settings_with_defaults(values: dict[str, Any] | None = None) -> Settings:
    """A Scrapy ``Settings`` holding crawlfleet's defaults, updated with *values*.

    Used by commands that work without a crawler (seed, job reset, bench).
    """
    settings = Settings()
    apply_defaults(settings)
    for name, value in (values or {}).items():
        settings.set(name, value, priority="cmdline")
    return settings


#: Where the environment's ``CRAWLFLEET_*`` variables go: above settings files
#: ("project", 20), below spiders' custom_settings (30) and the command line (40).
ENV_PRIORITY = 25
#: Environment variables named ``CRAWLFLEET_*`` that are no setting (the test suite's,
#: ./dev.sh's): not said to be unknown.
_NOT_SETTINGS = re.compile(r"CRAWLFLEET_(TEST_.*|NO_APT|CHROMIUM)$")
_said_unknown: set[str] = set()


def apply_defaults(settings: BaseSettings) -> None:
    """Install crawlfleet's defaults below a project's own settings ("addon" priority)
    and every ``CRAWLFLEET_*`` setting the environment sets (a variable of the same
    name, not empty) above them: the one rule that the add-on (every node) and every
    command (the manager included) follow. An environment variable that is no setting
    but close to one's name is said once (a warning: it is not read)."""
    settings.setmodule(default_settings, priority="addon")
    known = defaults()
    for name, value in os.environ.items():
        if not name.startswith("CRAWLFLEET_") or not value:
            continue
        if name in known:
            settings.set(name, value, priority=ENV_PRIORITY)
        elif name not in _said_unknown and not _NOT_SETTINGS.match(name):
            _said_unknown.add(name)
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
            if close:
                logger.warning(
                    "The environment variable %s is no crawlfleet setting: not read "
                    "(did you mean %s?)",
                    name,
                    close[0],
                )


def check_unknown(settings: BaseSettings) -> None:
    """Reject ``CRAWLFLEET_*`` names that no component reads (a typo would be silent)."""
    known = set(defaults())
    for name in settings:
        if isinstance(name, str) and name.startswith("CRAWLFLEET_") and name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"unknown setting {name}{hint}")
