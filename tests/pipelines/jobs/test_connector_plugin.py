"""A connector written outside pipelines runs a whole job: the next protocol is one module.

``tests/helpers/memory_connector.py`` (``source.memory``: Arrow batches with integer offsets) is
installed as a package would install it — an entry point of the group ``pipelines.connectors`` —
and nothing in the runner, preflight, config or state modules knows it. Its job streams into
Delta exactly once through the ``pipelines`` command: a processing-time run stopped by Ctrl-C
after its first batch, a rerun, a rerun without checkpoint after more data arrived (recovery
from the offset store), a backfill that finds everything there, ``offsets show``. Those steps
share one process and one Spark session (cost); ``validate`` is a ``pipelines`` process of its
own.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.errors import JobError
from pipelines.jobs.config import load_job
from tests.helpers.cli import ROOT, command_env, pipelines
from tests.helpers.memory_connector import append, install

JOB = """\
name: mem_ingest
source:
  memory: {{path: {data}, max_rows_per_batch: 5}}
sink:
  delta: {{path: {tmp}/table}}
checkpoint: {tmp}/ck
offsets: {tmp}/offsets
trigger: {{processing_time: 1s}}
backfill: {{from: earliest}}
"""


def steps(out: str) -> dict[str, tuple[str, int]]:
    """``== <step>`` ... ``== exit <code>`` blocks → step → (its output, exit code)."""
    found = re.findall(r"^== (?!exit )(.+?)\n(.*?)^== exit (\d+)$", out, re.S | re.M)
    return {name: (text, int(code)) for name, text, code in found}


@pytest.mark.long  # make test-long (CI): the suite's longest path is its Spark-process tests
@pytest.mark.spark_process  # the steps that run Spark share a process of their own
def test_a_connector_from_a_package_runs_the_whole_job_cycle(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for first in (0, 8):
        append(data, [f"m{i}" for i in range(first, first + 8)])
    append(data, [f"m{i}" for i in range(16, 20)])
    job = tmp_path / "mem.yaml"
    job.write_text(JOB.format(data=data, tmp=tmp_path))
    site = str(install(tmp_path / "site"))
    path = f"{ROOT}:{site}"

    ran = pipelines("validate", str(job), PYTHONPATH=path)
    assert (ran.code, ran.out_lines) == (0, [f"ok  {job}"]), ran.err
    with pytest.raises(JobError) as info:  # not installed here: the section is unknown
        load_job(job, "local", conf_dir=ROOT / "conf")
    (problem,) = info.value.problems
    assert problem.startswith(f"{job}: source.memory: unknown key (expected one of: pulsar, delta")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.memory_connector", str(job), str(tmp_path / "ck"), str(data)],
        cwd=ROOT,
        env=command_env(PYTHONPATH=path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = steps(proc.stdout)
    text, code = done["dry run"]
    assert code == 0 and "mem-partition-0: from after offset -1 (offsets); last offset 19" in text, text
    text, code = done["run"]
    assert code == 130, proc.stdout + proc.stderr[-3000:]
    assert "[mem_ingest] batch 0: 5 rows" in text, text
    stopped = re.search(r"\[mem_ingest\] stopped \(rerun to continue\): \d+ batches, (\d+) rows", text)
    assert stopped is not None and 5 <= int(stopped[1]) < 20, text  # Ctrl-C after the first batch
    text, code = done["rerun"]
    rerun = re.search(r"\[mem_ingest\] done: \d+ batches, (\d+) rows .* has 20 rows", text)
    assert code == 0 and rerun is not None and int(rerun[1]) == 20 - int(stopped[1]), text
    text, code = done["no checkpoint"]
    assert code == 0, text
    assert 'no checkpoint: resuming from the offset store {"mem-partition-0": "0:19:-1"}' in text
    assert re.search(r"done: \d+ batches, 5 rows .* has 25 rows", text), text
    text, code = done["backfill"]
    assert code == 0 and "; 0 new rows in" in text and "(everything was already there)" in text, text

    rows = DeltaTable(str(tmp_path / "table")).to_pyarrow_table().sort_by("offset").to_pylist()
    assert [(r["topic"], r["offset"], r["value"]) for r in rows] == [("mem", i, f"m{i}") for i in range(25)]
    released = json.loads((data / "released.json").read_text())
    assert released[-1] == ["release", {"mem-partition-0": "0:24:-1"}]

    text, code = done["offsets show"]
    assert code == 0, text
    (line,) = [x for x in text.splitlines() if x.strip().startswith("mem-partition-0")]
    assert re.match(r"\s+mem-partition-0  0:24:-1  batch \d+  at .+  end 0:24:-1  backlog 0 messages$", line)


def test_an_installed_connector_that_cannot_be_loaded_is_one_line(tmp_path: Path) -> None:
    info = tmp_path / "broken-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pipelines.connectors]\nsource.broken = no_such_module:Section\n")
    ran = pipelines("validate", "jobs/orders_ingest.yaml", PYTHONPATH=f"{ROOT}:{tmp_path}")
    assert (ran.code, ran.out, ran.err_lines) == (
        1,
        "",
        [
            "error: the installed connector source.broken = no_such_module:Section cannot be loaded: "
            "ModuleNotFoundError: No module named 'no_such_module'"
        ],
    )


def test_a_source_without_ranges_is_refused_a_reset_and_a_backfill_in_one_line(tmp_path: Path) -> None:
    job = tmp_path / "memstream.yaml"
    text = JOB.replace("memory:", "memstream:").replace("backfill: {{from: earliest}}\n", "")
    job.write_text(text.format(data=tmp_path / "data", tmp=tmp_path))
    path = f"{ROOT}:{install(tmp_path / 'site')}"
    reset = pipelines("offsets", "reset", str(job), "--to", "earliest", "--yes", PYTHONPATH=path)
    backfill = pipelines("backfill", str(job), PYTHONPATH=path)
    why = "needs a pulsar or memory source; this job reads memstream"
    assert (reset.code, reset.out, reset.err_lines) == (1, "", [f"{job}: source: offsets reset {why}"])
    assert (backfill.code, backfill.out, backfill.err_lines) == (1, "", [f"{job}: source: backfill {why}"])


def test_a_profile_section_of_an_installed_kind_gives_its_source_defaults(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "lab.yaml").write_text(f"memory: {{path: {tmp_path}/data, max_rows_per_batch: 7}}\n")
    job = tmp_path / "mem.yaml"
    job.write_text(
        f"name: m\nsource: {{memory: {{topic: t}}}}\nsink: {{console: {{}}}}\ncheckpoint: {tmp_path}/ck\n"
    )
    path = f"{ROOT}:{install(tmp_path / 'site')}"
    ran = pipelines("validate", str(job), "--show", "--env", "lab", "--conf-dir", str(conf), PYTHONPATH=path)
    assert ran.code == 0, ran.err
    assert "    source:\n      memory:\n" in ran.out
    assert f"path: {tmp_path}/data\n" in ran.out and "max_rows_per_batch: 7\n" in ran.out
    assert "topic: t\n" in ran.out
