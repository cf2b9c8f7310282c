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

With a data directory the registry lives in ``schemas.json`` there, rewritten atomically.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsarwire.proto import pb

from .naming import TopicName


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    schema: pb.Schema
    version: int


_NO_SCHEMA = pb.Schema.Type.Value("None")


class IncompatibleSchemaError(Exception):
    """The schema cannot be added to the topic's history (the broker answers IncompatibleSchema)."""


def schema_owner(topic: str) -> str:
    """The name a topic's schemas are kept under: a partition's partitioned topic, else itself."""
    return str(TopicName.parse(topic).partitioned_parent)


class SchemaRegistry:
    def __init__(self, data_dir: Path | None = None) -> None:
        self._path = data_dir / "schemas.json" if data_dir is not None else None
        self._history: dict[str, list[SchemaVersion]] = {}
        if self._path is not None and self._path.exists():
            for owner, versions in json.loads(self._path.read_text()).items():
                self._history[owner] = [
                    SchemaVersion(pb.Schema.FromString(bytes.fromhex(v["schema"])), int(v["version"]))
                    for v in versions
                ]

    def latest(self, topic: str) -> SchemaVersion | None:
        history = self._history.get(schema_owner(topic))
        return history[-1] if history else None

    def get(self, topic: str, version: int | None = None) -> SchemaVersion | None:
        """Version ``version`` of the topic's schema (the latest when None), None when absent."""
        if version is None:
            return self.latest(topic)
        return next((s for s in self._history.get(schema_owner(topic), ()) if s.version == version), None)

    def register(self, topic: str, schema: pb.Schema) -> int | None:
        """The version of ``schema`` in the topic's history, adding it when new and compatible.

        None for a schema of type NONE (no schema). Raises IncompatibleSchemaError.
        """
        if schema.type == _NO_SCHEMA:
            return None
        history = self._history.setdefault(schema_owner(topic), [])
        for sv in history:
            if sv.schema.type == schema.type and sv.schema.schema_data == schema.schema_data:
                return sv.version
        if history:
            _check_full(history[-1].schema, schema)
        version = len(history)
        history.append(SchemaVersion(schema, version))
        self._save()
        return version

    def _save(self) -> None:
        if self._path is None:
            return
        state = {
            owner: [{"schema": s.schema.SerializeToString().hex(), "version": s.version} for s in versions]
            for owner, versions in self._history.items()
            if versions
        }
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self._path)


def _check_full(old: pb.Schema, new: pb.Schema) -> None:
    type_name = pb.Schema.Type.Name
    if old.type != new.type:
        raise IncompatibleSchemaError(
            f"schema type {type_name(new.type)} differs from the topic's {type_name(old.type)}"
        )
    if new.type not in (pb.Schema.Avro, pb.Schema.Json):
        raise IncompatibleSchemaError(f"a different {type_name(new.type)} schema than the topic's")
    old_fields, new_fields = _record_fields(old), _record_fields(new)
    if old_fields is None or new_fields is None:
        raise IncompatibleSchemaError("only record schemas can evolve; the definitions differ")
    old_name, new_name = _record_name(old), _record_name(new)
    if old_name != new_name:
        raise IncompatibleSchemaError(f"record {new_name!r} is not the topic's record {old_name!r}")
    for name in old_fields.keys() | new_fields.keys():
        was, now = old_fields.get(name), new_fields.get(name)
        if was is not None and now is not None:
            if was.get("type") != now.get("type"):
                change = f"{was.get('type')} -> {now.get('type')}"
                raise IncompatibleSchemaError(f"field '{name}' changes type: {change}")
        elif "default" not in (was or now or {}):
            change = "removed" if now is None else "added"
            raise IncompatibleSchemaError(f"field '{name}' {change} without a default")


def _record_name(schema: pb.Schema) -> str:
    """The unqualified name of a record definition (Avro matches records by it)."""
    return str(json.loads(schema.schema_data).get("name", "")).rsplit(".", 1)[-1]


def _record_fields(schema: pb.Schema) -> dict[str, dict[str, Any]] | None:
    """The fields of an Avro record definition by name, None when it is not one."""
    try:
        definition = json.loads(schema.schema_data)
    except ValueError:
        return None
    if not isinstance(definition, dict) or definition.get("type") != "record":
        return None
    fields = definition.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, dict) and "name" in f for f in fields):
        return None
    return {str(f["name"]): f for f in fields}
