"""A generic Kafka message encoder/decoder driven by the definitions in ``definitions.py``.

A message body is a ``dict`` keyed by the snake_case field names of the definition; arrays of
structs are lists of such dicts, ``{}`` structs are dicts, ``records`` and ``bytes`` are
``bytes``, ``uuid`` is 16 ``bytes``. For each (message, version) the field list is compiled
once into reader and writer closures: a field is present when the version is in its
``versions``; it is nullable in its ``nullable_versions``; it is a tagged field in its
``tagged_versions``; strings, bytes and arrays take the compact form in flexible versions, and
every struct then ends with its tagged fields::

    tagged_fields := count:uvarint (tag:uvarint size:uvarint value[size])*   -- tags ascending

Decoding keeps unknown tagged fields under the key ``_unknown_tags`` (tag -> raw bytes) so a
message re-encodes byte for byte; a known tagged field is written only when its value differs
from its default, as Kafka does. Encoding fills absent keys with the field's default, ignores
fields of other versions and refuses a key that is no field of the struct in any version (a
typo must not silently become a default).

Headers (``RequestHeader`` v0-v2, ``ResponseHeader`` v0-v1) are messages like the others; the
header version follows from whether the API version is flexible (ApiVersions responses always
use header v0, as in Kafka). :func:`decode_request` / :func:`encode_request` and
:func:`decode_response` / :func:`encode_response` work on one frame's payload (the bytes after
the 4-byte size, see ``frames.py``) and check that every byte was consumed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pulsarwire.kafka.codec import primitives as p
from pulsarwire.kafka.codec.definitions import MESSAGES
from pulsarwire.kafka.errors import (
    KafkaEncodeError,
    KafkaLengthError,
    KafkaTaggedFieldError,
    KafkaUnknownApiError,
)

Body = dict[str, Any]
Read = Callable[[p.Reader], Any]
Write = Callable[[bytearray, Any], None]

UNKNOWN_TAGS = "_unknown_tags"

_FIXED: dict[str, struct.Struct] = {
    "int8": p.INT8,
    "int16": p.INT16,
    "uint16": p.UINT16,
    "int32": p.INT32,
    "uint32": p.UINT32,
    "int64": p.INT64,
    "float64": p.FLOAT64,
}

# api_key -> (name, min_version, max_version, flexible_from)
API_NAMES: dict[int, str] = {}
for _name, (_key, *_rest) in MESSAGES.items():
    if _key >= 0 and _name.endswith("Request"):
        API_NAMES[_key] = _name[: -len("Request")]
API_KEYS: dict[str, int] = {name: key for key, name in API_NAMES.items()}


def _in(version: int, versions: tuple[int, int] | None) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


def _scalar(ftype: str, nullable: bool, flexible: bool, what: str) -> tuple[Read, Write]:
    fixed = _FIXED.get(ftype)
    if fixed is not None:
        layout = fixed

        def read_fixed(r: p.Reader) -> Any:
            return r.unpack(layout, what)[0]

        def write_fixed(out: bytearray, v: Any) -> None:
            try:
                out += layout.pack(v)
            except struct.error as exc:
                raise KafkaEncodeError(f"{what}: {v!r} does not fit {ftype} ({exc})") from None

        return read_fixed, write_fixed
    if ftype == "bool":

        def read_bool(r: p.Reader) -> Any:
            return r.integer(p.INT8, what) != 0

        def write_bool(out: bytearray, v: Any) -> None:
            out.append(1 if v else 0)

        return read_bool, write_bool
    if ftype == "uuid":

        def read_uuid(r: p.Reader) -> Any:
            return r.take(16, what)

        def write_uuid(out: bytearray, v: Any) -> None:
            if not isinstance(v, bytes | bytearray) or len(v) != 16:
                raise KafkaEncodeError(f"{what}: a uuid is 16 bytes, got {v!r}")
            out += v

        return read_uuid, write_uuid
    if ftype == "string":

        def read_string(r: p.Reader) -> Any:
            n = r.length(flexible, False, what)
            if n == -1:
                if not nullable:
                    raise KafkaLengthError(f"{what}: null where the string is not nullable")
                return None
            return r.text(n, what)

        def write_string(out: bytearray, v: Any) -> None:
            if v is None:
                if not nullable:
                    raise KafkaEncodeError(f"{what}: null where the string is not nullable")
                p.write_length(out, -1, flexible, False)
                return
            if not isinstance(v, str):
                raise KafkaEncodeError(f"{what}: expected a str, got {type(v).__name__}")
            raw = v.encode("utf-8")
            p.write_length(out, len(raw), flexible, False)
            out += raw

        return read_string, write_string
    if ftype in ("bytes", "records"):

        def read_bytes(r: p.Reader) -> Any:
            n = r.length(flexible, True, what)
            if n == -1:
                if not nullable:
                    raise KafkaLengthError(f"{what}: null where the bytes are not nullable")
                return None
            return r.take(n, what)

        def write_bytes(out: bytearray, v: Any) -> None:
            if v is None:
                if not nullable:
                    raise KafkaEncodeError(f"{what}: null where the bytes are not nullable")
                p.write_length(out, -1, flexible, True)
                return
            if not isinstance(v, bytes | bytearray | memoryview):
                raise KafkaEncodeError(f"{what}: expected bytes, got {type(v).__name__}")
            p.write_length(out, len(v), flexible, True)
            out += v

        return read_bytes, write_bytes
    raise KafkaEncodeError(f"{what}: unknown type {ftype}")  # a definitions bug, never peer input


def _array(
    item_read: Read, item_write: Write, nullable: bool, flexible: bool, what: str
) -> tuple[Read, Write]:
    def read_array(r: p.Reader) -> Any:
        n = r.length(flexible, True, what)  # n <= bytes left: the loop is bounded by the input
        if n == -1:
            if not nullable:
                raise KafkaLengthError(f"{what}: null where the array is not nullable")
            return None
        return [item_read(r) for _ in range(n)]

    def write_array(out: bytearray, v: Any) -> None:
        if v is None:
            if not nullable:
                raise KafkaEncodeError(f"{what}: null where the array is not nullable")
            p.write_length(out, -1, flexible, True)
            return
        p.write_length(out, len(v), flexible, True)
        for item in v:
            item_write(out, item)

    return read_array, write_array


@dataclass(slots=True)
class _Struct:
    """The compiled fields of one struct at one version."""

    regular: list[tuple[str, Read, Write, Any]] = field(default_factory=list)
    tagged: dict[int, tuple[str, Read, Write, Any]] = field(default_factory=dict)
    absent: list[tuple[str, Any]] = field(default_factory=list)  # fields of other versions
    flexible: bool = False


def _is_default(value: Any, default: Any) -> bool:
    if isinstance(value, list):
        return default == () and not value
    if default is None or value is None:
        return value is default
    return type(value) is type(default) and bool(value == default)


def _field(f: tuple[Any, ...], version: int, flexible: bool, path: str) -> tuple[Read, Write]:
    name, ftype, _, nullable_v, _, _, _, children, flex_override = f
    nullable = _in(version, nullable_v)
    flex = flexible and flex_override is not False
    what = f"{path}.{name}"
    if ftype == "[]":
        sub = _compile(children, version, flexible, what)
        return _array(sub.read, sub.write, nullable, flex, what)
    if ftype == "{}":
        sub = _compile(children, version, flexible, what)
        if not nullable:
            return sub.read, sub.write

        def read_opt(r: p.Reader) -> Any:
            return None if r.integer(p.INT8, what) < 0 else sub.read(r)

        def write_opt(out: bytearray, v: Any) -> None:
            if v is None:
                out += p.INT8.pack(-1)
            else:
                out += p.INT8.pack(1)
                sub.write(out, v)

        return read_opt, write_opt
    if ftype.startswith("[]"):
        item_read, item_write = _scalar(ftype[2:], False, flex, what)
        return _array(item_read, item_write, nullable, flex, what)
    return _scalar(ftype, nullable, flex, what)


class _Compiled:
    __slots__ = ("names", "path", "spec")

    def __init__(self, spec: _Struct, path: str) -> None:
        self.spec = spec
        self.path = path
        self.names = frozenset(
            [n for n, *_ in spec.regular] + [t[0] for t in spec.tagged.values()] + [n for n, _ in spec.absent]
        ) | {UNKNOWN_TAGS}

    def read(self, r: p.Reader) -> Body:
        spec = self.spec
        body: Body = {}
        for name, read, _, _ in spec.regular:
            body[name] = read(r)
        if not spec.flexible:
            for name, default in spec.absent:
                body[name] = _fresh(default)
            return body
        for name, _, _, default in spec.tagged.values():
            body[name] = _fresh(default)
        for name, default in spec.absent:
            body[name] = _fresh(default)
        count = r.uvarint(f"{self.path} tagged field count")
        last = -1
        unknown: dict[int, bytes] = {}
        for _ in range(count):
            tag = r.uvarint(f"{self.path} tag")
            if tag <= last:
                raise KafkaTaggedFieldError(f"{self.path}: tag {tag} after tag {last} (must ascend)")
            last = tag
            size = r.length(True, True, f"{self.path} tag {tag} size") + 1
            if size < 0:
                raise KafkaTaggedFieldError(f"{self.path}: tag {tag} has no size")
            known = spec.tagged.get(tag)
            if known is None:
                unknown[tag] = r.take(size, f"{self.path} tag {tag}")
                continue
            sub = p.Reader(r.buf, r.pos, r.pos + size)
            body[known[0]] = known[1](sub)
            if sub.pos != sub.end:
                raise KafkaTaggedFieldError(
                    f"{self.path}.{known[0]}: {sub.end - sub.pos} bytes left in tag {tag}"
                )
            r.pos = sub.end
        if unknown:
            body[UNKNOWN_TAGS] = unknown
        return body

    def write(self, out: bytearray, body: Any) -> None:
        if not isinstance(body, dict):
            raise KafkaEncodeError(f"{self.path}: expected a dict, got {type(body).__name__}")
        if not self.names.issuperset(body):
            strangers = sorted(map(str, set(body) - self.names))
            raise KafkaEncodeError(f"{self.path}: no field named {', '.join(strangers)}")
        spec = self.spec
        for name, _, write, default in spec.regular:
            write(out, body[name] if name in body else _fresh(default))
        if not spec.flexible:
            return
        items: list[tuple[int, bytes]] = []
        for tag, (name, _, write, default) in spec.tagged.items():
            value = body.get(name, default)
            if _is_default(value, default):
                continue
            buf = bytearray()
            write(buf, value)
            items.append((tag, bytes(buf)))
        unknown = body.get(UNKNOWN_TAGS)
        if unknown:
            items.extend(unknown.items())
        items.sort()
        p.write_uvarint(out, len(items))
        for tag, raw in items:
            p.write_uvarint(out, tag)
            p.write_uvarint(out, len(raw))
            out += raw


def _fresh(default: Any) -> Any:
    return [] if default == () else default


_CACHE: dict[tuple[int, int, bool], _Compiled] = {}


def _compile(fields: tuple[Any, ...], version: int, flexible: bool, path: str) -> _Compiled:
    key = (id(fields), version, flexible)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    spec = _Struct(flexible=flexible)
    for f in fields:
        name, _, versions, _, tag, tagged_v, default, _, _ = f
        if not _in(version, versions):
            spec.absent.append((name, default))
            continue
        read, write = _field(f, version, flexible, path)
        if flexible and tag is not None and _in(version, tagged_v):
            spec.tagged[tag] = (name, read, write, default)
        else:
            spec.regular.append((name, read, write, default))
    compiled = _Compiled(spec, path)
    _CACHE[key] = compiled
    return compiled


def schema(name: str, version: int) -> _Compiled:
    """The compiled codec of message ``name`` (e.g. ``"FetchRequest"``) at ``version``."""
    try:
        _, lo, hi, flexible_from, fields = MESSAGES[name]
    except KeyError:
        raise KafkaUnknownApiError(f"no message named {name}") from None
    if not lo <= version <= hi:
        raise KafkaUnknownApiError(f"{name} has versions {lo}-{hi}, not {version}")
    flexible = flexible_from is not None and version >= flexible_from
    return _compile(fields, version, flexible, f"{name} v{version}")


def versions(api_key: int) -> tuple[int, int]:
    """The (min, max) versions we define for ``api_key``."""
    name = API_NAMES.get(api_key)
    if name is None:
        raise KafkaUnknownApiError(f"unknown API key {api_key}")
    _, lo, hi, _, _ = MESSAGES[f"{name}Request"]
    return lo, hi


def is_flexible(api_key: int, version: int) -> bool:
    name = API_NAMES.get(api_key)
    if name is None:
        raise KafkaUnknownApiError(f"unknown API key {api_key}")
    flexible_from = MESSAGES[f"{name}Request"][3]
    return flexible_from is not None and version >= flexible_from


def request_header_version(api_key: int, version: int) -> int:
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    if api_key == API_KEYS["ApiVersions"]:
        return 0  # so a client can always read the answer, whatever version it asked for
    return 1 if is_flexible(api_key, version) else 0


def encode_body(name: str, version: int, body: Body) -> bytes:
    out = bytearray()
    schema(name, version).write(out, body)
    return bytes(out)


def decode_body(name: str, version: int, data: p.Buffer) -> Body:
    r = p.Reader(data)
    body = schema(name, version).read(r)
    r.done(f"{name} v{version}")
    return body


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded request: its header fields and its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Body
    header_tags: dict[int, bytes] | None = None

    @property
    def api_name(self) -> str:
        return API_NAMES[self.api_key]


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: Body,
    header_tags: dict[int, bytes] | None = None,
) -> bytes:
    """The bytes of one request (header + body, without the frame's size prefix)."""
    name = API_NAMES.get(api_key)
    if name is None:
        raise KafkaEncodeError(f"unknown API key {api_key}")
    out = bytearray()
    header: Body = {
        "request_api_key": api_key,
        "request_api_version": api_version,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    if header_tags:
        header[UNKNOWN_TAGS] = header_tags
    schema("RequestHeader", request_header_version(api_key, api_version)).write(out, header)
    schema(f"{name}Request", api_version).write(out, body)
    return bytes(out)


def decode_request(data: p.Buffer, *, strict: bool = True) -> Request:
    """Decode one request frame's payload; every byte must be consumed unless ``strict`` is
    False (a broker: Apache Kafka ignores bytes after a request's last field, and librdkafka
    2.x sends three extra after its all-topics Metadata v12 request).

    Raises KafkaUnknownApiError for an API key or version we do not define, and the other
    KafkaProtocolError subclasses for malformed bytes.
    """
    r = p.Reader(data)
    api_key = r.integer(p.INT16, "request api key")
    api_version = r.integer(p.INT16, "request api version")
    correlation_id = r.integer(p.INT32, "request correlation id") if r.remaining >= 4 else None
    r.pos = 0
    name = API_NAMES.get(api_key)
    lo, hi = versions(api_key) if name is not None else (0, -1)
    if not lo <= api_version <= hi:
        what = (
            f"unknown API key {api_key}"
            if name is None
            else f"{name}Request v{api_version} (we have {lo}-{hi})"
        )
        raise KafkaUnknownApiError(
            what, api_key=api_key, api_version=api_version, correlation_id=correlation_id
        )
    assert name is not None
    body_schema = schema(f"{name}Request", api_version)
    header = schema("RequestHeader", request_header_version(api_key, api_version)).read(r)
    body = body_schema.read(r)
    if strict:
        r.done(f"{name}Request v{api_version}")
    return Request(
        api_key, api_version, header["correlation_id"], header["client_id"], body, header.get(UNKNOWN_TAGS)
    )


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Body) -> bytes:
    """The bytes of one response (header + body, without the size prefix)."""
    name = API_NAMES.get(api_key)
    if name is None:
        raise KafkaEncodeError(f"unknown API key {api_key}")
    out = bytearray()
    header_version = response_header_version(api_key, api_version)
    schema("ResponseHeader", header_version).write(out, {"correlation_id": correlation_id})
    schema(f"{name}Response", api_version).write(out, body)
    return bytes(out)


def response_correlation_id(data: p.Buffer) -> int:
    """The correlation id a response frame starts with (to find which request it answers)."""
    return p.Reader(data).integer(p.INT32, "response correlation id")


def decode_response(api_key: int, api_version: int, data: p.Buffer) -> tuple[int, Body]:
    """Decode a response to a request of ``api_key``/``api_version``: (correlation id, body)."""
    name = API_NAMES.get(api_key)
    if name is None:
        raise KafkaUnknownApiError(f"unknown API key {api_key}")
    body_schema = schema(f"{name}Response", api_version)
    r = p.Reader(data)
    header = schema("ResponseHeader", response_header_version(api_key, api_version)).read(r)
    body = body_schema.read(r)
    r.done(f"{name}Response v{api_version}")
    return header["correlation_id"], body
