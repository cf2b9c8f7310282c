"""The test suite's own layout: shared helpers live in ``tests/helpers``, tests import only those.

A test module that imports another test module runs (and collects) code it does not own, and a
helper hidden in a test file gets copied instead of reused. So every ``tests.…`` import of a file
under ``tests/`` must name a module of the one helpers package, ``tests.helpers``; conftest files
follow the same rule (they import fixtures from helpers, never from test modules).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
HELPERS = "tests.helpers"


def package_of(path: Path) -> str:
    return ".".join(("tests", *path.parent.relative_to(TESTS).parts))


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every absolute and relative import in ``source``, a module of
    ``package``."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = parts[: len(parts) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            # ``from tests.x import y`` may import the module ``tests.x.y``
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
            found.append((node.lineno, base))
    return found


def test_test_modules_import_only_the_helpers_package() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        for line, name in imported_modules(path.read_text(encoding="utf-8"), package_of(path)):
            if name != "tests" and not name.startswith("tests."):
                continue
            if name == HELPERS or name.startswith(HELPERS + ".") or name == "tests":
                continue
            offenders.append(f"{path.relative_to(TESTS.parent)}:{line} imports {name}")
    assert offenders == [], "move what they share into tests/helpers:\n" + "\n".join(offenders)


def test_the_check_sees_every_spelling_of_importing_a_test_module() -> None:
    source = (
        "from tests.pipelines.spark.test_sink import values\n"
        "from .test_source import x\n"
        "from ..jobs import test_runner\n"
        "import tests.pulsarwire.conftest\n"
    )
    names = [name for _, name in imported_modules(source, package_of(TESTS / "pipelines" / "spark" / "x.py"))]
    assert "tests.pipelines.spark.test_sink" in names
    assert "tests.pipelines.spark.test_source" in names
    assert "tests.pipelines.jobs.test_runner" in names
    assert "tests.pulsarwire.conftest" in names
