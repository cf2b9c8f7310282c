"""The transformed rows' columns against the Delta table a job writes, before any data is read.

A Delta table has a schema; a batch whose columns differ from it fails when it is written —
after the stream has read it — with the engine's own message. The runner calls
:func:`schema_problems` on the transformed rows' schema (Spark computes it from the plan
without reading data) before the query starts, and a difference is one line per column,
naming the job key that fixes it:

* a column the rows have and the table lacks — allowed with ``sink.delta.schema_mode: merge``
  (the write adds it; earlier rows read null), else ``sink.delta.schema_mode: ... is not in the
  table``;
* a column the table has and the rows lack — allowed with ``merge`` (written as null), else an
  error the same way;
* a column whose type differs (nested struct fields are compared field by field) — an error
  in either mode, under ``transform``: a merge adds columns, it does not change a type.

Types are compared as Delta's schema JSON, which is Spark's (``StructType.jsonValue()``):
``long``, ``string``, ``timestamp``, ``decimal(10,2)``, ``struct``/``array``/``map`` trees.
Nullability and column metadata are not compared. Names are compared exactly. The table's
schema is read with deltalake (a path or URI; no Spark), or through Spark for a catalog table
name; a table that does not exist yet has nothing to differ from.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from pipelines.connectors.base import JobContext
from pipelines.state.delta import is_table_name

__all__ = ["Difference", "differences", "schema_problems", "table_schema", "type_text"]

if TYPE_CHECKING:
    from pipelines.jobs.models import DeltaSink

log = logging.getLogger("pipelines.jobs.sink_schema")

#: a Delta/Spark schema JSON type: a name ("long") or a struct/array/map object
JsonType = str | dict[str, Any]


@dataclass(frozen=True)
class Difference:
    """One column that differs: ``kind`` is ``new`` (rows only), ``missing`` (table only) or
    ``type``; ``column`` is dotted for nested fields (``items[].sku``)."""

    kind: str
    column: str
    rows: JsonType | None
    table: JsonType | None


def type_text(t: JsonType | None) -> str:
    """A type as Spark prints it: ``bigint`` is ``long`` here, ``struct<a:long,b:string>``."""
    if t is None:
        return "-"
    if isinstance(t, str):
        return t
    kind = t.get("type")
    if kind == "struct":
        return "struct<" + ",".join(f"{f['name']}:{type_text(f['type'])}" for f in t["fields"]) + ">"
    if kind == "array":
        return f"array<{type_text(t['elementType'])}>"
    if kind == "map":
        return f"map<{type_text(t['keyType'])},{type_text(t['valueType'])}>"
    return str(kind)


def _shape(t: JsonType) -> Any:
    """A type without nullability and metadata, comparable with ``==``."""
    if isinstance(t, str):
        return t
    kind = t.get("type")
    if kind == "struct":
        return ("struct", tuple((f["name"], _shape(f["type"])) for f in t["fields"]))
    if kind == "array":
        return ("array", _shape(t["elementType"]))
    if kind == "map":
        return ("map", _shape(t["keyType"]), _shape(t["valueType"]))
    return json.dumps(t, sort_keys=True)


def _struct(t: JsonType) -> dict[str, JsonType] | None:
    if isinstance(t, dict) and t.get("type") == "struct":
        return {f["name"]: f["type"] for f in t["fields"]}
    return None


def differences(rows: JsonType, table: JsonType, prefix: str = "") -> Iterator[Difference]:
    """The columns in which the struct types ``rows`` and ``table`` differ, in the rows' order
    then the table's (nested structs, also inside arrays and map values, field by field)."""
    a, b = _struct(rows), _struct(table)
    if a is None or b is None:  # not both structs: compare as a whole
        if _shape(rows) != _shape(table):
            yield Difference("type", prefix.rstrip("."), rows, table)
        return
    for name, t in a.items():
        if name not in b:
            yield Difference("new", prefix + name, t, None)
        else:
            yield from _same_column(t, b[name], prefix + name)
    for name, t in b.items():
        if name not in a:
            yield Difference("missing", prefix + name, None, t)


def _same_column(rows: JsonType, table: JsonType, column: str) -> Iterator[Difference]:
    if _struct(rows) is not None and _struct(table) is not None:
        yield from differences(rows, table, column + ".")
        return
    if isinstance(rows, dict) and isinstance(table, dict) and rows.get("type") == table.get("type"):
        if rows["type"] == "array":
            yield from _same_column(rows["elementType"], table["elementType"], column + "[]")
            return
        if rows["type"] == "map" and _shape(rows["keyType"]) == _shape(table["keyType"]):
            yield from _same_column(rows["valueType"], table["valueType"], column + "{}")
            return
    if _shape(rows) != _shape(table):
        yield Difference("type", column, rows, table)


def table_schema(
    path: str, storage_options: dict[str, str] | None, spark: Any = None
) -> dict[str, Any] | None:
    """The schema JSON of the Delta table at ``path``; None when it does not exist (yet) or
    cannot be read without Spark (a catalog name and no session)."""
    if is_table_name(path):
        if spark is None or not spark.catalog.tableExists(path):
            return None
        value: dict[str, Any] = spark.table(path).schema.jsonValue()
        return value
    try:
        text = DeltaTable(path, storage_options=storage_options).schema().to_json()
    except TableNotFoundError:
        return None
    except (DeltaError, OSError) as exc:
        log.debug("%s: cannot read the table's schema: %s", path, exc)
        return None
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def schema_problems(
    ctx: JobContext, sink: DeltaSink, rows: dict[str, Any], table: dict[str, Any] | None
) -> list[str]:
    """One line per column in which the transformed ``rows`` (schema JSON) cannot be written to
    the job's Delta table (``table``, its schema JSON; None: no table yet)."""
    if table is None:
        return []
    merge = sink.schema_mode == "merge"
    where = f"the table {sink.path}"
    out: list[str] = []
    for d in differences(rows, table):
        if d.kind == "type":
            out.append(
                f"{ctx.file}: transform: column {d.column} is {type_text(d.rows)} in the transformed "
                f"rows but {type_text(d.table)} in {where}; cast it to {type_text(d.table)} in the transform "
                "(schema_mode: merge adds columns, it does not change a column's type)"
            )
        elif merge:
            continue
        elif d.kind == "new":
            out.append(
                f"{ctx.file}: sink.delta.schema_mode: column {d.column} ({type_text(d.rows)}) of the "
                f"transformed rows is not in {where}; set sink.delta.schema_mode: merge to add it, or "
                "leave it out in the transform"
            )
        else:
            out.append(
                f"{ctx.file}: sink.delta.schema_mode: column {d.column} ({type_text(d.table)}) of "
                f"{where} is not in the transformed rows; set sink.delta.schema_mode: merge to write "
                "it as null, or produce it in the transform"
            )
    return out
