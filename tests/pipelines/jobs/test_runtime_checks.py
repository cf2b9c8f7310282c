"""The command where an extra is missing or Spark is too old: one line saying what to install (issue 28, 6).

Each test runs the ``pipelines`` command as its own process in an interpreter that lacks
something: a module blocked on ``sys.meta_path`` (as if its extra were not installed: the
same ``ModuleNotFoundError`` an import raises there), or a ``pyspark`` package older than
:data:`pipelines.extras.PYSPARK_MIN` first on the path (only its version is read: the check
comes before any other pyspark import). tests/test_packaging.py runs the command in a real
venv without extras too.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.extras import PYSPARK_MIN
from tests.helpers.cli import ROOT, Ran, no_trace, pipelines

INGEST = "jobs/orders_ingest.yaml"

#: runs ``pipelines ARGS`` with the top-level modules named in $BLOCKED not importable
WITHOUT = """
import os, sys
blocked = set(os.environ["BLOCKED"].split(","))
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
from pipelines.command import main
sys.exit(main(sys.argv[1:]))
"""


def without(blocked: str, *args: str, **env: str) -> Ran:
    return pipelines(*args, python=("-c", WITHOUT), BLOCKED=blocked, **env)


def test_without_the_jobs_extra_the_command_names_it() -> None:
    for args in (("validate",), ("list",), ("run", INGEST)):
        ran = without("pydantic", *args)
        assert ran.code == 1 and no_trace(ran.err) and ran.out == "", ran
        assert ran.err_lines == [
            "error: pipelines needs the 'jobs' extra (no module named 'pydantic'): "
            "pip install 'pulsarwire[jobs]'"
        ]


def test_without_pyspark_a_run_names_the_spark_extra(tmp_path: Path) -> None:
    ran = without("pyspark", "offsets", "show", INGEST, PIPELINES_DATA_DIR=str(tmp_path))
    assert ran.code == 1 and no_trace(ran.err), ran
    assert len(ran.err_lines) == 1 and "pip install 'pulsarwire[spark]'" in ran.err_lines[0], ran.err
    assert "no module named 'pyspark'" in ran.err_lines[0]
    assert without("pyspark", "validate", INGEST).code == 0  # validate never needs Spark


def test_a_pyspark_older_than_needed_is_named_with_the_runtime_to_use(tmp_path: Path) -> None:
    old = tmp_path / "old" / "pyspark"
    old.mkdir(parents=True)
    (old / "__init__.py").write_text('__version__ = "4.1.0"\n')  # Databricks Runtime 18's Spark
    ran = pipelines(
        "offsets", "show", INGEST, PYTHONPATH=f"{old.parent}:{ROOT}", PIPELINES_DATA_DIR=str(tmp_path)
    )
    assert ran.code == 1 and no_trace(ran.err), ran
    need = ".".join(map(str, PYSPARK_MIN))
    assert ran.err_lines[0].startswith(f"error: pyspark 4.1.0 is too old: pipelines needs pyspark >= {need}")
    assert "on Databricks a runtime >= 19" in ran.err_lines[0]
