"""Loading a job: YAML files → one merged, interpolated document → a validated :class:`Job`.

:func:`load_job` reads three layers and deep-merges them in this order (mappings merge
key by key, anything else — lists, scalars, null — replaces):

1. the profile ``<conf_dir>/<env>.yaml`` (only ``vars``, a connector's defaults such as
   ``pulsar``, and ``spark``: :data:`PROFILE_KEYS`);
2. the job file;
3. ``--set key.path=value`` overrides (values are YAML: ``8``, ``true``, ``[a, b]``).

Then every string is interpolated: ``${env:NAME}``, ``${env:NAME:-default}`` (the
default when NAME is unset or empty), ``${key.path}`` (any key of the merged document,
``vars.*`` included; ``[0]`` indexes lists, ``["a.b"]`` quotes keys with dots).
References resolve recursively, a reference that is the whole string keeps the type of
its target (a number, a mapping), ``$${`` is a literal ``${``, and cycles are errors.
Each profile section ``<kind>:`` (``pulsar: {service_url, client}``) then gives defaults
to the job's ``source.<kind>`` and ``sink.<kind>``, key by key. Finally
:class:`~pipelines.jobs.models.Job` validates the document.

Every problem becomes one line of a :class:`~pipelines.errors.JobError`:
``file: key.path: message``, where ``file`` is the layer the offending key came from
(the job file, the profile, or ``--set``), or ``file:line:col: message`` for YAML syntax
errors. The YAML dialect is YAML 1.2-like: only ``true``/``false`` are booleans,
``12:40:-1`` and ``2024-01-01`` stay strings, and duplicate keys are errors. Secrets
never appear in messages or in :func:`redacted`.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
import os
import re
import sys
import types
from collections.abc import Iterable, Mapping, Sequence
from inspect import isclass
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from pipelines.errors import JobError
from pipelines.jobs.models import PROFILE_KINDS, UNION_TAGS, Job, Transform
from pipelines.jobs.sql import sql_problems
from pipelines.masking import is_secret_key, mask, mask_data, remember, secret_values
from pipelines.options.bound import format_path
from pipelines.options.grammar import kind_of, show
from pipelines.options.migration import job_key_hint
from pipelines.options.model import Loc, OptionsModel
from pipelines.suggest import did_you_mean

__all__ = [
    "PROFILE_KEYS",
    "find_jobs",
    "load_job",
    "parse_override",
    "parse_path",
    "project_root",
    "redacted",
]

#: the top-level keys a profile may set
PROFILE_KEYS = ("vars", *PROFILE_KINDS, "spark")
#: the same as words: ``vars, pulsar and spark``
_PROFILE_WORDS = f"{', '.join(PROFILE_KEYS[:-1])} and {PROFILE_KEYS[-1]}"
OVERRIDE_LABEL = "--set"


def project_root() -> Path:
    """``$PIPELINES_PROJECT_DIR`` or the working directory: where ``jobs/``, ``conf/`` are found."""
    return Path(os.environ.get("PIPELINES_PROJECT_DIR") or Path.cwd())


def find_jobs(root: Path | None = None) -> list[Path]:
    """Every ``jobs/*.yaml`` (and ``*.yml``) under ``root``, sorted."""
    base = (root or project_root()) / "jobs"
    return sorted([*base.glob("*.yaml"), *base.glob("*.yml")])


# -- YAML -----------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 scalars (no yes/no booleans, sexagesimals, timestamps)
    and an error on duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.setdefault(key, key_node.start_mark.line)
            except TypeError:
                continue
            if first != key_node.start_mark.line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {first + 1})", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [
        (tag, rx)
        for tag, rx in resolvers
        if tag
        not in (
            "tag:yaml.org,2002:bool",
            "tag:yaml.org,2002:int",
            "tag:yaml.org,2002:float",
            "tag:yaml.org,2002:timestamp",
        )
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9][0-9_]*\.[0-9_]*)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


def _yaml_error(label: str, exc: yaml.YAMLError) -> JobError:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        message = exc.problem or "invalid YAML"
        if exc.context:
            message += f" ({exc.context})"
        return JobError(f"{label}:{mark.line + 1}:{mark.column + 1}: {message}")
    return JobError(f"{label}: {exc}")


#: the most values (scalars, lists, mappings) a job or profile may hold once aliases are expanded
MAX_VALUES = 20_000


def _expanded_size(root: yaml.Node, label: str) -> None:
    """Refuse a document whose aliases expand it past :data:`MAX_VALUES` values, or refer to
    themselves; time linear in the document (each distinct node is sized once)."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            children = _children(node)
            size = 1 + sum(sizes[id(c)] for c in children)
            sizes[key] = size
            if size > MAX_VALUES:
                mark = node.start_mark
                raise JobError(
                    f"{label}:{mark.line + 1}:{mark.column + 1}: this value holds more than {MAX_VALUES} "
                    "values once YAML aliases are expanded: refused (a job file is far smaller)"
                )
            continue
        if key in sizes:
            continue
        if key in open_:
            mark = node.start_mark
            raise JobError(f"{label}:{mark.line + 1}:{mark.column + 1}: a YAML alias refers to itself")
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _load_yaml(text: str, label: str) -> Any:
    """YAML text → data, with the alias check of :func:`_expanded_size` before building it."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, label)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _read_yaml(path: Path, label: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise JobError(f"{label}: cannot read: {exc.strerror or exc}") from None
    try:
        return _load_yaml(text, label)
    except yaml.YAMLError as exc:
        raise _yaml_error(label, exc) from None


# -- key paths and --set ------------------------------------------------------------------

_KEY = re.compile(r"[A-Za-z0-9_-]+")
_INDEX = re.compile(r"\[(\d+)\]")


def parse_path(text: str) -> Loc:
    """``a.b[0]["c.d"]`` → ``("a", "b", 0, "c.d")`` (the syntax of error paths). Raises ValueError."""
    parts: list[str | int] = []
    i, n = 0, len(text)
    decoder = json.JSONDecoder()
    while i < n:
        if text.startswith('["', i):
            try:
                key, end = decoder.raw_decode(text, i + 1)
            except json.JSONDecodeError:
                raise ValueError(f"not a key path: {text!r}") from None
            if not text.startswith("]", end):
                raise ValueError(f"not a key path: {text!r}")
            parts.append(key)
            i = end + 1
            continue
        m = _INDEX.match(text, i)
        if m and parts:
            parts.append(int(m.group(1)))
            i = m.end()
            continue
        if parts:
            if text[i] != ".":
                raise ValueError(f"not a key path: {text!r}")
            i += 1
        m = _KEY.match(text, i)
        if not m:
            raise ValueError(f"not a key path: {text!r}")
        parts.append(m.group(0))
        i = m.end()
    if not parts:
        raise ValueError("empty key path")
    return tuple(parts)


def parse_override(text: str) -> tuple[Loc, Any]:
    """``key.path=value`` → (path, value); the value is YAML (``8``, ``true``, ``[a, b]``, ``""``).

    A value that YAML would read as a mapping or list without ``{``/``[`` (``a: b``) stays a
    string. Raises JobError naming ``--set``.
    """
    for i, c in enumerate(text):
        if c != "=":
            continue
        try:
            path = parse_path(text[:i].strip())
        except ValueError:
            continue
        if any(isinstance(p, int) for p in path):
            raise JobError(
                f"{OVERRIDE_LABEL} {text}: list items cannot be set one by one: give the whole list"
            )
        raw = text[i + 1 :]
        try:
            value = yaml.load(raw, Loader=_Loader) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        if isinstance(value, dict) and not raw.lstrip().startswith("{"):
            value = raw
        if isinstance(value, list) and not raw.lstrip().startswith("["):
            value = raw
        return path, value
    raise JobError(f"{OVERRIDE_LABEL} {text}: expected key.path=value")


# -- merging with provenance ----------------------------------------------------------------


class _Doc:
    """The merged document plus, for each key path, the layer that set it."""

    def __init__(self) -> None:
        self.data: dict[Any, Any] = {}
        self.origins: dict[Loc, str] = {(): ""}

    def merge(self, layer: Mapping[Any, Any], label: str) -> None:
        self.data = self._merge(self.data, layer, (), label)

    def _record(self, value: Any, path: Loc, label: str, *, replaces: bool = True) -> None:
        """``label`` set ``value`` at ``path``; what was recorded below ``path`` goes (only a
        value that ``replaces`` another can have anything below it: the scan is skipped else)."""
        if replaces:
            for p in [p for p in self.origins if len(p) > len(path) and p[: len(path)] == path]:
                del self.origins[p]
        self.origins[path] = label
        if isinstance(value, dict):
            for k, v in value.items():
                self._record(v, (*path, k), label, replaces=False)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self._record(v, (*path, i), label, replaces=False)

    def _merge(self, base: Any, over: Any, path: Loc, label: str) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            out = dict(base)
            for k, v in over.items():
                if k in out:
                    out[k] = self._merge(out[k], v, (*path, k), label)
                else:
                    out[k] = copy.deepcopy(v)
                    self._record(v, (*path, k), label, replaces=False)
            return out
        self._record(over, path, label)
        return copy.deepcopy(over)

    def label(self, path: Loc) -> str:
        for n in range(len(path), -1, -1):
            label = self.origins.get(tuple(path[:n]))
            if label:
                return label
        return self.origins.get((), "")

    def line(self, path: Loc, message: str) -> str:
        where = format_path(path)
        return f"{self.label(path)}: {where}: {message}" if where else f"{self.label(path)}: {message}"


# -- interpolation --------------------------------------------------------------------------

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESOLVER = re.compile(r"[A-Za-z_][\w-]*:")
_SECRET_ENV = re.compile(r"token|password|passwd|secret|credential|key", re.I)


class _Problem(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Failed(Exception):
    """A leaf that could not be resolved (its problem is already reported)."""


class _Interpolator:
    def __init__(self, doc: _Doc) -> None:
        self.doc = doc
        self.done: dict[Loc, Any] = {}
        self.failed: set[Loc] = set()
        self.stack: list[Loc] = []
        self.problems: list[str] = []
        self.env_secrets: set[str] = set()
        self.via: dict[Loc, tuple[str, ...]] = {}  # leaf → what its value came through
        self._refs: list[list[str]] = []  # the references seen by each leaf being resolved

    def run(self) -> Any:
        return self._value(self.doc.data, (), top=True)

    def _value(self, node: Any, path: Loc, top: bool = False) -> Any:
        if isinstance(node, str):
            if not top:
                return self._leaf(node, path)
            try:
                return self._leaf(node, path)
            except _Failed:
                return None
        if isinstance(node, dict):
            return {k: self._value(v, (*path, k), top) for k, v in node.items()}
        if isinstance(node, list):
            return [self._value(v, (*path, i), top) for i, v in enumerate(node)]
        return node

    def _leaf(self, text: str, path: Loc) -> Any:
        if path in self.done:
            return self.done[path]
        if path in self.failed:
            raise _Failed
        if path in self.stack:
            chain = [*self.stack[self.stack.index(path) :], path]
            self.problems.append(
                self.doc.line(path, "reference cycle: " + " -> ".join(map(format_path, chain)))
            )
            raise _Failed
        self.stack.append(path)
        self._refs.append([])
        try:
            value = self._string(text, path)
        except _Problem as exc:
            self.failed.add(path)
            self.problems.append(self.doc.line(path, exc.message))
            raise _Failed from None
        except _Failed:
            self.failed.add(path)
            raise
        finally:
            self.stack.pop()
            refs = self._refs.pop()
        if refs:
            self.via[path] = tuple(dict.fromkeys(refs))
        self.done[path] = value
        return value

    def _saw(self, *refs: str) -> None:
        if self._refs:
            self._refs[-1].extend(refs)

    def _string(self, text: str, path: Loc) -> Any:
        if "${" not in text:
            return text
        parts = _split(text)
        if len(parts) == 1 and isinstance(parts[0], _Expr):
            return self._expr(parts[0].text, path)
        out: list[str] = []
        for part in parts:
            if not isinstance(part, _Expr):
                out.append(part)
                continue
            value = self._expr(part.text, path)
            if isinstance(value, dict | list):
                raise _Problem(f"${{{part.text}}} is {kind_of(value)}: it cannot be part of a string")
            if value is None:
                raise _Problem(f"${{{part.text}}} is null: it cannot be part of a string")
            out.append(("true" if value else "false") if isinstance(value, bool) else str(value))
        return "".join(out)

    def _expr(self, expr: str, path: Loc) -> Any:
        e = expr.strip()
        if e.startswith("env:"):
            name, sep, default = e[4:].partition(":-")
            if not _ENV_NAME.fullmatch(name):
                raise _Problem(f"${{{expr}}}: expected ${{env:NAME}} or ${{env:NAME:-default}}")
            value = os.environ.get(name)
            self._saw(f"${name}" if value else f"${name} (unset: the default)")
            if value is None or (sep and value == ""):
                if not sep:
                    raise _Problem(
                        f"environment variable {name} is not set (or give a default: ${{env:{name}:-...}})"
                    )
                return self._string(default, path)
            if _SECRET_ENV.search(name):
                self.env_secrets.add(value)
            return value
        if _RESOLVER.match(e):
            raise _Problem(f"${{{expr}}}: unknown resolver (expected ${{env:NAME}} or ${{key.path}})")
        try:
            ref = parse_path(e)
        except ValueError:
            raise _Problem(f"${{{expr}}}: not a key path") from None
        return self._lookup(ref, expr)

    def _lookup(self, ref: Loc, expr: str) -> Any:
        node: Any = self.doc.data
        walked: Loc = ()
        for part in ref:
            if isinstance(node, str):
                node = self._leaf(node, walked)
            in_mapping = isinstance(node, dict) and part in node
            in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
            if not (in_mapping or in_list):
                raise _Problem(
                    f"${{{expr}}}: no key {format_path((*walked, part))} in the job or its profile"
                )
            node = node[part]
            walked = (*walked, part)
        value = self._value(node, walked)
        self._saw(f"{format_path(walked)} ({self.doc.label(walked)})", *self.via.get(walked, ()))
        return value


class _Expr:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _split(text: str) -> list[str | _Expr]:
    """Literal text and ``${...}`` expressions (nested braces allowed, ``$${`` = literal)."""
    parts: list[str | _Expr] = []
    buf: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("$${", i):
            buf.append("${")
            i += 3
            continue
        if text.startswith("${", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("${", j):
                    depth += 1
                    j += 2
                    continue
                if text[j] == "}":
                    depth -= 1
                j += 1
            if depth:
                raise _Problem(f"unclosed ${{ in {show(text)}")
            if buf:
                parts.append("".join(buf))
                buf = []
            parts.append(_Expr(text[i + 2 : j - 1]))
            i = j
            continue
        buf.append(text[i])
        i += 1
    if buf:
        parts.append("".join(buf))
    return parts


def _profile_defaults(data: dict[Any, Any], doc: _Doc, via: dict[Loc, tuple[str, ...]] | None = None) -> None:
    """Each profile section ``<kind>:`` (:data:`PROFILE_KINDS`) as defaults of the job's
    ``source.<kind>`` and ``sink.<kind>``: a key the section lacks is taken, and a mapping it has
    (``client:``) takes the keys it lacks."""
    for kind in PROFILE_KINDS:
        defaults = data.get(kind)
        if not isinstance(defaults, dict):
            continue
        for side in ("source", "sink"):
            section = data.get(side)
            node = section.get(kind) if isinstance(section, dict) else None
            if isinstance(node, dict):
                _defaults(node, defaults, (side, kind), (kind,), doc, via)


def _defaults(
    node: dict[Any, Any],
    defaults: dict[Any, Any],
    at: Loc,
    came: Loc,
    doc: _Doc,
    via: dict[Loc, tuple[str, ...]] | None,
    depth: int = 0,
) -> None:
    for key, value in defaults.items():
        here, there = (*at, key), (*came, key)
        if isinstance(value, dict) and depth == 0:
            if not value:
                continue
            if node.get(key) is None:
                node[key] = {}
                doc.origins[here] = doc.label(there)
            if isinstance(node[key], dict):
                _defaults(node[key], value, here, there, doc, via, 1)
        elif key not in node and (value is not None or depth):
            node[key] = copy.deepcopy(value)
            doc.origins[here] = doc.label(there)
            if via is not None and depth == 0:
                via[here] = (f"{format_path(there)} ({doc.label(there)})", *via.get(there, ()))


# -- validation errors ----------------------------------------------------------------------


def _unwrap(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            if arg is not type(None):
                return _unwrap(arg)
    return annotation


def _type_at(loc: Loc) -> Any:
    """The model (or container type) that validates the value at ``loc``."""
    t: Any = Job
    for part in loc:
        if isclass(t) and issubclass(t, BaseModel):
            if isinstance(part, int):  # a list of the model (transform's steps): one of them
                continue
            fields = {(f.alias or name): f for name, f in t.model_fields.items()}
            if part not in fields:
                return None
            t = _unwrap(fields[part].annotation)
        elif get_origin(t) is dict:
            t = _unwrap(get_args(t)[1])
        elif get_origin(t) is list:
            t = _unwrap(get_args(t)[0])
        else:
            return None
    return t


def _unknown_key(loc: Loc) -> str:
    parent = _type_at(loc[:-1])
    if not (isclass(parent) and issubclass(parent, BaseModel)):
        return "unknown key"
    known = [f.alias or name for name, f in parent.model_fields.items()]
    if issubclass(parent, OptionsModel) and parent.SIDE:  # another connector's name for an option
        job_keys = {spark: name for name, spark in parent.spark_names().items()}
        advice = job_key_hint(str(loc[-1]), parent.SIDE, job_keys)
        if advice is not None:
            return f"unknown key: {advice}"
    hint = did_you_mean(str(loc[-1]), known)
    if hint:
        return f"unknown key{hint}"
    return f"unknown key (expected one of: {', '.join(known)})"


def _env_names(via: tuple[str, ...]) -> list[str]:
    """The environment variables a value came through (``$NAME`` in its ``via`` chain)."""
    return [ref.split(" ", 1)[0] for ref in via if ref.startswith("$")]


def _message(err: Mapping[str, Any], loc: Loc, via: tuple[str, ...] = ()) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    # a value from the environment is named by its variable, never echoed, nor hinted at
    from_env = _env_names(via)
    secret = bool(from_env) or any(is_secret_key(p) for p in loc)
    if from_env:
        got = f", got the value of {' ← '.join(from_env)}"
    else:
        got = "" if secret else f", got {show(value)}"
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return _unknown_key(loc)
    if kind == "string_type":
        return f"expected a string, got {kind_of(value)}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"expected an integer{got}"
    if kind in ("float_type", "float_parsing"):
        return f"expected a number{got}"
    if kind in ("bool_type", "bool_parsing"):
        return f"expected true or false{got}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a mapping, got {kind_of(value)}"
    if kind == "list_type":
        return f"expected a list, got {kind_of(value)}"
    if kind == "too_short":
        return "must not be empty"
    if kind == "greater_than_equal":
        return f"must be >= {ctx.get('ge')}{got}"
    if kind == "greater_than":
        return f"must be > {ctx.get('gt')}{got}"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        wanted = choices[0] if len(choices) == 1 else "one of " + ", ".join(choices)
        hint = ""
        if isinstance(value, str) and not secret:
            hint = did_you_mean(value, choices)
        return f"expected {wanted}{got}{hint}"
    return str(err.get("msg", "invalid")).split("\n")[0]


def _validation_lines(
    exc: ValidationError, doc: _Doc, via: Mapping[Loc, tuple[str, ...]] | None = None
) -> list[str]:
    lines: list[str] = []
    for err in exc.errors():
        loc: Loc = tuple(p for p in err["loc"] if p not in UNION_TAGS)
        found = (err.get("ctx") or {}).get("problems") if err["type"] == "job" else None
        if found:
            for where, message in found:
                at = (*loc, *where)
                lines.append(_unechoed(doc.line(at, message), (via or {}).get(at, ())))
        else:
            came = (via or {}).get(loc, ())
            lines.append(_unechoed(doc.line(loc, _message(err, loc, came)), came))
    return list(dict.fromkeys(lines))


def _unechoed(line: str, via: tuple[str, ...]) -> str:
    """``line`` with every environment variable's value that the key's value came through replaced
    by the variable's name: a rejected value from the environment is never echoed (issue 29)."""
    for name in _env_names(via):
        value = os.environ.get(name[1:])
        if value:
            line = line.replace(show(value), f"<the value of {name}>")
            if len(value) >= 4:  # inside a longer value (pulsar://${env:HOST}:6650); a short one stays
                line = line.replace(value, f"<{name}>")
    return line


def _scrub(lines: Iterable[str], secrets: Iterable[str]) -> list[str]:
    known = list(secrets)
    return [mask(line, known) for line in lines]


# -- loading --------------------------------------------------------------------------------


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it is below it (for messages)."""
    try:
        rel = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return str(path)
    return str(rel)


def _profile_path(env: str, conf_dir: Path) -> Path:
    if env.endswith((".yaml", ".yml")) or os.sep in env or "/" in env:
        return Path(env)
    path = conf_dir / f"{env}.yaml"
    if not conf_dir.is_dir():
        raise JobError(
            f"--env: no profile {env!r}: there is no {display_path(conf_dir)} directory (the profiles); "
            f"create {display_path(path)} with {_PROFILE_WORDS} (docs/jobs.md: Profiles and merge "
            "order), run from the project's directory or set PIPELINES_PROJECT_DIR, or give --conf-dir"
        )
    if not path.exists():
        found = sorted(p.stem for p in conf_dir.glob("*.yaml"))
        listed = ", ".join(found) if found else "none"
        raise JobError(f"--env: no profile {env!r} in {display_path(conf_dir)} (profiles: {listed})")
    return path


def load_job(
    path: str | os.PathLike[str],
    env: str | None = "local",
    overrides: Sequence[str] = (),
    conf_dir: str | os.PathLike[str] | None = None,
    *,
    check_imports: bool = True,
) -> Job:
    """Load, merge, interpolate and validate a job; see the module docstring for the rules.

    ``path`` is the job file (a relative path not found from the working directory is
    looked up under :func:`project_root`); ``env`` names the profile ``<conf_dir>/<env>.yaml``
    (or is a path to one; None: no profile); ``conf_dir`` defaults to
    ``<project root>/conf``; ``overrides`` are ``key.path=value`` strings. With
    ``check_imports`` the ``transform.python`` function is located (:func:`locate_function`:
    its module is found and parsed, never imported — a job file's code runs only at ``run``).

    Raises :class:`~pipelines.errors.JobError` with one line per problem.
    """
    label = os.fspath(path)
    root = project_root()
    job_path = Path(path)
    if not job_path.exists() and not job_path.is_absolute() and (root / job_path).exists():
        job_path = root / job_path
    if not job_path.exists():
        raise JobError(f"{label}: no such file")
    conf = Path(conf_dir) if conf_dir is not None else root / "conf"

    doc = _Doc()
    profile_label: str | None = None
    if env is not None:
        profile_path = _profile_path(env, conf)
        profile_label = display_path(profile_path)
        profile = _read_yaml(profile_path, profile_label)
        if profile is None:
            profile = {}
        if not isinstance(profile, dict):
            raise JobError(
                f"{profile_label}: expected a mapping ({', '.join(PROFILE_KEYS)}), got {kind_of(profile)}"
            )
        bad = [k for k in profile if k not in PROFILE_KEYS]
        if bad:
            raise JobError(
                [f"{profile_label}: {k}: not a profile key (a profile sets {_PROFILE_WORDS})" for k in bad]
            )
        doc.merge(profile, profile_label)

    data = _read_yaml(job_path, label)
    if data is None:
        raise JobError(f"{label}: empty file (expected a job: name, source, sink, ...)")
    if not isinstance(data, dict):
        raise JobError(f"{label}: expected a mapping (name, source, sink, ...), got {kind_of(data)}")
    doc.origins[()] = label
    doc.merge(data, label)
    for text in overrides:
        where, value = parse_override(text)
        layer: Any = value
        for part in reversed(where):
            layer = {part: layer}
        doc.merge(layer, OVERRIDE_LABEL)

    interp = _Interpolator(doc)
    resolved = interp.run()
    secrets = secret_values(resolved) | interp.env_secrets
    if interp.problems:
        raise JobError(_scrub(interp.problems, secrets))
    _profile_defaults(resolved, doc, interp.via)
    for kind in PROFILE_KINDS:  # applied above; only a Job field (pulsar:) stays to be validated
        if kind not in Job.model_fields and isinstance(resolved.get(kind), dict):
            del resolved[kind]

    try:
        job = Job.model_validate(resolved)
    except ValidationError as exc:
        raise JobError(_scrub(_validation_lines(exc, doc, interp.via), secrets)) from None

    secrets |= {v.get_secret_value() for v in job.spark.storage_options.values()}
    job._source_file = label
    job._env = env
    job._profile_file = profile_label
    job._root = root
    job._secrets = frozenset(s for s in secrets if len(s) >= 4)
    remember(job._secrets)  # whatever prints an error later masks them too
    job._via = {format_path(k): v for k, v in interp.via.items()}
    found: list[str] = []
    for n, (_, step) in enumerate(job.transform_steps()):
        at: Loc = ("transform",) if isinstance(job.transform, Transform) else ("transform", n)
        if check_imports and step.python is not None:
            try:
                locate_function(step.python, (root,))
            except ValueError as exc:
                found.append(doc.line((*at, "python"), str(exc)))
        found += [doc.line((*at, "sql", i), problem) for i, problem in sql_problems(step.sql or [])]
    if found:
        raise JobError(_scrub(found, secrets))
    return job


def _module_file(module: str, roots: Sequence[Path]) -> Path | None:
    """The source file of ``module`` under ``roots`` then ``sys.path``, found without importing."""

    rel = Path(*module.split("."))
    for base in [*roots, *(Path(p) for p in sys.path if p)]:
        for candidate in (base / rel.with_suffix(".py"), base / rel / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def locate_function(spec: str, roots: Sequence[Path] = ()) -> Path:
    """The file defining ``module:function``, checked without importing it (no code runs).

    The module's source is parsed and must define ``function`` at its top level (``def``,
    ``async def``, an assignment or an import of that name). Raises ValueError with a short
    message: no module, a syntax error, no such function.
    """

    module, _, name = spec.partition(":")
    path = _module_file(module, roots)
    if path is None:
        try:  # compiled or frozen modules: found by the import system, still not executed
            found = importlib.util.find_spec(module) if "." not in module else None
        except (ImportError, ValueError):
            found = None
        if found is not None:
            return Path(found.origin or module)
        raise ValueError(f"no module named {module!r}")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, OSError) as exc:
        raise ValueError(f"{display_path(path)} cannot be parsed: {exc}") from None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return path
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            literal = isinstance(node.value, ast.Constant | ast.List | ast.Dict | ast.Tuple | ast.Set)
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and not literal:
                return path
        if isinstance(node, ast.Import | ast.ImportFrom) and any(
            (a.asname or a.name.split(".")[0]) == name for a in node.names
        ):
            return path
    raise ValueError(f"module {module!r} has no function {name!r}")


def redacted(job: Job) -> dict[str, Any]:
    """The job as plain data for display: secrets (and values under secret-looking keys) masked."""
    result: dict[str, Any] = mask_data(
        job.model_dump(mode="json", by_alias=True, exclude_none=True), job._secrets
    )
    return result


def dump_yaml(data: Any) -> str:
    """``data`` as block YAML (for ``validate --show``)."""
    return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True))
