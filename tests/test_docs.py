"""The documentation stays true: every setting documented with its default."""

from __future__ import annotations

import re
from pathlib import Path

from crawlfleet.settings.config import defaults

ROOT = Path(__file__).resolve().parents[1]


def test_every_setting_is_in_the_settings_reference() -> None:
    text = (ROOT / "docs" / "settings.md").read_text()
    headings = re.findall(r"^### (.+)$", text, flags=re.M)
    documented = {name.strip() for h in headings for name in h.split(",")}
    missing = sorted(set(defaults()) - documented)
    assert not missing, f"settings missing from docs/settings.md: {missing}"
    unknown = sorted(documented - set(defaults()))
    assert not unknown, f"docs/settings.md documents unknown settings: {unknown}"
    for section in re.split(r"^### ", text, flags=re.M)[1:]:
        assert "\nDefault: " in section, f"no 'Default:' line under {section.splitlines()[0]}"


def test_readme_quick_start_is_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "./dev.sh demo" in readme and "./dev.sh test" in readme
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("exec ./dev.sh test")
