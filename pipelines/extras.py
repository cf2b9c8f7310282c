"""What the Spark side needs beside the core package, and the one line that says so when it is missing.

``pip install pulsarwire`` brings the protocol core only; the ``pipelines`` command needs the
``jobs`` extra (pydantic, pyyaml, deltalake, pyarrow, fastavro) and, to run a job, pyspark: the
``spark`` extra or a runtime's own (Databricks, a cluster). :func:`missing_extra` turns the
:class:`ModuleNotFoundError` of a missing one into the line naming the extra to install.

:data:`PYSPARK_MIN` is the oldest pyspark whose Python data source API has everything the
``pulsarwire`` source and sink use; measured, not guessed, from each release's
``pyspark/sql/datasource.py`` and ``pyspark/sql/streaming/datasource.py`` (docs/install.md
has the table): 4.0 brought ``DataSource``, ``DataSourceReader``/``DataSourceStreamReader``,
``DataSourceArrowWriter`` and readers yielding Arrow batches; 4.1 ``DataSourceStreamArrowWriter``;
4.2 admission control (``pyspark.sql.streaming.datasource``: ``ReadLimit``, ``ReadMaxRows``,
``ReadMinRows``, ``ReadMaxBytes``, ``ReadAllAvailable``, ``SupportsTriggerAvailableNow``;
``latestOffset(start, limit)``, ``getDefaultReadLimit``, ``reportLatestOffset``).
:func:`check_pyspark` refuses an older one in one line before any of it is imported.
This module imports nothing outside the standard library.
"""

from __future__ import annotations

from pipelines.errors import PipelinesError

__all__ = ["DATABRICKS_RUNTIME", "PYSPARK_MIN", "check_pyspark", "missing_extra"]

#: the oldest pyspark with every data source API pipelines uses (see the module docstring)
PYSPARK_MIN = (4, 2)
#: the first Databricks Runtime whose Spark is PYSPARK_MIN (Runtime 19: Apache Spark 4.2.0)
DATABRICKS_RUNTIME = "19"

#: top-level module -> the extra that installs it
_EXTRA_OF = {
    "pydantic": "jobs",
    "pydantic_core": "jobs",
    "yaml": "jobs",
    "deltalake": "jobs",
    "pyarrow": "jobs",
    "fastavro": "jobs",
    "pyspark": "spark",
    "py4j": "spark",
    "delta": "delta-spark",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The line naming the extra that installs ``exc``'s missing module; None for another module."""
    module = (exc.name or "").split(".")[0]
    extra = _EXTRA_OF.get(module)
    if extra is None:
        return None
    if extra == "spark":
        return (
            f"pipelines needs pyspark to run a job (no module named {module!r}): "
            "pip install 'pulsarwire[spark]', or run it where Spark is installed "
            "(a cluster, Databricks) with 'pulsarwire[jobs]'"
        )
    install = f"pip install 'pulsarwire[{extra}]'"
    return f"pipelines needs the {extra!r} extra (no module named {module!r}): {install}"


def _version(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_pyspark() -> None:
    """Raise PipelinesError (one line) when the installed pyspark is older than :data:`PYSPARK_MIN`.

    Raises ModuleNotFoundError when pyspark is not installed (:func:`missing_extra` words it).
    """
    import pyspark

    found = str(getattr(pyspark, "__version__", "0"))
    if _version(found) < PYSPARK_MIN:
        need = ".".join(map(str, PYSPARK_MIN))
        raise PipelinesError(
            f"pyspark {found} is too old: pipelines needs pyspark >= {need} (the Python data source's "
            f"admission control and Trigger.AvailableNow came with Spark {need}); "
            f"pip install 'pulsarwire[spark]', or on Databricks a runtime >= {DATABRICKS_RUNTIME} "
            f"(Runtime {DATABRICKS_RUNTIME} is Apache Spark {need}.0)"
        )
