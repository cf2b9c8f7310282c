"""Safety of job files (issue 15): what validating, showing and running a job may not do.

* ``validate`` runs no job code: a ``transform.python`` module is found and parsed, not
  imported (``run`` imports it);
* secrets are masked by value wherever they are printed, URL credentials included;
* YAML aliases cannot blow a small file up: validation stays linear, deep expansion is refused;
* the local profile keeps Spark's driver on loopback;
* publishing a Delta table reads its data files by their decoded paths (the Delta log stores
  them URI-encoded), so partition values with spaces, ``%``, ``/`` or non-ASCII publish.
"""

from __future__ import annotations

import io
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from pipelines.jobs.cli import main
from pipelines.jobs.config import load_job
from pipelines.jobs.runner import run_job
from pipelines.masking import MASK, mask
from pulsarwire.broker import Broker
from tests.helpers.pw_client import read_topic

ROOT = Path(__file__).resolve().parents[3]

JOB = """\
name: t
source:
  pulsar:
    service_url: pulsar://127.0.0.1:6650
    topic: orders
transform:
  python: jobs.side_effect:transform
sink:
  console: {}
"""


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PIPELINES_PROJECT_DIR", raising=False)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "local.yaml").write_text((ROOT / "conf" / "local.yaml").read_text())
    return tmp_path


def test_validate_runs_no_job_code(project: Path) -> None:
    marker = project / "imported"
    (project / "jobs" / "side_effect.py").write_text(
        f"open({str(marker)!r}, 'w').write('the module ran')\n\ndef transform(df):\n    return df\n"
    )
    (project / "jobs" / "t.yaml").write_text(JOB)
    code, out, err = cli("validate", "jobs/t.yaml")
    assert (code, out) == (0, "ok  jobs/t.yaml\n"), err
    assert not marker.exists()  # found and parsed, never imported

    (project / "jobs" / "t2.yaml").write_text(
        JOB.replace("name: t", "name: t2").replace(":transform", ":nope")
    )
    code, out, _ = cli("validate", "jobs/t2.yaml")
    assert (code, out) == (
        1,
        "jobs/t2.yaml: transform.python: module 'jobs.side_effect' has no function 'nope'\n",
    )
    assert not marker.exists()

    job = load_job("jobs/t.yaml", None)
    assert job.transform_function() is not None  # run imports it
    assert marker.read_text() == "the module ran"


def test_secrets_are_masked_by_value_in_urls(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PW_DB_PASSWORD", "pa55-from-env")
    (project / "jobs" / "t.yaml").write_text(
        JOB.replace("transform:\n  python: jobs.side_effect:transform\n", "")
        + "vars:\n"
        + "  sas: https://acct.blob.core.windows.net/c/x?sv=2022-11-02&sig=Zm9vYmFy%2Bc2ln&se=2030\n"
        + "  jdbc: jdbc:postgresql://db/orders?user=etl&password=hunter2hunter2\n"
        + "  broker: pulsar+ssl://etl:s3cr3t-in-url@pulsar.example.com:6651\n"
        + "  from_env: ${env:PW_DB_PASSWORD}\n"
        + "  copy: prefix-${env:PW_DB_PASSWORD}-suffix\n"
    )
    code, out, err = cli("validate", "--show", "jobs/t.yaml")
    assert code == 0, err
    for secret in ("Zm9vYmFy%2Bc2ln", "hunter2hunter2", "s3cr3t-in-url", "pa55-from-env"):
        assert secret not in out
    assert f"sig={MASK}&se=2030" in out and f"password={MASK}" in out
    assert f"pulsar+ssl://etl:{MASK}@pulsar.example.com" in out and f"prefix-{MASK}-suffix" in out

    # in errors too: a bad value echoed back, and an error raised later by anything
    code, out, _ = cli("validate", "jobs/t.yaml", "--set", "trigger=${vars.jdbc}")
    assert code == 1 and "hunter2hunter2" not in out and out.startswith("--set: trigger: expected")
    assert mask("failed: reading pa55-from-env at https://h/x?token=abc123def") == (
        f"failed: reading {MASK} at https://h/x?token={MASK}"
    )


def billion_laughs(levels: int) -> str:
    lines = ["vars:", "  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        lines.append(f"  l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return JOB + "\n".join(lines) + "\n"


def test_yaml_alias_expansion_is_refused_in_linear_time(project: Path) -> None:
    (project / "jobs" / "side_effect.py").write_text("def transform(df):\n    return df\n")
    (project / "jobs" / "t.yaml").write_text(billion_laughs(9))  # 10**9 values once expanded
    t = time.monotonic()
    code, out, _ = cli("validate", "jobs/t.yaml")
    assert time.monotonic() - t < 5
    assert code == 1 and out.startswith("jobs/t.yaml:15:7: this value holds more than 20000 values once")
    (project / "jobs" / "t.yaml").write_text(JOB + "vars: &v\n  me: *v\n")
    assert cli("validate", "jobs/t.yaml")[1] == "jobs/t.yaml:10:7: a YAML alias refers to itself\n"
    (project / "jobs" / "t.yaml").write_text(billion_laughs(3))  # 1110 values: aliases are fine
    assert cli("validate", "jobs/t.yaml")[:2] == (0, "ok  jobs/t.yaml\n")


def test_the_local_profile_binds_the_driver_to_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    job = load_job("jobs/orders_ingest.yaml", "local")
    assert job.spark.conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert job.spark.conf["spark.driver.host"] == "127.0.0.1"


def test_publish_reads_uri_encoded_partition_paths(
    spark: Any, dedup_broker: Broker, tmp_path: Path, topic_name: str
) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    cities = ["New York", "100% sure", "a/b", "Zürich", "São Paulo", "plain"]
    table = str(tmp_path / "cities")
    write_deltalake(
        table,
        pa.table({"value": [f"order in {c}" for c in cities], "city": cities}),
        partition_by=["city"],
    )
    paths = [a["path"] for a in pa.table(DeltaTable(table).get_add_actions(flatten=True)).to_pylist()]
    assert any("%" in p for p in paths)  # the log holds them encoded
    (tmp_path / "publish.yaml").write_text(
        f"""\
name: publish_cities
source: {{delta: {{path: "{table}"}}}}
transform: {{sql: "SELECT value FROM source"}}
sink: {{pulsar: {{service_url: "{dedup_broker.service_url}", topic: "{topic_name}"}}}}
checkpoint: "{tmp_path}/checkpoint"
"""
    )
    job = load_job(str(tmp_path / "publish.yaml"), None)
    assert run_job(job) == 0
    got = sorted(m.data().decode() for m in read_topic(dedup_broker.service_url, topic_name))
    assert got == sorted(f"order in {c}" for c in cities)
