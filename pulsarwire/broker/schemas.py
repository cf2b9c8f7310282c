"""The schema registry: versions of each topic's schema, checked for compatibility.

Pulsar keeps one schema history per topic *name without partition suffix*, so every
partition of a partitioned topic shares its parent's schemas; so do we (:func:`schema_owner`).
A version is the index in the history (sent as 8 big-endian bytes). Registering a schema that
is already in the history returns its version; a new one must be compatible with the latest,
by the broker's default strategy FULL (readable by the old and the new reader):

* a schema of type NONE (bytes) is no schema: always accepted, never stored;
* a different type than the latest is IncompatibleSchema;
* AVRO and JSON (whose definition is an Avro record): the record keeps its name, every field
  in one version but not the other has a default, and a field in both has the same type. Anything else that
  differs (other types, definitions that are not records) is IncompatibleSchema.

Avro type promotions (int → long...) are not accepted: FULL forbids them one way anyway.

Schemas come from clients, so they are bounded before anything else looks at them
(:class:`InvalidSchemaError`, answered as IncompatibleSchema): at most ``max_schema_size``
serialized bytes (default :data:`MAX_SCHEMA_SIZE`, 1 MiB; Pulsar documents no cap but the
message size), and an AVRO or JSON definition nested at most :data:`MAX_DEFINITION_DEPTH`
levels (``[[[[...`` never reaches a recursion limit: the JSON decoder stops at its own, and the
depth of what it returns is measured without recursion). Registering costs O(1) lookups
whatever the length of the history.

With a data directory the registry is the append-only log ``schemas.log`` there, one JSON
line per version (``{"topic", "version", "schema": hex of the Schema protobuf}``), flushed
before the version is answered. On load a torn last line is cut off and other bad lines are
skipped with a warning. A ``schemas.json`` from earlier releases (the whole registry,
rewritten per registration) is read once and turned into the log.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsarwire.proto import pb

from .naming import TopicName

log = logging.getLogger("pulsarwire.broker.schemas")

#: Largest serialized schema accepted (name, definition and properties), in bytes.
MAX_SCHEMA_SIZE = 1024 * 1024
#: Deepest nesting of lists and objects in an AVRO or JSON definition.
MAX_DEFINITION_DEPTH = 100

LOG_NAME = "schemas.log"
LEGACY_NAME = "schemas.json"


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    schema: pb.Schema
    version: int


_NO_SCHEMA = pb.Schema.Type.Value("None")
_JSON_DEFINED = (pb.Schema.Avro, pb.Schema.Json)


class IncompatibleSchemaError(Exception):
    """The schema cannot be added to the topic's history (the broker answers IncompatibleSchema)."""


class InvalidSchemaError(IncompatibleSchemaError):
    """The schema itself is refused: too large, or its definition nested too deep."""


def schema_owner(topic: str) -> str:
    """The name a topic's schemas are kept under: a partition's partitioned topic, else itself."""
    return str(TopicName.parse(topic).partitioned_parent)


class SchemaRegistry:
    def __init__(
        self, data_dir: Path | None = None, *, max_schema_size: int = MAX_SCHEMA_SIZE, fsync: bool = False
    ) -> None:
        self.max_schema_size = max_schema_size
        self.fsync = fsync
        self._dir = data_dir
        self._history: dict[str, list[SchemaVersion]] = {}
        #: per owner: (type, definition) -> version, so a known schema is found in O(1)
        self._known: dict[str, dict[tuple[int, bytes], int]] = {}
        if data_dir is not None:
            self._load(data_dir)

    def latest(self, topic: str) -> SchemaVersion | None:
        history = self._history.get(schema_owner(topic))
        return history[-1] if history else None

    def get(self, topic: str, version: int | None = None) -> SchemaVersion | None:
        """Version ``version`` of the topic's schema (the latest when None), None when absent."""
        if version is None:
            return self.latest(topic)
        history = self._history.get(schema_owner(topic), [])
        return history[version] if 0 <= version < len(history) else None

    def register(self, topic: str, schema: pb.Schema) -> int | None:
        """The version of ``schema`` in the topic's history, adding it when new and compatible.

        None for a schema of type NONE (no schema). Raises InvalidSchemaError (too large, nested
        too deep), IncompatibleSchemaError, or OSError when it cannot be stored (nothing changes).
        """
        if schema.type == _NO_SCHEMA:
            return None
        size = schema.ByteSize()
        if size > self.max_schema_size:
            raise InvalidSchemaError(f"schema of {size} bytes: at most {self.max_schema_size} are accepted")
        owner = schema_owner(topic)
        known = self._known.get(owner, {})
        found = known.get((schema.type, schema.schema_data))
        if found is not None:
            return found
        if schema.type in _JSON_DEFINED:
            _definition(schema)  # refuses definitions nested too deep before anything else parses them
        history = self._history.get(owner, [])
        if history:
            _check_full(history[-1].schema, schema)
        version = len(history)
        self._append_to_log(owner, version, schema)
        self._add(owner, SchemaVersion(schema, version))
        return version

    def _add(self, owner: str, sv: SchemaVersion) -> None:
        self._history.setdefault(owner, []).append(sv)
        self._known.setdefault(owner, {}).setdefault((sv.schema.type, sv.schema.schema_data), sv.version)

    # -- storage -------------------------------------------------------------------------
    def _append_to_log(self, owner: str, version: int, schema: pb.Schema) -> None:
        if self._dir is None:
            return
        self._write_lines(self._dir / LOG_NAME, [_log_line(owner, version, schema)], "ab")

    def _write_lines(self, path: Path, lines: list[bytes], mode: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, mode) as f:
            f.write(b"".join(lines))
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())

    def _load(self, data_dir: Path) -> None:
        path, legacy = data_dir / LOG_NAME, data_dir / LEGACY_NAME
        if path.exists():
            self._read_log(path)
        elif legacy.exists():
            self._upgrade(legacy, path)
        if legacy.exists() and path.exists():
            legacy.unlink()  # the log holds everything (a crash came between upgrade and cleanup)

    def _read_log(self, path: Path) -> None:
        data = path.read_bytes()
        end = len(data)
        if data and not data.endswith(b"\n"):
            end = data.rfind(b"\n") + 1
            log.warning("%s: cutting off a torn last record (%d bytes)", path, len(data) - end)
            with open(path, "r+b") as f:
                f.truncate(end)
        for number, line in enumerate(data[:end].splitlines(), 1):
            try:
                record = json.loads(line)
                owner, version = str(record["topic"]), int(record["version"])
                schema = pb.Schema.FromString(bytes.fromhex(record["schema"]))
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                log.warning("%s:%d: skipping an unreadable record (%s)", path, number, exc)
                continue
            if version != len(self._history.get(owner, [])):
                log.warning("%s:%d: skipping version %d of %s out of sequence", path, number, version, owner)
                continue
            self._add(owner, SchemaVersion(schema, version))

    def _upgrade(self, legacy: Path, path: Path) -> None:
        """Turn a ``schemas.json`` (the whole registry in one document) into the log."""
        for owner, versions in json.loads(legacy.read_text()).items():
            for v in versions:
                schema = pb.Schema.FromString(bytes.fromhex(v["schema"]))
                self._add(owner, SchemaVersion(schema, int(v["version"])))
        lines = [_log_line(owner, sv.version, sv.schema) for owner, h in self._history.items() for sv in h]
        tmp = path.with_suffix(".tmp")
        self._write_lines(tmp, lines, "wb")
        os.replace(tmp, path)
        log.info("%s: %d schema versions moved to %s", legacy, len(lines), path.name)


def _log_line(owner: str, version: int, schema: pb.Schema) -> bytes:
    record = {"topic": owner, "version": version, "schema": schema.SerializeToString().hex()}
    return json.dumps(record).encode() + b"\n"


# -- definitions -----------------------------------------------------------------------------
def _definition(schema: pb.Schema) -> Any:
    """The parsed JSON definition of an AVRO or JSON schema (None when it is not JSON).

    Raises InvalidSchemaError when it is nested deeper than MAX_DEFINITION_DEPTH.
    """
    try:
        definition = json.loads(schema.schema_data)
    except RecursionError:
        raise InvalidSchemaError(_too_deep()) from None
    except ValueError:
        return None
    if _depth(definition) > MAX_DEFINITION_DEPTH:
        raise InvalidSchemaError(_too_deep())
    return definition


def _too_deep() -> str:
    return f"schema definition nested deeper than {MAX_DEFINITION_DEPTH} levels"


def _depth(value: Any) -> int:
    """Nesting depth of lists and objects in a parsed JSON value, without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_DEFINITION_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _check_full(old: pb.Schema, new: pb.Schema) -> None:
    type_name = pb.Schema.Type.Name
    if old.type != new.type:
        raise IncompatibleSchemaError(
            f"schema type {type_name(new.type)} differs from the topic's {type_name(old.type)}"
        )
    if new.type not in _JSON_DEFINED:
        raise IncompatibleSchemaError(f"a different {type_name(new.type)} schema than the topic's")
    old_def, new_def = _definition(old), _definition(new)
    old_fields, new_fields = _record_fields(old_def), _record_fields(new_def)
    if old_fields is None or new_fields is None:
        raise IncompatibleSchemaError("only record schemas can evolve; the definitions differ")
    old_name, new_name = _record_name(old_def), _record_name(new_def)
    if old_name != new_name:
        raise IncompatibleSchemaError(f"record {new_name!r} is not the topic's record {old_name!r}")
    for name in old_fields.keys() | new_fields.keys():
        was, now = old_fields.get(name), new_fields.get(name)
        if was is not None and now is not None:
            if was.get("type") != now.get("type"):
                change = f"{_short(was.get('type'))} -> {_short(now.get('type'))}"
                raise IncompatibleSchemaError(f"field '{name}' changes type: {change}")
        elif "default" not in (was or now or {}):
            change = "removed" if now is None else "added"
            raise IncompatibleSchemaError(f"field '{name}' {change} without a default")


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _record_name(definition: dict[str, Any]) -> str:
    """The unqualified name of a record definition (Avro matches records by it)."""
    return str(definition.get("name", "")).rsplit(".", 1)[-1]


def _record_fields(definition: Any) -> dict[str, dict[str, Any]] | None:
    """The fields of an Avro record definition by name, None when it is not one."""
    if not isinstance(definition, dict) or definition.get("type") != "record":
        return None
    fields = definition.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, dict) and "name" in f for f in fields):
        return None
    return {str(f["name"]): f for f in fields}
