"""The import boundaries of pipelines' sub-packages.

Only ``pipelines.spark`` (and the runner, which starts Spark, with ``pipelines.jobs.jvm`` that
launches its JVM and ``pipelines.jobs.testing`` that runs it) may import pyspark when
imported; ``pipelines validate`` and ``pipelines list`` run in a fresh interpreter without
loading it. Checked twice: statically, on every module's top-level imports, and by running the
command in a subprocess and listing its modules.

Imports stay at the top of a module, except the few :data:`NESTED_IMPORTS` list with their
reason: keeping pyspark out of the modules above, and keeping what only some queries need out
of the Python process Spark starts for the driver side of every streaming query (its imports
are most of that process's work before the first batch).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipelines"
#: modules that may import pyspark at import time (relative to pipelines/)
SPARK_MODULES = ("spark/", "jobs/runner.py", "jobs/session.py", "jobs/jvm.py", "jobs/testing.py")

_NO_PYSPARK = "the module may not load pyspark when imported; Spark's Delta API only where Spark writes"
_PER_QUERY = "imported by the driver process Spark starts for each streaming query"
_OPENED = "a section model imports its connector when a command opens it: validate and list never do"
_TYPES = "the section model's type only (TYPE_CHECKING): the model imports its connector, not the reverse"
_SPARK_SIDE = (
    "Spark's side of a connector only when it reads or writes: preflight and offsets show load no pyspark"
)
#: (module relative to pipelines/, module imported inside a function) -> why it is not at the top
NESTED_IMPORTS = {
    ("__init__.py", "pipelines.spark.datasource"): "register() loads pyspark; `import pipelines` does not",
    ("jobs/cli.py", "pipelines.jobs"): "the runner (pyspark) only for commands that run Spark",
    ("command.py", "pipelines.jobs.cli"): "a missing extra (pydantic, pyyaml) becomes one line, not a trace",
    ("extras.py", "pyspark"): "its version is read only when a command runs Spark or registers the source",
    ("jobs/sql.py", "sqlglot"): "the SQL parser (67 ms to import) only for jobs with SQL transforms",
    ("jobs/sql.py", "sqlglot.errors"): "the SQL parser only for jobs with SQL transforms",
    ("jobs/models.py", "pipelines.connectors.console"): _OPENED,
    ("jobs/models.py", "pipelines.connectors.delta"): _OPENED,
    ("jobs/models.py", "pipelines.connectors.pulsar"): _OPENED,
    ("connectors/console.py", "pipelines.jobs.models"): _TYPES,
    ("connectors/delta.py", "pipelines.jobs.models"): _TYPES,
    ("connectors/pulsar.py", "pipelines.jobs.models"): _TYPES,
    ("jobs/sink_schema.py", "pipelines.jobs.models"): _TYPES,
    ("connectors/pulsar.py", "pipelines.spark"): _SPARK_SIDE,
    ("connectors/pulsar.py", "pipelines.spark.reader"): _SPARK_SIDE,
    ("connectors/pulsar.py", "pipelines.spark.sink"): _SPARK_SIDE,
    ("connectors/pulsar.py", "pyspark.sql"): _SPARK_SIDE,
    ("state/delta.py", "delta.tables"): _NO_PYSPARK,
    ("state/offsets.py", "delta.tables"): _NO_PYSPARK,
    ("state/offsets.py", "pyspark.sql"): _NO_PYSPARK,
    ("spark/datasource.py", "pipelines.spark.sink"): f"{_PER_QUERY}: a reading query never writes",
    ("spark/reader.py", "pipelines.spark.schemas"): f"{_PER_QUERY}: fastavro and co. for schema=auto only",
    ("spark/reader.py", "pipelines.state.offsets"): f"{_PER_QUERY}: deltalake for offsetStore only",
    ("spark/reader.py", "pyarrow.compute"): f"{_PER_QUERY}: for rows of corrupt entries only",
    ("spark/planner.py", "pyarrow.compute"): f"{_PER_QUERY}: for maxBytesPerTrigger only",
}


def imports(path: Path, *, nested: bool = False) -> set[str]:
    """The modules a file imports when it is imported; with ``nested`` also inside functions."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree) if nested else tree.body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def last_line(code: str) -> str:
    """The last line ``code`` prints, run in a fresh interpreter (which must exit 0)."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines, proc.stderr
    return lines[-1]


def nested_imports(path: Path) -> set[str]:
    """The modules a file imports inside functions (or any other nested block)."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in top:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_imports_stay_at_the_top_but_the_listed_ones() -> None:
    found = {
        (path.relative_to(PACKAGE).as_posix(), name)
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in nested_imports(path)
    }
    assert sorted(found - NESTED_IMPORTS.keys()) == [], "an import inside a function needs a listed reason"
    assert sorted(NESTED_IMPORTS.keys() - found) == [], "a listed nested import is gone: drop its entry"


def test_the_streaming_source_process_loads_only_what_reading_needs() -> None:
    """What the process Spark starts for a streaming query imports with the data source."""
    probe = (
        "import sys\n"
        "import pipelines.spark.datasource\n"
        "heavy = ('pipelines.spark.sink', 'pipelines.spark.schemas', 'pipelines.state.offsets',\n"
        "         'deltalake', 'fastavro', 'pyarrow.compute')\n"
        "print('LOADED', sorted(m for m in heavy if m in sys.modules))\n"
    )
    assert last_line(probe) == "LOADED []"


def test_only_the_spark_modules_import_pyspark_at_import_time() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        spark = {n for n in imports(path) if n.split(".")[0] == "pyspark"}
        if spark and not rel.startswith(SPARK_MODULES):
            offenders.append(f"pipelines/{rel}: {sorted(spark)}")
    assert offenders == []
    # the allowed list is not vacuous: the data source does import pyspark
    assert "pyspark.sql.datasource" in imports(PACKAGE / "spark" / "datasource.py")


def test_no_module_outside_spark_imports_the_spark_modules_at_import_time() -> None:
    """A module outside the Spark side that imported ``pipelines.spark.reader`` at import time
    would load pyspark through it: only planner (no Spark in it) is shared."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(SPARK_MODULES):
            continue
        for name in imports(path):
            if name.startswith(("pipelines.spark.", "pipelines.jobs.runner", "pipelines.jobs.testing")) and (
                name != "pipelines.spark.planner"
            ):
                offenders.append(f"pipelines/{rel}: {name}")
    assert offenders == []


def test_pipelines_uses_only_the_public_api_of_pulsarwire() -> None:
    """STYLE 6: pipelines reaches pulsarwire through ``import pulsarwire`` names only, never its
    submodules (the client's internals may change without pipelines noticing)."""
    offenders = [
        f"pipelines/{path.relative_to(PACKAGE).as_posix()}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in sorted(imports(path, nested=True))
        if name.startswith("pulsarwire.")
    ]
    assert offenders == []
    assert "pulsarwire" in imports(PACKAGE / "spark" / "sink.py")  # not vacuous


def test_pulsarwire_never_imports_pyspark() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "pulsarwire").rglob("*.py"))
        if "pyspark" in path.read_text()
        and any(n.split(".")[0] == "pyspark" for n in imports(path, nested=True))
    ]
    assert offenders == []


@pytest.mark.parametrize("command", [["validate", "jobs/orders_ingest.yaml"], ["list"]])
def test_validate_and_list_load_no_pyspark(command: list[str]) -> None:
    probe = (
        "import sys\n"
        "from pipelines.jobs.cli import main\n"
        f"code = main({command!r})\n"
        "spark = lambda m: m.split('.')[0] == 'pyspark' or m == 'pipelines.jobs.runner'\n"
        "loaded = sorted(m for m in sys.modules if spark(m))\n"
        "print('LOADED', loaded, 'EXIT', code)\n"
    )
    assert last_line(probe) == "LOADED [] EXIT 0"
