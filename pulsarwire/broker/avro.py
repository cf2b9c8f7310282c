"""Avro schemas as Pulsar's broker reads them, and Avro's rules for reading data written with another one.

Pulsar checks AVRO and JSON schemas (a JSON schema's definition is an Avro record) with Avro's
own ``SchemaValidatorBuilder``: a reader *can read* a writer when Avro's schema resolution of the
two has no error. This module implements those facts without a JVM:

* :func:`parse` reads a definition the way Pulsar's broker does (Avro's ``Schema.Parser`` with
  Pulsar's name validator -- a name starts with a letter, ``_`` or ``$`` and goes on with letters,
  digits, ``_`` or ``$`` -- and defaults not checked against their types) into :class:`Schema`
  nodes. Named types (record, enum, fixed) are defined once and may refer to each other and to
  themselves; names are resolved against the enclosing namespace as Avro does.
* :func:`read_error` says why data written with ``writer`` cannot be read with ``reader`` (None
  when it can), following Avro's ``Resolver``:

  - first the reader's aliases are applied to the writer (``Schema.applyAliases``): a writer type
    whose full name is an alias of a reader type takes the reader's name, and a writer field whose
    name is an alias of a reader field (in a record of the same name) takes that field's name;
  - records are matched field by field, by name -- the record names themselves are **not**
    compared (Avro's resolver leaves that check out); a writer field the reader lacks is skipped;
    a reader field the writer lacks needs a default, which must fit the field's type (for a
    union: its first branch);
  - enums and fixed types need the same full name, fixed types the same size; enum symbols may
    differ (a symbol the reader lacks fails only when such a value is read);
  - promotions: int to long, float or double; long to float or double; float to double; string
    to bytes and bytes to string;
  - a writer union resolves each of its branches against the reader (unless both unions are
    equivalent), and each must resolve; a reader union takes the writer's type in its first
    branch that matches it exactly, else a record of the same structure, else by promotion;
  - arrays and maps resolve their items and values.

  Every error counts, reachable by data or not -- as Avro's ``Symbol.hasErrors`` does for the
  validator.

Schemas come from clients, so the work is bounded: parsing is linear in the definition (whose
size and depth the registry caps beforehand), and :func:`read_error` stops with
:class:`ResolutionTooComplex` when its :class:`Budget` (default :data:`MAX_RESOLUTION_STEPS` steps)
runs out; pairs of records are memoized, so recursive and shared types cost once per pair.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "enum", "fixed"})
#: writer type -> the reader types it is promoted to (Avro's Resolver.Promote)
PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
#: Steps (type pairs and fields visited) one resolution may take before it is refused.
MAX_RESOLUTION_STEPS = 200_000


class AvroSchemaError(ValueError):
    """A definition Avro's parser refuses (Pulsar: SchemaParseException)."""


class ResolutionTooComplex(ValueError):
    """Two schemas whose resolution would take more steps than the budget allows."""


@dataclass(slots=True)
class Budget:
    """Steps left for the resolutions of one request (several may share one budget)."""

    left: int = MAX_RESOLUTION_STEPS


@dataclass(eq=False, slots=True)
class Field:
    name: str
    type: Schema
    has_default: bool = False
    default: Any = None
    aliases: tuple[str, ...] = ()


@dataclass(eq=False, slots=True)
class Schema:
    """One node of a parsed Avro schema; named types are shared by every reference to them."""

    type: str
    #: full name of a record, enum or fixed
    name: str | None = None
    #: full names this named type is also known by
    aliases: tuple[str, ...] = ()
    fields: dict[str, Field] = field(default_factory=dict)
    symbols: tuple[str, ...] = ()
    size: int = 0
    #: array items, map values
    items: Schema | None = None
    branches: tuple[Schema, ...] = ()

    @property
    def short_name(self) -> str | None:
        return self.name.rsplit(".", 1)[-1] if self.name is not None else None

    @property
    def full_name(self) -> str:
        """The full name of a named type, else the type (what Avro prints in its errors)."""
        return self.name if self.name is not None else self.type


# -- parsing ------------------------------------------------------------------------------------
def parse(definition: str | bytes) -> Schema:
    """Parse an Avro definition (JSON text); raises AvroSchemaError."""
    try:
        doc = json.loads(definition)
    except (ValueError, RecursionError) as exc:
        raise AvroSchemaError(f"not JSON: {exc}") from None
    return from_json(doc)


def from_json(doc: Any) -> Schema:
    """Parse an already decoded Avro definition; raises AvroSchemaError."""
    return _Parser().parse(doc, None)


#: Pulsar's CompatibleNameValidator: a letter, ``_`` or ``$``, then letters, digits, ``_`` or ``$``.
_NAME = re.compile(r"(?:[^\W\d]|\$)(?:\w|\$)*")


def valid_name(name: str) -> bool:
    """Whether ``name`` passes Pulsar's CompatibleNameValidator (letters in any script, as Java's)."""
    return _NAME.fullmatch(name) is not None


def _short(doc: Any) -> str:
    text = json.dumps(doc)
    return text if len(text) <= 120 else text[:120] + "..."


class _Parser:
    def __init__(self) -> None:
        self.names: dict[str, Schema] = {}

    def parse(self, doc: Any, space: str | None) -> Schema:
        if isinstance(doc, str):
            return Schema(doc) if doc in PRIMITIVES else self._lookup(doc, space)
        if isinstance(doc, list):
            return self._union(doc, space)
        if not isinstance(doc, dict):
            raise AvroSchemaError(f"Schema not yet supported: {_short(doc)}")
        kind = doc.get("type")
        if not isinstance(kind, str):
            raise AvroSchemaError(f"No type: {_short(doc)}")
        if kind in PRIMITIVES:
            return Schema(kind)
        if kind in ("record", "error"):
            return self._record(doc, space)
        if kind == "enum":
            return self._enum(doc, space)
        if kind == "fixed":
            size = doc.get("size")
            if not isinstance(size, int) or isinstance(size, bool):
                raise AvroSchemaError(f"Invalid or no size: {_short(doc)}")
            node, _ = self._define(doc, space, Schema("fixed", size=size))
            return node
        if kind == "array":
            if "items" not in doc:
                raise AvroSchemaError(f"Array has no items type: {_short(doc)}")
            return Schema("array", items=self.parse(doc["items"], space))
        if kind == "map":
            if "values" not in doc:
                raise AvroSchemaError(f"Map has no values type: {_short(doc)}")
            return Schema("map", items=self.parse(doc["values"], space))
        return self._lookup(kind, space)

    def _lookup(self, name: str, space: str | None) -> Schema:
        full = name if "." in name or not space else f"{space}.{name}"
        found = self.names.get(full) or self.names.get(name)
        if found is None:
            raise AvroSchemaError(f'"{name}" is not a defined name')
        return found

    def _define(self, doc: dict[str, Any], space: str | None, node: Schema) -> tuple[Schema, str | None]:
        """Name ``node`` after ``doc`` and register it; returns it and its namespace."""
        name = doc.get("name")
        if not isinstance(name, str):
            raise AvroSchemaError(f"No name in schema: {_short(doc)}")
        own_space: str | None
        if "." in name:
            own_space, _, short = name.rpartition(".")
        else:
            declared = doc.get("namespace")
            if declared is not None and not isinstance(declared, str):
                raise AvroSchemaError(f"namespace is not a string: {_short(doc)}")
            own_space, short = (space if declared is None else declared), name
        if not valid_name(short):
            raise AvroSchemaError(f"Illegal name: {name!r}")
        own_space = own_space or None
        full = f"{own_space}.{short}" if own_space else short
        if full in PRIMITIVES or full in self.names:
            raise AvroSchemaError(f"Can't redefine: {full}")
        node.name = full
        node.aliases = tuple(_qualified(a, own_space) for a in _strings(doc, "aliases"))
        self.names[full] = node
        return node, own_space

    def _record(self, doc: dict[str, Any], space: str | None) -> Schema:
        node, own_space = self._define(doc, space, Schema("record"))
        fields = doc.get("fields")
        if not isinstance(fields, list):
            raise AvroSchemaError(f"Record has no fields: {_short(doc)}")
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                raise AvroSchemaError(f"No field name: {_short(f)}")
            name = f["name"]
            if not valid_name(name):
                raise AvroSchemaError(f"Illegal field name: {name!r}")
            if "type" not in f:
                raise AvroSchemaError(f"No field type: {_short(f)}")
            if name in node.fields:
                raise AvroSchemaError(f"Duplicate field {name} in record {node.name}")
            node.fields[name] = Field(
                name,
                self.parse(f["type"], own_space),
                has_default="default" in f,
                default=f.get("default"),
                aliases=tuple(_strings(f, "aliases")),
            )
        return node

    def _enum(self, doc: dict[str, Any], space: str | None) -> Schema:
        symbols = doc.get("symbols")
        if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
            raise AvroSchemaError(f"Enum has no symbols: {_short(doc)}")
        if len(set(symbols)) != len(symbols):
            raise AvroSchemaError(f"Duplicate enum symbol in {_short(doc)}")
        bad = [s for s in symbols if not valid_name(s)]
        if bad:
            raise AvroSchemaError(f"Illegal enum symbol: {bad[0]!r}")
        default = doc.get("default")
        if default is not None and default not in symbols:
            raise AvroSchemaError(f"The Enum Default: {default} is not in the enum symbol set: {symbols}")
        node, _ = self._define(doc, space, Schema("enum", symbols=tuple(symbols)))
        return node

    def _union(self, doc: list[Any], space: str | None) -> Schema:
        branches = tuple(self.parse(b, space) for b in doc)
        seen: set[str] = set()
        for b in branches:
            if b.type == "union":
                raise AvroSchemaError(f"Nested union: {_short(doc)}")
            key = b.full_name
            if key in seen:
                raise AvroSchemaError(f"Duplicate in union: {key}")
            seen.add(key)
        return Schema("union", branches=branches)


def _strings(doc: dict[str, Any], key: str) -> list[str]:
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AvroSchemaError(f"{key} is not a list of names: {_short(doc)}")
    return value


def _qualified(name: str, space: str | None) -> str:
    return name if "." in name or not space else f"{space}.{name}"


# -- aliases (Avro's Schema.applyAliases) ------------------------------------------------------
def _reader_aliases(reader: Schema) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The reader's type aliases (alias -> name) and field aliases (record name -> alias -> field)."""
    types: dict[str, str] = {}
    fields: dict[str, dict[str, str]] = {}
    seen: set[int] = set()
    stack = [reader]
    while stack:
        node = stack.pop()
        if node.name is not None:
            for alias in node.aliases:
                types[alias] = node.name
        if node.type == "record":
            if id(node) in seen:
                continue
            seen.add(id(node))
            assert node.name is not None
            for f in node.fields.values():
                for alias in f.aliases:
                    fields.setdefault(node.name, {})[alias] = f.name
                stack.append(f.type)
            if node.name in fields:
                for alias in node.aliases:
                    fields[alias] = fields[node.name]
        elif node.items is not None:
            stack.append(node.items)
        else:
            stack.extend(node.branches)
    return types, fields


class _Renamer:
    """The writer with the reader's aliases applied (a copy; the parsed writer is not changed)."""

    def __init__(self, types: dict[str, str], fields: dict[str, dict[str, str]]) -> None:
        self.types, self.fields = types, fields
        self.done: dict[int, Schema] = {}

    def apply(self, node: Schema) -> Schema:
        if node.type in PRIMITIVES:
            return node
        found = self.done.get(id(node))
        if found is not None:
            return found
        name = self.types.get(node.name, node.name) if node.name is not None else None
        copy = Schema(node.type, name, node.aliases, {}, node.symbols, node.size)
        self.done[id(node)] = copy  # before the children: records may refer to themselves
        if node.items is not None:
            copy.items = self.apply(node.items)
        copy.branches = tuple(self.apply(b) for b in node.branches)
        renames = self.fields.get(name, {}) if name is not None else {}
        for f in node.fields.values():
            new_name = renames.get(f.name, f.name)
            if new_name in copy.fields:
                raise AvroSchemaError(f"Duplicate field {new_name} in record {name} once aliases are applied")
            copy.fields[new_name] = Field(new_name, self.apply(f.type), f.has_default, f.default, f.aliases)
        return copy


# -- resolution (Avro's Resolver) --------------------------------------------------------------
class _Action:
    __slots__ = ()


class _Fine(_Action):
    """Nothing to resolve: same type, a promotion, or a writer field the reader skips."""

    __slots__ = ()


FINE = _Fine()


class _Error(_Action):
    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class _Container(_Action):
    __slots__ = ("element",)

    def __init__(self, element: _Action) -> None:
        self.element = element


class _Record(_Action):
    __slots__ = ("default_problem", "fields")

    def __init__(self) -> None:
        self.fields: list[tuple[str, _Action]] = []
        self.default_problem: str | None = None


class _WriterUnion(_Action):
    __slots__ = ("branches",)

    def __init__(self, branches: list[tuple[str, _Action]]) -> None:
        self.branches = branches


class _ReaderUnion(_Action):
    __slots__ = ("actual",)

    def __init__(self, actual: _Action) -> None:
        self.actual = actual


def _mismatch(w: Schema, r: Schema) -> _Error:
    return _Error(f"Found {w.full_name}, expecting {r.full_name}")


class _Resolver:
    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.records: dict[tuple[int, int], _Action] = {}
        self.equiv: dict[tuple[int, int], bool] = {}

    def _tick(self, n: int = 1) -> None:
        self.budget.left -= n
        if self.budget.left < 0:
            raise ResolutionTooComplex("the schemas take too many steps to compare")

    def resolve(self, w: Schema, r: Schema) -> _Action:
        self._tick()
        if w.type == "union":
            return self._writer_union(w, r)
        if w.type == r.type:
            kind = w.type
            if kind in PRIMITIVES:
                return FINE
            if kind == "fixed":
                if w.name != r.name or w.size != r.size:
                    return _mismatch(w, r)
                return FINE
            if kind == "enum":
                return FINE if w.name == r.name else _mismatch(w, r)
            if kind in ("array", "map"):
                assert w.items is not None and r.items is not None
                return _Container(self.resolve(w.items, r.items))
            return self._record(w, r)
        if r.type == "union":
            j = self._first_matching_branch(w, r)
            if j < 0:
                return _Error(f"Found {w.full_name}, expecting a union without it")
            return _ReaderUnion(self.resolve(w, r.branches[j]))
        return FINE if r.type in PROMOTIONS.get(w.type, ()) else _mismatch(w, r)

    def _record(self, w: Schema, r: Schema) -> _Action:
        key = (id(w), id(r))
        found = self.records.get(key)
        if found is not None:
            return found
        action = _Record()
        self.records[key] = action  # before the fields: records may refer to themselves
        self._tick(len(w.fields) + len(r.fields))
        for wf in w.fields.values():
            rf = r.fields.get(wf.name)
            action.fields.append((wf.name, FINE if rf is None else self.resolve(wf.type, rf.type)))
        for rf in r.fields.values():
            if rf.name in w.fields:
                continue
            if not rf.has_default:
                found_instead = f"Found {w.full_name}, expecting {r.full_name}"
                error = _Error(f"{found_instead}, missing required field {rf.name}")
                self.records[key] = error
                return error
            if action.default_problem is None:
                problem = _default_problem(rf.type, rf.default)
                if problem is not None:
                    action.default_problem = f"field {rf.name}: invalid default: {problem}"
        return action

    def _writer_union(self, w: Schema, r: Schema) -> _Action:
        if self._union_equiv(w, r):
            return FINE
        return _WriterUnion([(b.full_name, self.resolve(b, r)) for b in w.branches])

    def _union_equiv(self, w: Schema, r: Schema) -> bool:
        """Avro's Resolver.unionEquiv: the same structure, named types by their short names."""
        self._tick()
        if w.type != r.type:
            return False
        if w.type in NAMED and w.short_name != r.short_name:
            return False
        if w.type in PRIMITIVES:
            return True
        if w.type in ("array", "map"):
            assert w.items is not None and r.items is not None
            return self._union_equiv(w.items, r.items)
        if w.type == "fixed":
            return w.size == r.size
        if w.type == "enum":
            return w.symbols == r.symbols
        if w.type == "union":
            return len(w.branches) == len(r.branches) and all(
                self._union_equiv(a, b) for a, b in zip(w.branches, r.branches, strict=True)
            )
        key = (id(w), id(r))
        if key not in self.equiv:
            self.equiv[key] = True  # optimistic, as Avro: a recursive reference is taken as equal
            wf, rf = list(w.fields.values()), list(r.fields.values())
            self.equiv[key] = len(wf) == len(rf) and all(
                a.name == b.name and self._union_equiv(a.type, b.type) for a, b in zip(wf, rf, strict=True)
            )
        return self.equiv[key]

    def _first_matching_branch(self, w: Schema, r: Schema) -> int:
        """Avro's ReaderUnion.firstMatchingBranch (the "soft match" it kept from Avro 1.8)."""
        structure_match = -1
        for j, b in enumerate(r.branches):
            self._tick()
            if w.type != b.type:
                continue
            if w.type not in NAMED:
                return j
            if w.name is not None and w.name == b.name:
                return j
            structural = w.type == "record" and not _has_match_error(self._record(w, b))
            if structural and (structure_match < 0 or (w.short_name and w.short_name == b.short_name)):
                structure_match = j
        if structure_match >= 0:
            return structure_match
        promoted = PROMOTIONS.get(w.type, frozenset())
        for j, b in enumerate(r.branches):
            if b.type in promoted:
                return j
        return -1


def _has_match_error(action: _Action) -> bool:
    return isinstance(action, _Error) or (
        isinstance(action, _Record) and any(isinstance(a, _Error) for _, a in action.fields)
    )


def _first_error(action: _Action) -> str | None:
    """The first error anywhere in a resolution (Avro's Symbol.hasErrors), with the field path."""
    seen: set[int] = set()
    stack: list[tuple[_Action, str]] = [(action, "")]
    while stack:
        node, path = stack.pop()
        where = f" (at {path})" if path else ""
        if isinstance(node, _Error):
            return node.message + where
        if isinstance(node, _Container):
            stack.append((node.element, f"{path}[]"))
        elif isinstance(node, _ReaderUnion):
            stack.append((node.actual, path))
        elif isinstance(node, _WriterUnion):
            stack.extend((a, f"{path}<{label}>") for label, a in reversed(node.branches))
        elif isinstance(node, _Record):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.default_problem is not None:
                return node.default_problem + where
            stack.extend((a, f"{path}.{name}" if path else name) for name, a in reversed(node.fields))
    return None


def read_error(writer: Schema, reader: Schema, budget: Budget | None = None) -> str | None:
    """Why data written with ``writer`` cannot be read with ``reader``; None when it can.

    Raises ResolutionTooComplex when ``budget`` (default: MAX_RESOLUTION_STEPS) runs out,
    AvroSchemaError when aliases make two writer fields one.
    """
    try:
        types, fields = _reader_aliases(reader)
        if types or fields:
            writer = _Renamer(types, fields).apply(writer)
        return _first_error(_Resolver(budget or Budget()).resolve(writer, reader))
    except RecursionError:  # a long chain of named types referring to each other
        raise ResolutionTooComplex("the schemas nest too deep to compare") from None


# -- default values (what Avro's encoder accepts for them) -------------------------------------
def _default_problem(schema: Schema, value: Any, depth: int = 0) -> str | None:
    """Why ``value`` cannot be encoded as ``schema`` (Avro encodes a reader field's default when
    resolving); None when it can. A union's default is of its first branch."""
    if depth > 100:
        return "nested too deep"
    kind = schema.type
    if kind == "union":
        return _default_problem(schema.branches[0], value, depth + 1)
    if kind == "null":
        return None if value is None else f"non-null default value for null type: {_short(value)}"
    if kind == "boolean":
        return None if isinstance(value, bool) else f"non-boolean default for boolean: {_short(value)}"
    if kind in ("int", "long", "float", "double"):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else f"non-numeric default value for {kind}: {_short(value)}"
    if kind in ("string", "bytes", "fixed"):
        return None if isinstance(value, str) else f"non-string default value for {kind}: {_short(value)}"
    if kind == "enum":
        return None if value in schema.symbols else f"{_short(value)} is not a symbol of {schema.name}"
    if kind == "array":
        assert schema.items is not None
        items = value if isinstance(value, list) else []  # Jackson: a non-array has no elements
        return next((p for v in items if (p := _default_problem(schema.items, v, depth + 1))), None)
    if kind == "map":
        assert schema.items is not None
        values = value.values() if isinstance(value, dict) else ()
        return next((p for v in values if (p := _default_problem(schema.items, v, depth + 1))), None)
    # record: each field from the value, else from the field's own default
    given = value if isinstance(value, dict) else {}
    for f in schema.fields.values():
        if f.name in given:
            problem = _default_problem(f.type, given[f.name], depth + 1)
        elif f.has_default:
            problem = _default_problem(f.type, f.default, depth + 1)
        else:
            problem = f"no default value for: {f.name}"
        if problem is not None:
            return problem
    return None
