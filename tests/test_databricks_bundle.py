"""The Databricks bundle runs on a runtime with the Spark pipelines needs, with the jobs extra (issue 28, 6).

conf/databricks-bundle.yml cannot be deployed here; what can be checked is what it says: the
runtime it names (Databricks Runtime N has Apache Spark 4.0.0 for 17.3 LTS, 4.1.0 for 18,
4.2.0 for 19, from Databricks' release notes) is at least :data:`pipelines.extras.DATABRICKS_RUNTIME`,
and its libraries install the wheel and the ``jobs`` extra, which a wheel library on Databricks
does not get with it (conf/databricks-requirements.txt, kept equal to pyproject's extra here).
The installed pyspark has every data source API pipelines uses (tests/helpers/pyspark_api.py).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pyspark
import yaml

from pipelines.extras import DATABRICKS_RUNTIME, PYSPARK_MIN, _version
from tests.helpers.pyspark_api import missing

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "conf" / "databricks-bundle.yml"
REQUIREMENTS = "conf/databricks-requirements.txt"


def _bundle() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(BUNDLE.read_text())


def _task_cluster() -> tuple[dict, dict]:  # type: ignore[type-arg]
    job = _bundle()["resources"]["jobs"]["orders_ingest"]
    (cluster,) = job["job_clusters"]
    (task,) = job["tasks"]
    return cluster["new_cluster"], task


def jobs_extra() -> list[str]:
    """The ``jobs`` extra's requirements, ``pulsarwire[...]`` ones spelled out."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    out: list[str] = []
    for req in extras["jobs"]:
        nested = re.fullmatch(r"pulsarwire\[(\w[\w-]*)\]", req)
        out += extras[nested.group(1)] if nested else [req]
    return out


def test_the_bundle_names_a_runtime_whose_spark_has_the_api_we_use() -> None:
    cluster, _ = _task_cluster()
    key = cluster["spark_version"]
    if key.startswith("${var."):
        key = _bundle()["variables"][key[len("${var.") : -1]]["default"]
    runtime = int(key.split(".")[0])
    assert runtime >= int(DATABRICKS_RUNTIME), key


def test_the_bundle_installs_the_wheel_with_the_jobs_extra() -> None:
    _, task = _task_cluster()
    libraries = task["libraries"]
    assert {"whl": "./dist/*.whl"} in libraries
    assert {"requirements": "${workspace.file_path}/" + REQUIREMENTS} in libraries
    assert REQUIREMENTS in _bundle()["sync"]["include"]
    listed = [
        line.strip()
        for line in (ROOT / REQUIREMENTS).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert listed == jobs_extra()
    assert task["python_wheel_task"]["entry_point"] == "pipelines"


def test_the_installed_pyspark_has_every_data_source_api_we_use() -> None:
    assert _version(pyspark.__version__) >= PYSPARK_MIN
    assert missing(Path(pyspark.__file__).parent.parent) == []
