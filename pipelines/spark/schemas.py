"""``schema=auto``: the topic's Pulsar schema as the Spark type of the ``value`` column.

On the driver, :func:`resolve_value_schema` lists the selected topic-partitions
(:class:`~pipelines.spark.planner.Planner`), asks the broker for the latest schema of
each parent topic (GET_SCHEMA) and requires one schema for all of them. No schema,
``BYTES`` or ``NONE`` leave ``value`` binary; AVRO, JSON and the primitive types
become a :class:`ValueSchema`, a small picklable value that travels to the
executors in each :class:`~pipelines.spark.reader.ReadRange`. The answer is cached per
connection and topics for :data:`SCHEMA_REUSE_SECONDS`, so that Spark asking for the
schema and then planning the read do not ask the broker twice (:func:`cached_value_schema`).

Pulsar's JSON schema definition is an Avro record schema, so AVRO and JSON share
one type tree (:func:`parse_avro`) and one Spark mapping (:func:`spark_type`).
Executors decode the bulk Arrow ``value`` column (:meth:`ValueSchema.decode`):

* primitives: the value buffer read as big-endian fixed-width numbers in one go
  (every value's length is checked first), UTF-8 validation for STRING;
* JSON: one vectorized ``pyarrow.json.read_json`` over the newline-joined values;
  if it refuses the batch, or the rows do not line up one per value, every value is
  decoded again with :mod:`json`, so a bad value is named instead of nulled;
* AVRO: ``fastavro.schemaless_reader`` per value, every byte must be consumed.

A value that does not decode fails the Spark task with :class:`SchemaDecodeError`
naming the topic-partition and ``ledger:entry:batch``. Arrow null values (tombstones)
stay null.
"""

from __future__ import annotations

import array
import functools
import importlib.util
import io
import json
import logging
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pipelines.errors import OptionError, PipelinesError
from pipelines.options.client import ClientSettings
from pipelines.spark.planner import Planner
from pulsarwire import TopicName

log = logging.getLogger("pipelines.spark.reader")

#: how long the driver reuses a schema it fetched for the same options
SCHEMA_REUSE_SECONDS = 30.0

#: Pulsar schema types whose values are plain bytes (``value`` stays binary)
RAW_TYPES = frozenset({"NONE", "BYTES"})

#: Pulsar schema types ``schema=auto`` refuses
UNSUPPORTED_TYPES = frozenset(
    {"KEY_VALUE", "PROTOBUF", "PROTOBUF_NATIVE", "AUTO", "AUTO_CONSUME", "AUTO_PUBLISH", "EXTERNAL"}
)


class SchemaDecodeError(PipelinesError):
    """A value does not decode with the topic's schema; names the topic-partition and position."""

    def __init__(self, topic: str, position: str, schema_type: str, reason: str) -> None:
        super().__init__(f"{topic}: the value at {position} does not decode as {schema_type}: {reason}")
        self.topic = topic
        self.position = position
        self.schema_type = schema_type
        self.reason = reason


# -- the type tree -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Leaf:
    """A scalar: boolean int long float double string enum bytes fixed date, or a timestamp kind."""

    kind: str


@dataclass(frozen=True, slots=True)
class DecimalNode:
    precision: int
    scale: int


@dataclass(frozen=True, slots=True)
class FieldNode:
    name: str
    node: Node
    nullable: bool


@dataclass(frozen=True, slots=True)
class RecordNode:
    name: str
    fields: tuple[FieldNode, ...]


@dataclass(frozen=True, slots=True)
class ArrayNode:
    items: Node
    nullable: bool


@dataclass(frozen=True, slots=True)
class MapNode:
    values: Node
    nullable: bool


Node = Leaf | DecimalNode | RecordNode | ArrayNode | MapNode

_AVRO_PRIMITIVES = {"boolean", "int", "long", "float", "double", "string", "bytes"}

#: (logicalType, underlying Avro type) -> leaf kind; other logical types read as their base type
_LOGICAL = {
    ("timestamp-millis", "long"): "timestamp-millis",
    ("timestamp-micros", "long"): "timestamp-micros",
    ("local-timestamp-millis", "long"): "local-timestamp-millis",
    ("local-timestamp-micros", "long"): "local-timestamp-micros",
    ("date", "int"): "date",
}

MAX_DECIMAL_PRECISION = 38


class _AvroParser:
    """Avro schema JSON → :data:`Node`, plus the schema fastavro reads with (logical types we do
    not map are removed there, so fastavro hands back their base values)."""

    def __init__(self) -> None:
        self.named: dict[str, Node] = {}
        self.defining: set[str] = set()

    @staticmethod
    def _fullname(name: str, namespace: str | None) -> str:
        return name if "." in name or not namespace else f"{namespace}.{name}"

    def _lookup(self, name: str, namespace: str | None, path: str) -> Node:
        for candidate in (self._fullname(name, namespace), name):
            if candidate in self.defining:
                raise OptionError("schema", f"{path}: recursive type {name!r} has no Spark equivalent")
            if candidate in self.named:
                return self.named[candidate]
        raise OptionError("schema", f"{path}: unknown Avro type {name!r}")

    def parse(self, schema: Any, path: str, namespace: str | None = None) -> tuple[Node, Any]:
        if isinstance(schema, str):
            if schema in _AVRO_PRIMITIVES:
                return Leaf(schema), schema
            if schema == "null":
                raise OptionError("schema", f"{path}: a field of type null has no Spark equivalent")
            return self._lookup(schema, namespace, path), schema
        if isinstance(schema, list):
            node, cleaned, _ = self.union(schema, path, namespace)
            return node, cleaned
        if not isinstance(schema, dict) or "type" not in schema:
            raise OptionError("schema", f"{path}: not an Avro schema: {json.dumps(schema)[:100]}")
        kind = schema["type"]
        logical = schema.get("logicalType")
        if isinstance(kind, (dict, list)) or (kind in _AVRO_PRIMITIVES and logical is None):
            return self.parse(kind, path, namespace)
        if kind in _AVRO_PRIMITIVES:
            return self._logical(schema, kind, logical, path)
        if kind in ("record", "error"):
            return self._record(schema, path, namespace)
        if kind == "enum":
            self._define(schema, namespace, Leaf("enum"))
            return Leaf("enum"), schema
        if kind == "fixed":
            if logical == "decimal":
                node, cleaned = self._logical(schema, "fixed", logical, path)
                self._define(schema, namespace, node)
                return node, cleaned
            cleaned = {k: v for k, v in schema.items() if k != "logicalType"}
            self._define(schema, namespace, Leaf("fixed"))
            return Leaf("fixed"), cleaned
        if kind == "array":
            items, cleaned_items, nullable = self.union_or_type(schema.get("items"), f"{path}[]", namespace)
            return ArrayNode(items, nullable), {**schema, "items": cleaned_items}
        if kind == "map":
            values, cleaned_values, nullable = self.union_or_type(
                schema.get("values"), f"{path}{{}}", namespace
            )
            return MapNode(values, nullable), {**schema, "values": cleaned_values}
        if isinstance(kind, str):
            return self.parse(kind, path, namespace)  # {"type": "SomeNamedType"}
        raise OptionError("schema", f"{path}: unknown Avro type {kind!r}")

    def _define(self, schema: dict[str, Any], namespace: str | None, node: Node) -> None:
        name = schema.get("name")
        if isinstance(name, str):
            ns = schema.get("namespace", namespace)
            self.named[self._fullname(name, ns)] = node
            self.named.setdefault(name, node)

    def _logical(self, schema: dict[str, Any], base: str, logical: Any, path: str) -> tuple[Node, Any]:
        if logical == "decimal" and base in ("bytes", "fixed"):
            precision = schema.get("precision")
            scale = schema.get("scale", 0)
            if isinstance(precision, int) and isinstance(scale, int) and 0 <= scale <= precision:
                if precision > MAX_DECIMAL_PRECISION:
                    raise OptionError(
                        "schema",
                        f"{path}: decimal({precision},{scale}) is wider than Spark's "
                        f"{MAX_DECIMAL_PRECISION} digits",
                    )
                return DecimalNode(precision, scale), schema
        kind = _LOGICAL.get((str(logical), base))
        if kind is not None:
            return Leaf(kind), schema
        # an unknown or invalid logical type: read the base type (as the Avro spec says)
        cleaned = {k: v for k, v in schema.items() if k != "logicalType"}
        return Leaf("bytes" if base == "fixed" else base), cleaned

    def _record(self, schema: dict[str, Any], path: str, namespace: str | None) -> tuple[Node, Any]:
        name = schema.get("name")
        if not isinstance(name, str):
            raise OptionError("schema", f"{path}: a record without a name")
        ns = schema.get("namespace", namespace)
        full = self._fullname(name, ns)
        self.defining.add(full)
        fields: list[FieldNode] = []
        cleaned_fields = []
        for f in schema.get("fields", []):
            if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                raise OptionError("schema", f"{path}: a record field without a name")
            fpath = f"{path}.{f['name']}" if path else f["name"]
            node, cleaned, nullable = self.union_or_type(f.get("type"), fpath, ns)
            fields.append(FieldNode(f["name"], node, nullable))
            cleaned_fields.append({**f, "type": cleaned})
        self.defining.discard(full)
        node = RecordNode(name, tuple(fields))
        self.named[full] = node
        self.named.setdefault(name, node)
        return node, {**schema, "fields": cleaned_fields}

    def union_or_type(self, schema: Any, path: str, namespace: str | None) -> tuple[Node, Any, bool]:
        if isinstance(schema, list):
            return self.union(schema, path, namespace)
        node, cleaned = self.parse(schema, path, namespace)
        return node, cleaned, False

    def union(self, branches: list[Any], path: str, namespace: str | None) -> tuple[Node, Any, bool]:
        others = [b for b in branches if b != "null"]
        if len(others) != 1:
            raise OptionError(
                "schema",
                f"{path}: union {json.dumps(branches)[:120]} is not supported "
                '(only a type or ["null", type])',
            )
        node, cleaned = self.parse(others[0], path, namespace)
        return node, [cleaned if b != "null" else "null" for b in branches], len(others) < len(branches)


@functools.lru_cache(maxsize=64)
def _parse_definition(definition: str) -> tuple[Node, str]:
    """(type tree, the fastavro reader schema as JSON) of an Avro/JSON schema definition."""
    try:
        schema = json.loads(definition)
    except json.JSONDecodeError as exc:
        raise OptionError("schema", f"the topic's schema definition is not JSON: {exc}") from None
    node, cleaned = _AvroParser().parse(schema, "value")
    return node, json.dumps(cleaned)


def parse_avro(definition: str | Mapping[str, Any] | list[Any]) -> Node:
    """The type tree of an Avro schema (JSON text or parsed); raises OptionError when unsupported."""
    text = definition if isinstance(definition, str) else json.dumps(definition)
    return _parse_definition(text)[0]


# -- Spark and Arrow types ----------------------------------------------------------------
_LEAF_SPARK: dict[str, Callable[[], DataType]] = {
    "boolean": BooleanType,
    "int": IntegerType,
    "long": LongType,
    "float": FloatType,
    "double": DoubleType,
    "string": StringType,
    "enum": StringType,
    "bytes": BinaryType,
    "fixed": BinaryType,
    "date": DateType,
    "timestamp-millis": TimestampType,
    "timestamp-micros": TimestampType,
    "local-timestamp-millis": TimestampNTZType,
    "local-timestamp-micros": TimestampNTZType,
}


def spark_type(node: Node, all_nullable: bool = False) -> DataType:
    """The Spark type of a type tree; ``all_nullable`` (JSON) makes every field and element nullable."""
    if isinstance(node, Leaf):
        return _LEAF_SPARK[node.kind]()
    if isinstance(node, DecimalNode):
        return DecimalType(node.precision, node.scale)
    if isinstance(node, RecordNode):
        return StructType(
            [
                StructField(f.name, spark_type(f.node, all_nullable), f.nullable or all_nullable)
                for f in node.fields
            ]
        )
    if isinstance(node, ArrayNode):
        return ArrayType(spark_type(node.items, all_nullable), node.nullable or all_nullable)
    return MapType(StringType(), spark_type(node.values, all_nullable), node.nullable or all_nullable)


#: Pulsar primitive type -> (Spark type, big-endian layout of one value; None for STRING)
PRIMITIVES: dict[str, tuple[Callable[[], DataType], str | None]] = {
    "STRING": (StringType, None),
    "BOOLEAN": (BooleanType, "B"),
    "INT8": (ByteType, "b"),
    "INT16": (ShortType, ">h"),
    "INT32": (IntegerType, ">i"),
    "INT64": (LongType, ">q"),
    "FLOAT": (FloatType, ">f"),
    "DOUBLE": (DoubleType, ">d"),
    "DATE": (TimestampType, ">q"),  # java.util.Date: milliseconds since the epoch
    "TIMESTAMP": (TimestampType, ">q"),  # java.sql.Timestamp: milliseconds since the epoch
    "TIME": (LongType, ">q"),  # java.sql.Time: milliseconds, as encoded
    "INSTANT": (TimestampType, ">q,>i"),  # epoch seconds, nanoseconds
    "LOCAL_DATE": (DateType, ">q"),  # epoch day
    "LOCAL_TIME": (LongType, ">q"),  # nanosecond of the day, as encoded
    "LOCAL_DATE_TIME": (TimestampNTZType, ">q,>q"),  # epoch day, nanosecond of the day
}


def _arrow_leaf(kind: str, stage: str) -> pa.DataType:
    """Arrow type of a leaf as pyarrow.json parses it (``parse``) or right after (``mid``)."""
    plain = {
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "string": pa.string(),
        "enum": pa.string(),
        "bytes": pa.binary(),
        "fixed": pa.binary(),
    }
    if kind in plain:
        return plain[kind]
    if stage == "parse":
        return pa.int32() if kind == "date" else pa.int64()
    return {
        "date": pa.date32(),
        "timestamp-millis": pa.timestamp("ms", tz="UTC"),
        "timestamp-micros": pa.timestamp("us", tz="UTC"),
        "local-timestamp-millis": pa.timestamp("ms"),
        "local-timestamp-micros": pa.timestamp("us"),
    }[kind]


def _json_arrow_type(node: Node, stage: str) -> pa.DataType | None:
    """The type pyarrow.json parses a value into (None: it cannot, e.g. maps)."""
    if isinstance(node, Leaf):
        return _arrow_leaf(node.kind, stage)
    if isinstance(node, DecimalNode):
        return pa.decimal128(node.precision, node.scale)
    if isinstance(node, RecordNode):
        fields = []
        for f in node.fields:
            t = _json_arrow_type(f.node, stage)
            if t is None:
                return None
            fields.append(pa.field(f.name, t))
        return pa.struct(fields)
    if isinstance(node, ArrayNode):
        t = _json_arrow_type(node.items, stage)
        return None if t is None else pa.list_(t)
    return None


# -- the value schema ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ValueSchema:
    """How to decode ``value``: a Pulsar schema type and, for AVRO/JSON, its definition."""

    type: str
    definition: str = ""

    @classmethod
    def from_info(cls, info: Any, topic: str) -> ValueSchema | None:
        """From a :class:`pulsarwire.client.schema.SchemaInfo` (None: the value stays binary).

        Raises OptionError for schema types ``schema=auto`` does not support.
        """
        if info is None or info.type in RAW_TYPES:
            return None
        kind = info.type
        if kind in ("AVRO", "JSON"):
            vs = cls(kind, bytes(info.schema).decode("utf-8", "replace"))
            if kind == "AVRO" and importlib.util.find_spec("fastavro") is None:
                raise OptionError("schema", "AVRO values need the fastavro package (pip install fastavro)")
        elif kind in PRIMITIVES:
            vs = cls(kind)
        elif kind in UNSUPPORTED_TYPES:
            raise OptionError(
                "schema", f"{topic} has a {kind} schema, which schema=auto does not support; use schema=raw"
            )
        else:
            raise OptionError("schema", f"{topic} has an unknown schema type {kind}; use schema=raw")
        try:
            vs.spark_type()  # validates the definition on the driver
        except OptionError as exc:
            raise OptionError("schema", f"{topic}: {str(exc).removeprefix('schema: ')}") from None
        return vs

    def node(self) -> Node:
        return _parse_definition(self.definition)[0]

    def spark_type(self) -> DataType:
        if self.type in PRIMITIVES:
            return PRIMITIVES[self.type][0]()
        return spark_type(self.node(), all_nullable=self.type == "JSON")

    def arrow_type(self) -> pa.DataType:
        return _final_arrow_type(self)

    def decode(self, batch: Any) -> pa.Array:
        """The decoded ``value`` column of a bulk Arrow batch; raises SchemaDecodeError."""
        values = batch.column("value")
        where = _Where(batch, self.type)
        if self.type == "AVRO":
            return _decode_avro(self, values, where)
        if self.type == "JSON":
            return _decode_json(self, values, where)
        return _decode_primitive(self.type, values, where)

    def signature(self) -> tuple[str, str]:
        """What two topics must share: the type and the parsed definition."""
        if not self.definition:
            return (self.type, "")
        try:
            return (self.type, json.dumps(json.loads(self.definition), sort_keys=True))
        except json.JSONDecodeError:
            return (self.type, self.definition)


@functools.lru_cache(maxsize=64)
def _final_arrow_type(vs: ValueSchema) -> pa.DataType:

    return to_arrow_type(vs.spark_type(), timezone="UTC")


class _Where:
    """Names a row of a bulk batch for errors: topic-partition and ledger:entry:batch."""

    def __init__(self, batch: Any, schema_type: str) -> None:
        self.batch = batch
        self.schema_type = schema_type

    def error(self, i: int, reason: str) -> SchemaDecodeError:
        b = self.batch
        topic = b.column("topic")[i].as_py()
        pos = f"{b.column('ledger_id')[i].as_py()}:{b.column('entry_id')[i].as_py()}"
        pos += f":{b.column('batch_index')[i].as_py()}"
        return SchemaDecodeError(topic, pos, self.schema_type, reason)


def _array_of(rows: list[Any], arrow_type: pa.DataType, where: _Where) -> pa.Array:
    """``pa.array(rows, arrow_type)``; a row Arrow refuses is named."""
    try:
        return pa.array(rows, type=arrow_type)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        for i, row in enumerate(rows):
            try:
                pa.array([row], type=arrow_type)
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
                raise where.error(i, f"{type(exc).__name__}: {exc}") from None
        raise


# -- primitives -----------------------------------------------------------------------------
_I64 = 2**63 - 1
_MS_LIMIT = _I64 // 1000  # milliseconds that still fit in int64 microseconds

#: big-endian layout -> (array typecode, Arrow type it is read as)
_CODES = {
    "B": ("B", pa.uint8()),
    "b": ("b", pa.int8()),
    ">h": ("h", pa.int16()),
    ">i": ("i", pa.int32()),
    ">q": ("q", pa.int64()),
    ">f": ("f", pa.float32()),
    ">d": ("d", pa.float64()),
}


def _fixed_width(values: pa.Array, width: int, where: _Where) -> bytes:
    """The bytes of all values end to end (nulls as zeros), after checking each has ``width`` bytes."""
    valid = values.is_valid()
    lengths = pc.binary_length(values)
    wrong = pc.and_(valid, pc.not_equal(lengths, width))
    if pc.any(wrong).as_py():
        i = pc.index(wrong, True).as_py()
        raise where.error(i, f"expected {width} bytes, got {lengths[i].as_py()}")
    if values.null_count:
        values = pc.fill_null(values, pa.scalar(b"\0" * width, values.type))
    n = len(values)
    offset_type = pa.int64() if pa.types.is_large_binary(values.type) else pa.int32()
    _, offset_buffer, data = values.buffers()
    offsets = pa.Array.from_buffers(offset_type, n + 1, [None, offset_buffer], offset=values.offset)
    start, end = offsets[0].as_py(), offsets[n].as_py()
    return b"" if data is None else data.slice(start, end - start).to_pybytes()


def _numbers(data: bytes, layout: str) -> pa.Array:
    """Big-endian fixed-width numbers, end to end in ``data``, as an Arrow array."""
    code, arrow = _CODES[layout]
    arr = array.array(code)
    if arr.itemsize != arrow.bit_width // 8:
        raise PipelinesError(f"array typecode {code!r} is {arr.itemsize} bytes on this platform")
    arr.frombytes(data)
    if layout.startswith(">") and sys.byteorder == "little":
        arr.byteswap()
    return pa.Array.from_buffers(arrow, len(arr), [None, pa.py_buffer(arr.tobytes())])


def _decode_primitive(kind: str, values: pa.Array, where: _Where) -> pa.Array:
    if kind == "STRING":
        try:
            return values.cast(pa.string())
        except pa.ArrowInvalid:
            for i, v in enumerate(values.to_pylist()):
                if v is not None:
                    try:
                        v.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise where.error(i, f"not UTF-8: {exc}") from None
            raise
    layout = PRIMITIVES[kind][1]
    assert layout is not None
    valid = values.is_valid()
    if "," in layout:  # INSTANT and LOCAL_DATE_TIME: two big-endian numbers per value
        fmt = ">" + "".join(part[1:] for part in layout.split(","))
        data = _fixed_width(values, struct.calcsize(fmt), where)
        pairs = list(struct.iter_unpack(fmt, data))
        first = pa.array([p[0] for p in pairs], pa.int64())
        second = pa.array([p[1] for p in pairs], pa.int64())
        if kind == "INSTANT":
            _check_range(where, first, _I64 // 1_000_000 - 1, valid, "epoch seconds")
            _check_range(where, second, 999_999_999, valid, "nanoseconds", low=0)
            us = pc.add(pc.multiply(first, 1_000_000), pc.divide(second, 1000))
            return _masked(us.cast(pa.timestamp("us", tz="UTC")), valid)
        _check_range(where, first, _I64 // 86_400_000_000 - 1, valid, "epoch day")
        _check_range(where, second, 86_400 * 10**9 - 1, valid, "nanosecond of the day", low=0)
        us = pc.add(pc.multiply(first, 86_400_000_000), pc.divide(second, 1000))
        return _masked(us.cast(pa.timestamp("us")), valid)
    code = _CODES[layout][1]
    numbers = _numbers(_fixed_width(values, code.bit_width // 8, where), layout)
    if kind == "BOOLEAN":
        return _masked(pc.not_equal(numbers, 0), valid)
    if kind in ("DATE", "TIMESTAMP"):
        _check_range(where, numbers, _MS_LIMIT, valid, "milliseconds")
        return _masked(pc.multiply(numbers, 1000).cast(pa.timestamp("us", tz="UTC")), valid)
    if kind == "LOCAL_DATE":
        _check_range(where, numbers, 2**31 - 1, valid, "epoch day")
        return _masked(numbers.cast(pa.int32()).cast(pa.date32()), valid)
    return _masked(numbers.cast(_final_arrow_type(ValueSchema(kind))), valid)


def _masked(arr: pa.Array, valid: pa.Array) -> pa.Array:
    """``arr`` with nulls where the value was null."""
    if pc.all(valid).as_py():
        return arr
    return pc.if_else(valid, arr, pa.scalar(None, arr.type))


def _check_range(
    where: _Where, a: pa.Array, high: int, valid: pa.Array, what: str, low: int | None = None
) -> None:
    lo = -high if low is None else low
    bad = pc.and_(valid, pc.or_(pc.less(a, lo), pc.greater(a, high)))
    if pc.any(bad).as_py():
        i = pc.index(bad, True).as_py()
        raise where.error(i, f"{what} {a[i].as_py()} out of range")


# -- JSON ---------------------------------------------------------------------------------
def _decode_json(vs: ValueSchema, values: pa.Array, where: _Where) -> pa.Array:
    fast = json_vectorized(vs, values)
    if fast is not None:
        return fast
    return json_rows(vs, values, where)


def json_vectorized(vs: ValueSchema, values: pa.Array) -> pa.Array | None:
    """All values parsed at once by pyarrow.json; None when it cannot be trusted for this batch.

    Needs a record schema without maps; gives up on any parse error, a blank value, or a
    row count that differs from the number of values (a value holding two documents).
    """

    node = vs.node()
    parse_type = _json_arrow_type(node, "parse")
    if not isinstance(node, RecordNode) or parse_type is None or len(values) == 0:
        return None
    rows = values.to_pylist()
    lines = []
    longest = 0
    for v in rows:
        if v is None:
            lines.append(b"{}")
            continue
        if not v.strip():
            return None
        lines.append(v.replace(b"\n", b" ").replace(b"\r", b" "))
        longest = max(longest, len(v))
    data = b"\n".join(lines)
    try:
        table = pj.read_json(
            io.BytesIO(data),
            read_options=pj.ReadOptions(block_size=max(1 << 20, longest + 2)),
            parse_options=pj.ParseOptions(
                explicit_schema=pa.schema(list(parse_type)), unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowException, ValueError):
        return None
    if table.num_rows != len(rows):
        return None
    mid_type = _json_arrow_type(node, "mid")
    try:
        children = [table.column(f.name).combine_chunks() for f in parse_type]
        mask = values.is_null() if values.null_count else None
        parsed = pa.StructArray.from_arrays(children, fields=list(parse_type), mask=mask)
        return parsed.cast(mid_type).cast(vs.arrow_type())
    except (pa.ArrowException, ValueError):
        return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_rows(vs: ValueSchema, values: pa.Array, where: _Where) -> pa.Array:
    """Every value decoded on its own with :mod:`json`; the first bad one raises SchemaDecodeError."""
    node = vs.node()
    out: list[Any] = []
    for i, v in enumerate(values.to_pylist()):
        if v is None:
            out.append(None)
            continue
        try:
            doc = json.loads(v.decode("utf-8"), parse_float=Decimal, parse_constant=_no_constant)
            out.append(_from_json(doc, node, ""))
        except (ValueError, UnicodeDecodeError) as exc:
            raise where.error(i, str(exc)) from None
    return _array_of(out, vs.arrow_type(), where)


_INT_RANGE = {"int": 2**31, "long": 2**63, "date": 2**31}


def _from_json(v: Any, node: Node, path: str) -> Any:
    """A parsed JSON value as the Python value pyarrow builds the Arrow type from; ValueError if wrong."""
    if v is None:
        return None
    here = path or "the value"
    if isinstance(node, RecordNode):
        if not isinstance(v, dict):
            raise ValueError(f"{here}: expected an object, got {_kind(v)}")
        return {
            f.name: _from_json(v.get(f.name), f.node, f"{path}.{f.name}".lstrip(".")) for f in node.fields
        }
    if isinstance(node, ArrayNode):
        if not isinstance(v, list):
            raise ValueError(f"{here}: expected an array, got {_kind(v)}")
        return [_from_json(x, node.items, f"{path}[{j}]") for j, x in enumerate(v)]
    if isinstance(node, MapNode):
        if not isinstance(v, dict):
            raise ValueError(f"{here}: expected an object (map), got {_kind(v)}")
        return {k: _from_json(x, node.values, f"{path}[{k!r}]") for k, x in v.items()}
    if isinstance(node, DecimalNode):
        if isinstance(v, bool) or not isinstance(v, (int, Decimal, str)):
            raise ValueError(f"{here}: expected a decimal number, got {_kind(v)}")
        try:
            return Decimal(v)
        except InvalidOperation:
            raise ValueError(f"{here}: {v!r} is not a decimal number") from None
    kind = node.kind
    if kind == "boolean":
        if not isinstance(v, bool):
            raise ValueError(f"{here}: expected true or false, got {_kind(v)}")
        return v
    if kind in ("float", "double"):
        if isinstance(v, bool) or not isinstance(v, (int, Decimal)):
            raise ValueError(f"{here}: expected a number, got {_kind(v)}")
        return float(v)
    if kind in ("string", "enum"):
        if isinstance(v, str):
            return v
        if kind == "enum" and isinstance(v, (int, Decimal)) and not isinstance(v, bool):
            return str(v)  # the Python client writes an enum's value, not its symbol
        raise ValueError(f"{here}: expected a string, got {_kind(v)}")
    if kind in ("bytes", "fixed"):
        if not isinstance(v, str):
            raise ValueError(f"{here}: expected a string, got {_kind(v)}")
        return v.encode("utf-8")
    if kind == "date" and isinstance(v, str):
        try:
            return date.fromisoformat(v)
        except ValueError:
            raise ValueError(f"{here}: {v!r} is not an ISO-8601 date") from None
    if kind.endswith(("-millis", "-micros")) and isinstance(v, str):
        return _iso_time(v, kind, here)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{here}: expected an integer, got {_kind(v)}")
    if kind.endswith("-millis"):
        if not -_MS_LIMIT <= v <= _MS_LIMIT:
            raise ValueError(f"{here}: {v} milliseconds is out of range")
        return v * 1000
    limit = _INT_RANGE.get(kind, 2**63)
    if not -limit <= v < limit:
        raise ValueError(f"{here}: {v} is out of range for {kind}")
    return v


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _iso_time(v: str, kind: str, here: str) -> datetime:
    try:
        t = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{here}: {v!r} is not an ISO-8601 time") from None
    if kind.startswith("local-"):
        return t.replace(tzinfo=None) if t.tzinfo is None else t.astimezone(UTC).replace(tzinfo=None)
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, Decimal, float)):
        return f"the number {v}"
    if isinstance(v, str):
        return f"the string {v[:40]!r}"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


# -- AVRO ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _avro_reader(definition: str) -> tuple[Any, Any]:
    """(fastavro.schemaless_reader, the parsed reader schema)."""
    cleaned = json.loads(_parse_definition(definition)[1])
    return fastavro.schemaless_reader, fastavro.parse_schema(cleaned)


def _decode_avro(vs: ValueSchema, values: pa.Array, where: _Where) -> pa.Array:
    read, schema = _avro_reader(vs.definition)
    out: list[Any] = []
    for i, v in enumerate(values.to_pylist()):
        if v is None:
            out.append(None)
            continue
        buf = io.BytesIO(v)
        try:
            record = read(buf, schema, None)
        except Exception as exc:  # fastavro raises whatever the bytes provoke (EOFError, ValueError, ...)
            raise where.error(i, f"{type(exc).__name__}: {exc}") from None
        if buf.tell() != len(v):
            raise where.error(i, f"{len(v) - buf.tell()} bytes left over after the record")
        out.append(record)
    return _array_of(out, vs.arrow_type(), where)


# -- the driver side ------------------------------------------------------------------------
_cache: dict[tuple[str, Any], tuple[float, ValueSchema | None]] = {}
_cache_lock = threading.Lock()


def _parent(topic_partition: str) -> str:
    return str(TopicName.parse(topic_partition).partitioned_topic)


def resolve_value_schema(settings: ClientSettings, selector: Any) -> ValueSchema | None:
    """Fetch the schema of every selected topic; they must agree. None: ``value`` stays binary.

    Raises OptionError when topics disagree or the schema type is unsupported.
    """

    planner = Planner(settings, selector)
    try:
        parts = planner.partitions()
        # A partition answers GET_SCHEMA with its partitioned topic's schema, so one per parent.
        asked: dict[str, str] = {}
        for tp in parts:
            asked.setdefault(_parent(tp), tp)
        infos = {parent: planner.client.get_schema(tp) for parent, tp in asked.items()}
    finally:
        planner.close()
    found = {t: ValueSchema.from_info(info, t) for t, info in infos.items()}
    groups: dict[tuple[str, str], list[str]] = {}
    for t, vs in found.items():
        groups.setdefault(vs.signature() if vs is not None else ("none", ""), []).append(t)
    if len(groups) > 1:
        listing = "; ".join(f"{sig[0]}: {', '.join(ts)}" for sig, ts in groups.items())
        raise OptionError("schema", f"schema=auto needs one schema for all topics, found {listing}")
    if not found:
        log.info("schema=auto: no topic selected yet; value stays binary")
        return None
    vs = next(iter(found.values()))
    if vs is None:
        log.info("schema=auto: %s has no schema (or BYTES); value stays binary", ", ".join(found))
    else:
        log.info("schema=auto: %s schema of %s → %s", vs.type, ", ".join(found), vs.spark_type())
    return vs


def cached_value_schema(
    settings: ClientSettings, selector: Any, max_age: float = SCHEMA_REUSE_SECONDS
) -> ValueSchema | None:
    """:func:`resolve_value_schema` through a per-process cache keyed by the connection and topics.

    An answer older than ``max_age`` seconds is fetched again, so a new query (or a stream's
    next micro-batch) sees a changed schema; a stream whose Spark type no longer matches
    then fails with Spark's schema mismatch instead of decoding with a stale schema.
    """
    key = (repr(settings) + str(settings.auth_token is not None), selector)
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and now - hit[0] <= max_age:
        return hit[1]
    vs = resolve_value_schema(settings, selector)
    with _cache_lock:
        _cache[key] = (now, vs)
    return vs


def value_type(settings: ClientSettings, selector: Any) -> DataType:
    """The Spark type of ``value`` under ``schema=auto`` (fetches the schema of the selected topics)."""
    vs = cached_value_schema(settings, selector)
    return BinaryType() if vs is None else vs.spark_type()


def value_schema_for(opts: Any) -> ValueSchema | None:
    """The decoder a source's read ranges carry: None for ``schema=raw`` or a schema-less topic."""
    if getattr(opts, "schema_mode", "raw") != "auto":
        return None
    return cached_value_schema(opts.settings, opts.selector)
