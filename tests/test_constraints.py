"""One set of versions: constraints.txt pins what `make setup`, CI and the docs' tested install use.

The development venv holds exactly the pinned versions (make setup installs with ``-c
constraints.txt``), every package pyproject names is pinned (nothing floats between CI and a
developer), and each pin satisfies pyproject's range for it, so the tested set is one a user's
``pip install 'pulsarwire[spark]' -c constraints.txt`` resolves to.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def pins() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line).groups()  # type: ignore[union-attr]
            out[canonicalize_name(name)] = version
    return out


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return [r for r in reqs if canonicalize_name(r.name) != "pulsarwire"]


def test_the_venv_holds_the_pinned_versions() -> None:
    wrong = {
        name: (version, metadata.version(name))
        for name, version in pins().items()
        if metadata.version(name) != version
    }
    assert not wrong, f"installed versions differ from constraints.txt (pinned, installed): {wrong}"


def test_every_declared_package_is_pinned_within_its_range() -> None:
    pinned = pins()
    for req in declared():
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is not in constraints.txt"
        assert req.specifier.contains(pinned[name], prereleases=True), f"{req} vs pinned {pinned[name]}"
