"""The two ways fedbench is installed agree: a user's install takes the ranges in pyproject.toml, CI (and the
README's test command) the exact versions in constraints.txt, which were tested. These tests say when a pin has
left its range, a dependency has no pin, or this environment runs other versions than the pins.

After changing a range or upgrading on purpose, re-pin from a fresh environment:

    python3 -m venv /tmp/pin && /tmp/pin/bin/pip install -q -e ".[test]" && \\
        /tmp/pin/bin/pip freeze --exclude-editable | sort > constraints.txt
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
CHECKED_EXTRAS = ("postgres", "test")
"""The extras CI installs (`.[test]`, which pulls `postgres`); `cluster`'s own packages are not installed here."""


def pins(text: str) -> dict[str, str]:
    """constraints.txt as name -> exact version (only `name==version` lines; comments and blanks skipped)."""
    found = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s;]+)", line)
        assert match, f"constraints.txt: {line!r} is not an exact pin (name==version)"
        found[canonicalize_name(match.group(1))] = match.group(3)
    return found


def direct_requirements(project: dict) -> list[Requirement]:
    """The project's own dependencies and those of the extras CI installs (an extra naming fedbench is expanded
    where it is listed, so it is skipped here)."""
    listed = list(project["dependencies"])
    for extra in CHECKED_EXTRAS:
        listed += project["optional-dependencies"][extra]
    return [r for r in map(Requirement, listed) if canonicalize_name(r.name) != "fedbench"]


def disagreements(project: dict, pinned: dict[str, str]) -> list[str]:
    """Each direct requirement with no pin, or whose pin its range does not admit."""
    found = []
    for requirement in direct_requirements(project):
        pin = pinned.get(canonicalize_name(requirement.name))
        if pin is None:
            found.append(f"{requirement.name}: required as '{requirement}' but not pinned in constraints.txt")
        elif not requirement.specifier.contains(pin, prereleases=True):
            found.append(f"{requirement.name}: pinned {pin}, outside pyproject.toml's range '{requirement.specifier}'")
    return found


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_every_direct_dependency_is_pinned_within_its_range():
    found = disagreements(project(), pins((ROOT / "constraints.txt").read_text()))
    assert not found, "pyproject.toml and constraints.txt disagree:\n" + "\n".join(found)


def test_a_pin_outside_its_range_or_missing_is_reported():
    """The check itself can fail: a pin outside the range and a missing pin are both named."""
    fake = {"dependencies": ["numpy>=2", "rich>=13"], "optional-dependencies": {"postgres": [], "test": []}}
    found = "\n".join(disagreements(fake, {"numpy": "1.26.4"}))
    assert "numpy: pinned 1.26.4, outside" in found and "rich: required as 'rich>=13' but not pinned" in found


def test_this_environment_runs_the_pinned_versions():
    """CI installs with `-c constraints.txt`; a developer environment that drifted from the pins is told which
    packages differ (its results may then differ from CI's)."""
    pinned_versions, drifted = pins((ROOT / "constraints.txt").read_text()), []
    for requirement in direct_requirements(project()):
        name = canonicalize_name(requirement.name)
        pinned = pinned_versions.get(name)
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            continue
        if pinned is not None and Version(installed) != Version(pinned):
            drifted.append(f"{name}: installed {installed}, pinned {pinned}")
    if drifted:
        pytest.fail(
            "this environment is not the one CI tests (reinstall with -c constraints.txt):\n" + "\n".join(drifted)
        )
