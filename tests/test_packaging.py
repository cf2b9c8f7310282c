"""The built wheel installs alone in a fresh virtualenv and the protocol core works there.

No extras: ``import pulsarwire`` and ``pulsarwire.broker`` load without pyspark or pyarrow, the
broker starts, our client produces and consumes through it, ``pip check`` is clean and the
version is the package's one version string; the ``pipelines`` command says in one line
which extra it needs. This is what a user on any Python gets from
``pip install pulsarwire`` (the Spark side comes with the ``jobs`` / ``spark`` extras).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SMOKE = """
import sys
import pulsarwire, pulsarwire.broker
from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client
from pulsarwire.codec.message_id import MessageId
with Broker() as broker:
    client = Client(broker.service_url)
    producer = client.create_producer("smoke")
    producer.send(b"hello")
    reader = client.create_reader("smoke", MessageId.EARLIEST)
    assert reader.read_next(10_000).data() == b"hello"
    client.close()
heavy = sorted(m for m in ("pyspark", "pyarrow", "pandas", "deltalake") if m in sys.modules)
print(pulsarwire.__version__, heavy)
"""


def _run(*args: str | Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload,no-any-return]


def test_the_wheel_installs_alone_and_the_core_runs_without_spark_or_arrow(tmp_path: Path) -> None:
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", tmp_path / "dist", ROOT)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("pulsarwire-*.whl")
    venv = tmp_path / "venv"
    assert _run(sys.executable, "-m", "venv", venv).returncode == 0
    python = venv / "bin" / "python"
    installed = _run(python, "-m", "pip", "install", "--quiet", wheel)
    assert installed.returncode == 0, installed.stderr[-2000:]
    smoke = _run(python, "-c", SMOKE, cwd=tmp_path)  # not the source tree: the installed wheel
    assert smoke.returncode == 0, smoke.stderr[-2000:]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert smoke.stdout.split() == [version, "[]"]
    check = _run(python, "-m", "pip", "check")
    assert check.returncode == 0, check.stdout + check.stderr
    listed = _run(python, "-m", "pip", "list", "--format=freeze").stdout.lower()
    assert "pyspark" not in listed and "pyarrow" not in listed
    # the pipelines command is there without its extras: it says in one line which to install
    command = _run(venv / "bin" / "pipelines", "validate", cwd=tmp_path)
    assert command.returncode == 1 and command.stdout == "", command
    assert command.stderr.splitlines() == [
        "error: pipelines needs the 'jobs' extra (no module named 'pydantic'): pip install 'pulsarwire[jobs]'"
    ]
