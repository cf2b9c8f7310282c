"""The schema registry: versions of each topic's schema, checked for compatibility as Pulsar does.

Pulsar keeps one schema history per topic *name without partition suffix*, so every
partition of a partitioned topic shares its parent's schemas; so do we (:func:`schema_owner`).
A version is the index in the history (sent as 8 big-endian bytes). Registering a schema that
is already in the history (same type and definition; AVRO/JSON definitions compared once parsed)
returns its version; a new one must be compatible with the history under the topic's
:class:`Compatibility` strategy (Pulsar's ``SchemaCompatibilityStrategy``; the broker's default
is FULL, as Pulsar's ``schemaCompatibilityStrategy``), as Pulsar's ``SchemaRegistryServiceImpl``
decides:

* a schema of type NONE (bytes) is no schema: always accepted, never stored;
* ALWAYS_COMPATIBLE accepts anything; otherwise a type other than the latest version's (the
  _TRANSITIVE strategies: than any version's) is IncompatibleSchema;
* AVRO and JSON (whose definitions are Avro schemas) by Avro's schema resolution
  (:mod:`pulsarwire.broker.avro`): BACKWARD -- the new schema can read data written with the
  latest version; FORWARD -- the latest can read data written with the new one; FULL -- both;
  the _TRANSITIVE forms check every version instead of the latest; ALWAYS_INCOMPATIBLE refuses
  every new definition. A JSON schema in Jackson's older format (not an Avro record) is accepted
  beside an Avro one, as Pulsar does;
* any other type (STRING, primitives, PROTOBUF, PROTOBUF_NATIVE, KEY_VALUE...) of the same type:
  accepted unless the strategy is ALWAYS_INCOMPATIBLE (Pulsar's default check).

A consumer's schema (SUBSCRIBE) is checked by :meth:`SchemaRegistry.check_consumer` as Pulsar's
``checkConsumerCompatibility``: BACKWARD against the latest version for BACKWARD, FORWARD,
FORWARD_TRANSITIVE and FULL; the strategy itself against every version otherwise.

Schemas come from clients, so they are bounded before anything else looks at them
(:class:`InvalidSchemaError`, answered as IncompatibleSchema, as Pulsar answers invalid schema
data): at most ``max_schema_size`` serialized bytes (default :data:`MAX_SCHEMA_SIZE`, 1 MiB;
Pulsar documents no cap but the message size), an AVRO or JSON definition nested at most
:data:`MAX_DEFINITION_DEPTH` levels (``[[[[...`` never reaches a recursion limit: the JSON decoder
stops at its own, and the depth of what it returns is measured without recursion), and a
comparison of two definitions takes at most :data:`~pulsarwire.broker.avro.MAX_RESOLUTION_STEPS`
steps in all (else IncompatibleSchema: "too complex to compare"). An AVRO definition must be a
valid Avro schema that is not a union (Pulsar's ``StructSchemaDataValidator``), as must a JSON one
unless it is a JSON object of the older format. Finding a known schema costs one lookup whatever
the length of the history; parsed definitions are cached for the most recently compared versions.

With a data directory the registry is the append-only log ``schemas.log`` there, one JSON
line per version (``{"topic", "version", "schema": hex of the Schema protobuf}``), flushed
before the version is answered. On load a torn last line is cut off and other bad lines are
skipped with a warning. A ``schemas.json`` from earlier releases (the whole registry,
rewritten per registration) is read once and turned into the log.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pulsarwire.naming import TopicName
from pulsarwire.proto import pb

from . import avro

log = logging.getLogger("pulsarwire.broker.schemas")

#: Largest serialized schema accepted (name, definition and properties), in bytes.
MAX_SCHEMA_SIZE = 1024 * 1024
#: Deepest nesting of lists and objects in an AVRO or JSON definition.
MAX_DEFINITION_DEPTH = 100

LOG_NAME = "schemas.log"
LEGACY_NAME = "schemas.json"


#: Parsed definitions kept for comparisons (the most recently used versions).
PARSED_CACHE_SIZE = 64


class Compatibility(enum.Enum):
    """Pulsar's schema compatibility strategies (``SchemaCompatibilityStrategy``)."""

    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def parse(cls, text: str) -> Compatibility:
        """A strategy by name (any case, ``-`` for ``_``); raises ValueError naming the known ones."""
        key = text.strip().upper().replace("-", "_")
        try:
            return cls[key]
        except KeyError:
            names = ", ".join(c.name for c in cls)
            raise ValueError(f"unknown schema compatibility strategy {text!r} (use one of {names})") from None

    @property
    def transitive(self) -> bool:
        return self.name.endswith("_TRANSITIVE")


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    schema: pb.Schema
    version: int


_NO_SCHEMA = pb.Schema.Type.Value("None")
_JSON_DEFINED = (pb.Schema.Avro, pb.Schema.Json)
#: types whose definition Pulsar's StructSchemaDataValidator checks (PROTOBUF: an Avro record too)
_STRUCT = (pb.Schema.Avro, pb.Schema.Json, pb.Schema.Protobuf)


class IncompatibleSchemaError(Exception):
    """The schema cannot be added to the topic's history (the broker answers IncompatibleSchema)."""


class InvalidSchemaError(IncompatibleSchemaError):
    """The schema itself is refused: too large, nested too deep, or not a valid definition."""


def schema_owner(topic: str) -> str:
    """The name a topic's schemas are kept under: a partition's partitioned topic, else itself."""
    return str(TopicName.parse(topic).partitioned_topic)


class SchemaRegistry:
    def __init__(
        self, data_dir: Path | None = None, *, max_schema_size: int = MAX_SCHEMA_SIZE, fsync: bool = False
    ) -> None:
        self.max_schema_size = max_schema_size
        self.fsync = fsync
        self._dir = data_dir
        self._history: dict[str, list[SchemaVersion]] = {}
        #: per owner: identity of a schema (type, definition) -> version, so a known schema is found in O(1)
        self._known: dict[str, dict[tuple[int, bytes], int]] = {}
        #: (owner, version) -> parsed Avro definition, least recently used first
        self._parsed: OrderedDict[tuple[str, int], avro.Schema] = OrderedDict()
        #: per owner: versions that are deletions (Pulsar's deleted-schema markers)
        self._deleted: dict[str, set[int]] = {}
        if data_dir is not None:
            self._load(data_dir)

    def latest(self, topic: str) -> SchemaVersion | None:
        history = self._live(schema_owner(topic))
        return history[-1] if history else None

    def get(self, topic: str, version: int | None = None) -> SchemaVersion | None:
        """Version ``version`` of the topic's schema (the latest when None), None when absent or deleted."""
        if version is None:
            return self.latest(topic)
        owner = schema_owner(topic)
        history = self._history.get(owner, [])
        if version in self._deleted.get(owner, ()):
            return None
        return history[version] if 0 <= version < len(history) else None

    def _live(self, owner: str) -> list[SchemaVersion]:
        """The versions after the last deletion (all of them when none was deleted)."""
        history = self._history.get(owner, [])
        deleted = self._deleted.get(owner)
        return history[max(deleted) + 1 :] if deleted else history

    def delete(self, topic: str) -> int | None:
        """Delete the topic's schema, as Pulsar's admin API does: a deletion marker takes the next version,
        the versions before it stay readable by number, and the next schema starts a new history
        (compared with nothing before the marker). Returns the marker's version, None when there is
        no schema to delete. Raises OSError when it cannot be stored (nothing changes)."""
        owner = schema_owner(topic)
        if not self._live(owner):
            return None
        version = len(self._history[owner])
        self._write_marker(owner, version)
        self._mark_deleted(owner, version)
        return version

    def _mark_deleted(self, owner: str, version: int) -> None:
        self._history.setdefault(owner, []).append(SchemaVersion(pb.Schema(), version))
        self._deleted.setdefault(owner, set()).add(version)
        self._known.pop(owner, None)

    def register(
        self, topic: str, schema: pb.Schema, strategy: Compatibility = Compatibility.FULL
    ) -> int | None:
        """The version of ``schema`` in the topic's history; a new one is added when ``strategy`` allows.

        None for a schema of type NONE (no schema). Raises InvalidSchemaError (too large, nested
        too deep, not a valid definition), IncompatibleSchemaError, or OSError when it cannot be
        stored (nothing changes).
        """
        if schema.type == _NO_SCHEMA:
            return None
        new = _Candidate.of(schema, self.max_schema_size)
        owner = schema_owner(topic)
        found = self._known.get(owner, {}).get(new.identity)
        if found is not None:
            return found
        new.validate()
        history = self._live(owner)
        if history:
            checked = history if strategy.transitive else history[-1:]
            self._check(owner, checked, new, strategy)
        version = len(self._history.get(owner, []))
        self._append_to_log(owner, version, schema)
        self._add(owner, SchemaVersion(schema, version), new.identity)
        if new.definition is not None:
            self._remember(owner, version, new.definition)  # the next registration compares with it
        return version

    def is_compatible(self, topic: str, schema: pb.Schema, strategy: Compatibility) -> bool:
        """Whether :meth:`register` would accept ``schema`` under ``strategy`` (nothing is stored).

        Pulsar's ``isCompatible`` (the admin API's compatibility test). Raises InvalidSchemaError for
        a schema that is not valid at all (too large, nested too deep, not a valid definition).
        """
        if schema.type == _NO_SCHEMA:
            return True
        new = _Candidate.of(schema, self.max_schema_size)
        owner = schema_owner(topic)
        if new.identity in self._known.get(owner, {}):
            return True
        new.validate()
        history = self._live(owner)
        if not history:
            return True
        try:
            self._check(owner, history if strategy.transitive else history[-1:], new, strategy)
        except InvalidSchemaError:
            raise
        except IncompatibleSchemaError:
            return False
        return True

    def check_consumer(self, topic: str, schema: pb.Schema, strategy: Compatibility) -> None:
        """Refuse (IncompatibleSchemaError) a consumer's schema the topic's history does not allow.

        As Pulsar's checkConsumerCompatibility: ALWAYS_COMPATIBLE allows anything; a topic without
        a schema allows none; BACKWARD, FORWARD, FORWARD_TRANSITIVE and FULL check that the
        consumer's schema can read the latest version (BACKWARD); the other strategies apply
        themselves against every version.
        """
        if strategy is Compatibility.ALWAYS_COMPATIBLE or schema.type == _NO_SCHEMA:
            return
        owner = schema_owner(topic)
        history = self._live(owner)
        new = _Candidate.of(schema, self.max_schema_size)
        if not history:
            raise IncompatibleSchemaError(
                "Failed to add schema to an active topic with empty(BYTES) schema:"
                f" new schema type {type_name(schema.type)}"
            )
        if strategy in _CONSUMER_READS_LATEST:
            self._check(owner, history[-1:], new, Compatibility.BACKWARD)
        else:
            self._check(owner, history, new, strategy)

    # -- compatibility ---------------------------------------------------------------------
    def _check(
        self, owner: str, versions: Sequence[SchemaVersion], new: _Candidate, strategy: Compatibility
    ) -> None:
        """Refuse ``new`` unless compatible with each of ``versions`` (oldest first) under ``strategy``."""
        if strategy is Compatibility.ALWAYS_COMPATIBLE:
            return
        for sv in versions:
            if sv.schema.type != new.schema.type:
                raise IncompatibleSchemaError(
                    f"Incompatible schema: exists schema type {type_name(sv.schema.type)},"
                    f" new schema type {type_name(new.schema.type)}"
                )
        if strategy is Compatibility.ALWAYS_INCOMPATIBLE:
            raise IncompatibleSchemaError("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")
        if len(versions) == 1 and self._known.get(owner, {}).get(new.identity) == versions[0].version:
            return  # the same schema (Pulsar: the same SchemaHash)
        if new.schema.type not in _JSON_DEFINED:
            return  # Pulsar's default check: the same type is enough
        json_latest = new.schema.type == pb.Schema.Json and not strategy.transitive
        if json_latest and not self._json_needs_avro_check(owner, versions[-1], new):
            return
        writer_reader = _DIRECTIONS[strategy]
        budget = avro.Budget()  # one for the whole request, however many versions it compares
        new_parsed = new.parsed()
        for sv in reversed(versions):  # the latest first, as Avro's validator walks them
            old = self._parsed_version(owner, sv)
            for new_writes in writer_reader:
                writer, reader = (new_parsed, old) if new_writes else (old, new_parsed)
                problem = _read_problem(writer, reader, budget)
                if problem is not None:
                    who = f"version {sv.version}"
                    direction = (
                        f"{who} cannot read data written with the new schema"
                        if new_writes
                        else f"the new schema cannot read data written with {who}"
                    )
                    raise IncompatibleSchemaError(f"{strategy.name}: {direction}: {problem}")

    def _json_needs_avro_check(self, owner: str, latest: SchemaVersion, new: _Candidate) -> bool:
        """Pulsar's JsonSchemaCompatibilityCheck: only two Avro definitions are compared; an Avro
        one beside the older JSON-schema format is accepted, anything else beside Avro refused."""
        try:
            self._parsed_version(owner, latest)
        except IncompatibleSchemaError:
            return False  # the stored schema is not Avro: the new one replaces it
        if new.definition is not None:
            return True
        if isinstance(new.document, dict):
            return False  # the older JSON-schema format
        raise IncompatibleSchemaError("Unknown schema format")

    def _parsed_version(self, owner: str, sv: SchemaVersion) -> avro.Schema:
        key = (owner, sv.version)
        found = self._parsed.get(key)
        if found is not None:
            self._parsed.move_to_end(key)
            return found
        parsed = _Candidate.of(sv.schema, None).parsed()
        self._remember(owner, sv.version, parsed)
        return parsed

    def _remember(self, owner: str, version: int, parsed: avro.Schema) -> None:
        self._parsed[(owner, version)] = parsed
        if len(self._parsed) > PARSED_CACHE_SIZE:
            self._parsed.popitem(last=False)

    def _add(self, owner: str, sv: SchemaVersion, identity: tuple[int, bytes] | None = None) -> None:
        self._history.setdefault(owner, []).append(sv)
        self._known.setdefault(owner, {}).setdefault(identity or _identity(sv.schema), sv.version)

    # -- storage -------------------------------------------------------------------------
    def _append_to_log(self, owner: str, version: int, schema: pb.Schema) -> None:
        if self._dir is None:
            return
        self._write_lines(self._dir / LOG_NAME, [_log_line(owner, version, schema)], "ab")

    def _write_marker(self, owner: str, version: int) -> None:
        if self._dir is None:
            return
        record = {"topic": owner, "version": version, "deleted": True}
        self._write_lines(self._dir / LOG_NAME, [json.dumps(record).encode() + b"\n"], "ab")

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
                deleted = record.get("deleted") is True
                schema = None if deleted else pb.Schema.FromString(bytes.fromhex(record["schema"]))
            except (ValueError, KeyError, TypeError, RecursionError, AttributeError) as exc:
                log.warning("%s:%d: skipping an unreadable record (%s)", path, number, exc)
                continue
            if version != len(self._history.get(owner, [])):
                log.warning("%s:%d: skipping version %d of %s out of sequence", path, number, version, owner)
                continue
            if schema is None:
                self._mark_deleted(owner, version)
            else:
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
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


#: Consumer schemas under these strategies are checked BACKWARD against the latest version (Pulsar).
_CONSUMER_READS_LATEST = (
    Compatibility.BACKWARD,
    Compatibility.FORWARD,
    Compatibility.FORWARD_TRANSITIVE,
    Compatibility.FULL,
)
#: which way data must be readable: True = the new schema writes and the old one reads
_DIRECTIONS: dict[Compatibility, tuple[bool, ...]] = {
    Compatibility.BACKWARD: (False,),
    Compatibility.BACKWARD_TRANSITIVE: (False,),
    Compatibility.FORWARD: (True,),
    Compatibility.FORWARD_TRANSITIVE: (True,),
    Compatibility.FULL: (False, True),
    Compatibility.FULL_TRANSITIVE: (False, True),
}


def _read_problem(writer: avro.Schema, reader: avro.Schema, budget: avro.Budget) -> str | None:
    """Why ``reader`` cannot read ``writer``'s data, spending from the request's ``budget``."""
    try:
        return avro.read_error(writer, reader, budget)
    except avro.ResolutionTooComplex as exc:
        raise IncompatibleSchemaError(f"too complex to compare: {exc}") from None
    except avro.AvroSchemaError as exc:
        return str(exc)


def type_name(schema_type: int) -> str:
    """A schema type as Pulsar names it (``AVRO``, ``KEY_VALUE``, ``PROTOBUF_NATIVE``...)."""
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", pb.Schema.Type.Name(cast(Any, schema_type))).upper()
    return "BOOLEAN" if name == "BOOL" else name


def _identity(schema: pb.Schema) -> tuple[int, bytes]:
    """What makes two schemas the same: the type and the definition (AVRO/JSON: its JSON, normalized)."""
    data = schema.schema_data
    if schema.type in _JSON_DEFINED:
        with contextlib.suppress(ValueError, RecursionError):
            data = json.dumps(json.loads(data), sort_keys=True, separators=(",", ":")).encode()
    return schema.type, data


@dataclass
class _Candidate:
    """A schema a client sent, bounded and parsed at most once."""

    schema: pb.Schema
    document: Any = None  # the decoded JSON definition (AVRO/JSON/PROTOBUF), None otherwise
    definition: avro.Schema | None = None
    avro_error: str | None = None
    _identity: tuple[int, bytes] | None = None

    @classmethod
    def of(cls, schema: pb.Schema, max_size: int | None) -> _Candidate:
        """Bound ``schema`` (size, nesting) and parse its definition; raises InvalidSchemaError."""
        size = schema.ByteSize()
        if max_size is not None and size > max_size:
            raise InvalidSchemaError(f"schema of {size} bytes: at most {max_size} are accepted")
        found = cls(schema)
        if schema.type in _STRUCT:
            found.document = _definition(schema)  # refuses definitions nested too deep first
            try:
                found.definition = avro.from_json(found.document)
            except avro.AvroSchemaError as exc:
                found.avro_error = str(exc)
        return found

    @property
    def identity(self) -> tuple[int, bytes]:
        if self._identity is None:
            if self.document is not None and self.schema.type in _JSON_DEFINED:
                canonical = json.dumps(self.document, sort_keys=True, separators=(",", ":")).encode()
                self._identity = (self.schema.type, canonical)
            else:
                self._identity = _identity(self.schema)
        return self._identity

    def validate(self) -> None:
        """Pulsar's StructSchemaDataValidator: AVRO (and PROTOBUF) definitions are Avro schemas but
        not unions; JSON ones are Avro schemas or JSON objects (the older JSON-schema format)."""
        if self.schema.type not in _STRUCT:
            return
        kind = type_name(self.schema.type)
        if self.definition is None:
            if self.schema.type == pb.Schema.Json and isinstance(self.document, dict):
                return
            raise InvalidSchemaError(f"Invalid schema definition data for {kind} schema: {self.avro_error}")
        if self.schema.type == pb.Schema.Avro and self.definition.type == "union":
            raise InvalidSchemaError("Avro schema typed [UNION] is not supported")

    def parsed(self) -> avro.Schema:
        """The Avro definition; raises IncompatibleSchemaError when there is none (as Pulsar's check
        answers a definition its parser refuses)."""
        if self.definition is None:
            reason = self.avro_error or "not JSON"
            raise IncompatibleSchemaError(f"the definition is not an Avro schema: {reason}")
        return self.definition
