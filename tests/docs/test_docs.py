"""Every code block of README.md and docs/*.md runs as written, in a clean environment.

A user copies a block into a fresh shell: no ``PYSPARK_PYTHON``, no activated virtualenv,
the working directory a checkout (``jobs/``, ``conf/`` and the ``.venv`` that ``make``
creates). Each block runs the same way here, in its own process, with only ``PATH``,
``HOME`` and ``PYTHONPATH`` set — ``PYTHONPATH`` points at this checkout so that its code is
the one tested; in a ``make`` checkout the ``.venv`` has that same code installed:

* ``python`` blocks: ``.venv/bin/python`` reads the block from stdin;
* ``bash`` blocks: ``bash -e``; a broker they start on port 6650 gets a free port instead
  (and ``PULSAR_URL`` says which), the only change made to a block;
* ``yaml`` blocks: the README's is ``jobs/orders_ingest.yaml`` byte for byte, and the job
  of docs/jobs.md validates.

Plain and ``text`` blocks are output shown, not code. :data:`NOT_RUN` lists the few blocks
that are not run, each with the reason; ``test_every_block_is_run_or_excused`` fails for a
new block that is neither.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
VENV = Path(sys.prefix)


@dataclass(frozen=True)
class Block:
    file: str
    line: int
    lang: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M):
            line = text.count("\n", 0, m.start()) + 1
            found.append(Block(str(path.relative_to(ROOT)), line, m.group(1), m.group(2)))
    return found


BLOCKS = blocks()
#: blocks not run, by file and first line, with the reason
NOT_RUN = {
    ("README.md", "make test"): "make test is this test suite; its make run line is run by"
    " test_readme_runs_top_to_bottom",
    ("docs/testing.md", "make peers"): "the suite's own commands (make peers runs first in make test)",
    ("docs/broker.md", "python -m pulsarwire.broker --port 6650"): "a synopsis ([optional] arguments)",
    ("docs/kafka.md", "python -m pulsarwire.kafka.broker --host"): "a synopsis ([optional] arguments);"
    " tests/pulsarwire/kafka/broker/test_kafka_cli.py runs the command line",
    (
        "docs/broker.md",
        "# a secret key",
    ): "server set-up writing /etc and /var/lib; broker.md is the broker's",
    (
        "docs/spark.md",
        '(spark.read.format("pulsarwire")\n    .option("service.url", "pulsar+ssl://my-instance',
    ): "needs a managed Pulsar and its OAuth2 issuer; tests/pipelines/options/test_auth_options.py runs these"
    " options against a local issuer",
    (
        "docs/broker.md",
        "python -m pulsarwire.broker --data-dir /var/lib/pw",
    ): "server set-ups (a broker that runs until stopped, files under /var/lib and /etc); the flags"
    " are run by tests/pulsarwire/broker (test_broker_fidelity.py, test_hostile_tenancy.py)",
}


def excused(block: Block) -> bool:
    return any(block.file == f and block.code.startswith(start) for f, start in NOT_RUN)


PYTHON = [b for b in BLOCKS if b.lang == "python" and not excused(b)]


def python_param(block: Block) -> Any:
    """A python block as a test parameter; one that starts a SparkSession is marked ``spark_process``
    (tests/conftest.py runs those one at a time, on one worker), and outside the README also
    ``long``: ``make test`` runs the README's Spark blocks, ``make test-long`` (CI) the others —
    each starts a JVM, and the suite is CPU-bound within its 300 s."""
    marks = [pytest.mark.spark_process] if "SparkSession" in block.code else []
    if marks and block.file != "README.md":
        marks.append(pytest.mark.long)
    return pytest.param(block, id=block.id, marks=marks)


# -- the clean shell -----------------------------------------------------------------------------
@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A directory like a fresh checkout after ``make setup``: jobs/, conf/, .venv."""
    home = tmp_path / "checkout"
    home.mkdir()
    for name in ("jobs", "conf"):
        shutil.copytree(ROOT / name, home / name, ignore=shutil.ignore_patterns("__pycache__"))
    (home / ".venv").symlink_to(VENV)
    return home


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "PYTHONPATH": str(ROOT), **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shell(code: str, port: int) -> str:
    return code.replace("--port 6650", f"--port {port}")


def run_bash(
    code: str, cwd: Path, env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``bash -e`` in its own process group; whatever it left running is stopped after."""
    proc = subprocess.Popen(
        ["bash", "-e", "-c", code],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@contextlib.contextmanager
def readme_broker(checkout: Path) -> Iterator[str]:
    """The README's quick-start broker command, running (on a free port) while the block runs."""
    (block,) = [b for b in BLOCKS if b.file == "README.md" and "-m pulsarwire.broker" in b.code]
    port = free_port()
    proc = subprocess.Popen(
        ["bash", "-e", "-c", shell(block.code, port)],
        cwd=checkout,
        env=clean_env(checkout),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the README's broker did not start"
                time.sleep(0.1)
        yield f"pulsar://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


# -- the tests -------------------------------------------------------------------------------------
def test_readme_yaml_is_the_job_file() -> None:
    (block,) = [b for b in BLOCKS if b.file == "README.md" and b.lang == "yaml"]
    assert block.code == (ROOT / "jobs" / "orders_ingest.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize("block", [python_param(b) for b in PYTHON])
def test_python_block_runs_in_a_clean_environment(block: Block, checkout: Path) -> None:
    proc = subprocess.run(
        [str(checkout / ".venv" / "bin" / "python"), "-"],
        input=block.code,
        cwd=checkout,
        env=clean_env(checkout),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{block.id}\n{proc.stdout}\n{proc.stderr}"


def test_jobs_md_job_validates(checkout: Path) -> None:
    (block,) = [
        b for b in BLOCKS if b.file == "docs/jobs.md" and b.lang == "yaml" and b.code.startswith("name:")
    ]
    (checkout / "jobs" / "key_by_key.yaml").write_text(block.code)
    proc = run_bash(".venv/bin/pipelines validate jobs/key_by_key.yaml", checkout, clean_env(checkout))
    assert proc.returncode == 0 and proc.stdout == "ok  jobs/key_by_key.yaml\n", proc.stdout + proc.stderr


def test_jobs_md_profile_snippet_is_conf_databricks_yaml() -> None:
    """The profile block of docs/jobs.md names conf/databricks.yaml: it is that file's lines."""
    (block,) = [
        b for b in BLOCKS if b.file == "docs/jobs.md" and b.lang == "yaml" and b.code.startswith("pulsar:")
    ]
    assert block.code.rstrip("\n") in (ROOT / "conf" / "databricks.yaml").read_text()


@pytest.mark.spark_process
def test_readme_runs_top_to_bottom(checkout: Path) -> None:
    """What a user runs in the README's order, in one checkout: ``make run``, the quick-start
    broker, the Jobs commands against it. Each block finds the state the ones before it left
    (data dirs, ports): nothing "past the end", and the second ingest has nothing to read."""
    (two,) = [b for b in BLOCKS if b.file == "README.md" and b.code.startswith("make test")]
    (make_run,) = [line for line in two.code.splitlines() if line.startswith("make run")]
    shutil.copy(ROOT / "Makefile", checkout / "Makefile")
    # the checkout borrows this suite's .venv: -o keeps make from reinstalling into it
    make = make_run.replace("make run", "make -o .venv/.installed run", 1)
    proc = run_bash(make, checkout, clean_env(checkout))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "produced 5000 orders (5000 new" in proc.stdout and ": 5000 rows, 5000 orders" in proc.stdout

    (block,) = [b for b in BLOCKS if b.file == "README.md" and "pipelines validate" in b.code]
    with readme_broker(checkout) as url:
        proc = run_bash(block.code, checkout, clean_env(checkout, PULSAR_URL=url))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok  jobs/orders_ingest.yaml" in proc.stdout
    assert "[orders_ingest] done: " in proc.stdout and "orders_raw has 1000 rows" in proc.stdout
    assert "[orders_ingest] nothing to read: " in proc.stdout  # the second run: no Spark
    assert "no messages in this window" in proc.stdout
    assert "backlog 0 messages" in proc.stdout and "positions reset to " in proc.stdout
    assert "Traceback" not in proc.stderr and "past the topic's end" not in proc.stderr


@pytest.mark.spark_process
def test_jobs_md_commands_run(checkout: Path) -> None:
    (block,) = [b for b in BLOCKS if b.file == "docs/jobs.md" and b.lang == "bash"]
    port = free_port()
    env = clean_env(checkout, PULSAR_URL=f"pulsar://127.0.0.1:{port}")
    proc = run_bash(shell(block.code, port), checkout, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[orders_publish] done: " in proc.stdout and "published through version" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_admin_md_commands_run(checkout: Path) -> None:
    (block,) = [b for b in BLOCKS if b.file == "docs/admin.md" and b.lang == "bash"]
    port, http = free_port(), free_port()
    code = (
        shell(block.code, port)
        .replace(":8080", f":{http}")
        .replace("--http-port 8080", f"--http-port {http}")
    )
    proc = run_bash(code, checkout, clean_env(checkout), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if not line.startswith("pulsarwire broker ready")]
    assert lines[:3] == [
        "persistent://shop/orders/events-partition-0",
        "persistent://shop/orders/events-partition-1",
        "auditors",
    ]
    assert '"partitions" : 2' in proc.stdout and "Traceback" not in proc.stderr


def test_every_block_is_run_or_excused() -> None:
    run_by_tests = {"python", "yaml"}
    shell_blocks = {
        ("README.md", "pipelines validate"),
        ("README.md", "-m pulsarwire.broker"),
        ("docs/jobs.md", "pipelines validate"),
        ("docs/admin.md", "pulsarwire-admin"),
    }
    for block in BLOCKS:
        if block.lang in ("", "text") or excused(block) or block.lang in run_by_tests:
            continue
        assert any(block.file == f and key in block.code for f, key in shell_blocks), (
            f"{block.id}: a {block.lang} block no test runs: run it or add it to NOT_RUN with a reason"
        )
    assert all(any(excused(b) for b in BLOCKS if b.file == f) for f, _ in NOT_RUN)
