"""Option grammar shared by the ``pulsarwire`` source, sink and job files; client settings.

Spark hands a data source its options as a case-insensitive map of strings; a job file's
YAML values arrive typed. The value grammar lives here once: durations (``500ms``, ``30s``,
``15m``), publish times (milliseconds or ISO-8601), positions and offsets mappings
(``{"topic-partition": "ledger:entry:batch" | "earliest" | "latest"}``) for both, and
booleans and integers written as text (Spark options; typed YAML scalars are pydantic's). A
grammar function raises :class:`GrammarError` with a message that names no place; the caller
puts the place in front: :func:`option_value` (and ``opt_*``) raise
:class:`~pipelines.errors.OptionError` naming the Spark option, :mod:`pipelines.jobs.models`
reports ``file: key.path: message``.

:func:`client_settings` turns the connection part of a Spark option map into the keyword
arguments of :class:`pulsarwire.client.blocking.Client`; the names follow the Java client's
``ClientConfigurationData`` (``pulsar.client.operationTimeoutMs`` and so on), plus
``authToken`` / ``authTokenFile`` for token authentication, and the connector-style
``authPluginClassName`` + ``authParams`` (:mod:`pipelines.options.auth`: OAuth2, token, basic, TLS).
Secrets are never put into error messages. Everything here is picklable data, so executors
rebuild their own client from it. This module does not import Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from pipelines.options.auth import AuthSpec, parse_auth
from pipelines.errors import OptionError
from pipelines.state.positions import Position

T = TypeVar("T")
T_in = TypeVar("T_in")

CLIENT_PREFIX = "pulsar.client."


# -- messages ---------------------------------------------------------------------------------
def kind_of(value: object) -> str:
    """The YAML name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def show(value: object, limit: int = 80) -> str:
    """A short quoted rendering of a user value for a message."""
    if isinstance(value, dict | list):
        return kind_of(value)
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class GrammarError(ValueError):
    """A value does not follow its grammar. The callers turn it into their own error.

    ``problems`` are ``(key, message)`` pairs: ``key`` is ``()`` for the value itself and
    ``(topic-partition,)`` for one entry of an offsets mapping.
    """

    def __init__(self, message: str, problems: list[tuple[tuple[str, ...], str]] | None = None) -> None:
        super().__init__(message)
        self.problems = problems if problems is not None else [((), message)]


# -- the grammar --------------------------------------------------------------------------------
def boolean(value: str) -> bool:
    """``true``/``1``/``yes`` or ``false``/``0``/``no`` (any case). Raises GrammarError."""
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise GrammarError(f"expected true or false, got {show(value)}")


def one_of(value: str, allowed: tuple[str, ...]) -> str:
    """One of the words ``allowed`` (any case), lower-cased. Raises GrammarError."""
    word = value.strip().lower()
    if word not in allowed:
        raise GrammarError(f"expected {' or '.join(allowed)}, got {show(value)}")
    return word


def integer(value: str, minimum: int | None = None) -> int:
    """A decimal integer, at least ``minimum``. Raises GrammarError."""
    try:
        n = int(value.strip())
    except ValueError:
        raise GrammarError(f"expected an integer, got {show(value)}") from None
    if minimum is not None and n < minimum:
        raise GrammarError(f"must be >= {minimum}, got {n}")
    return n


_DURATION = re.compile(r"(?P<n>\d+)\s*(?P<unit>ms|s|m|min|h|d)?")
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(value: object) -> int:
    """``500ms``, ``30s``, ``15m``/``15min``, ``2h``, ``1d`` (a bare number is ms) → milliseconds.

    Raises GrammarError.
    """
    m = _DURATION.fullmatch(str(value).strip().lower())
    if not m:
        raise GrammarError(f"expected a duration such as 500ms, 30s, 15m, got {show(value)}")
    return int(m.group("n")) * _UNIT_MS[m.group("unit")]


_TIME_HELP = "expected milliseconds since the epoch or an ISO-8601 time"


def time_ms(value: object) -> int:
    """Milliseconds since the epoch from an integer (or its text) or an ISO-8601 time (naive = UTC).

    Raises GrammarError.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise GrammarError(f"{_TIME_HELP}, got {kind_of(value)}")
    if isinstance(value, int) or re.fullmatch(r"\s*-?\d+\s*", value):
        ms = int(value)
        if ms < 0:
            raise GrammarError(f"must be >= 0, got {ms}")
        return ms
    try:
        t = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise GrammarError(f"{_TIME_HELP}, got {show(value)}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


#: one partition's start or end: a position, or "earliest" / "latest"
Spec = str | Position

_POSITION_HELP = "expected 'ledger:entry:batch', earliest or latest"
_OFFSETS_HELP = "expected earliest, latest or a mapping of topic-partition to position"


def position_spec(value: object) -> Spec:
    """``"earliest"``/``-2``, ``"latest"``/``-1`` or ``"ledger:entry:batch"``. Raises GrammarError."""
    if not isinstance(value, bool):
        if value in (-2, "earliest"):
            return "earliest"
        if value in (-1, "latest"):
            return "latest"
    if isinstance(value, str):
        try:
            return Position.parse(value)
        except OptionError:
            pass
    raise GrammarError(f"{_POSITION_HELP}, got {show(value)}")


def offsets_spec(value: object) -> str | dict[str, Spec]:
    """``earliest`` | ``latest`` | a mapping (or its JSON text) of topic-partition → :func:`position_spec`.

    Raises GrammarError; a mapping's bad entries are all reported, each under its key.
    """
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("earliest", "latest"):
            return text.lower()
        if not text.startswith("{"):
            raise GrammarError(f"{_OFFSETS_HELP}, got {show(value)}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GrammarError(f"not valid JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(value, dict):
        raise GrammarError(f"expected a mapping of topic-partition to position, got {kind_of(value)}")
    if not value:
        raise GrammarError("expected a mapping of topic-partition to position, got an empty mapping")
    out: dict[str, Spec] = {}
    found: list[tuple[tuple[str, ...], str]] = []
    for k, v in value.items():
        try:
            out[str(k)] = position_spec(v)
        except GrammarError as exc:
            found.append(((str(k),), str(exc)))
    if found:
        raise GrammarError("; ".join(m for _, m in found), found)
    return out


# -- Spark options ------------------------------------------------------------------------------
def option_value(name: str, value: T_in, parse: Callable[[T_in], T]) -> T:
    """``parse(value)``, its GrammarError raised as an OptionError naming the option.

    A problem under a key names it as ``option[key]`` (the first one, when there are several).
    """
    try:
        return parse(value)
    except GrammarError as exc:
        key, message = exc.problems[0]
        raise OptionError(name + "".join(f"[{k}]" for k in key), message) from None


def opt_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    """The boolean option ``name`` (``default`` when absent). Raises OptionError."""
    value = options.get(name)
    return default if value is None else option_value(name, value, boolean)


def opt_choice(options: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str:
    """The option ``name``, one of the words ``allowed`` (the first when absent). Raises OptionError."""
    value = options.get(name)
    return allowed[0] if value is None else option_value(name, value, lambda v: one_of(v, allowed))


def opt_int(
    options: Mapping[str, str], name: str, default: int | None, minimum: int | None = None
) -> int | None:
    """The integer option ``name`` (``default`` when absent). Raises OptionError."""
    value = options.get(name)
    return default if value is None else option_value(name, value, lambda v: integer(v, minimum))


#: pulsar.client.<key> -> (Client keyword, converter)
_CLIENT_KEYS: dict[str, tuple[str, str]] = {
    "operationtimeoutms": ("operation_timeout_seconds", "ms"),
    "connectiontimeoutms": ("connection_timeout_seconds", "ms"),
    "keepaliveintervalseconds": ("keepalive_interval_seconds", "float"),
    "tlstrustcertsfilepath": ("tls_trust_certs_file_path", "str"),
    "tlsallowinsecureconnection": ("tls_allow_insecure_connection", "bool"),
    "tlshostnameverificationenable": ("tls_validate_hostname", "bool"),
    "tlscertificatefilepath": ("tls_certificate_file_path", "str"),
    "tlskeyfilepath": ("tls_private_key_file_path", "str"),
    "authtoken": ("auth_token", "secret"),
    "authtokenfile": ("auth_token_file", "str"),
    "authpluginclassname": ("auth_plugin", "auth"),
    "authparams": ("auth_params", "auth"),
}


@dataclass(frozen=True)
class ClientSettings:
    """How to reach the cluster; rebuilt into a Client on the driver and on each executor."""

    service_url: str
    options: dict[str, Any] = field(default_factory=dict)
    auth_token: str | None = field(default=None, repr=False)
    auth_token_file: str | None = None
    auth: AuthSpec | None = field(default=None, repr=False)

    def client(self) -> Any:
        """A new blocking :class:`pulsarwire.client.blocking.Client` (the caller closes it)."""
        from pulsarwire.client.auth import AuthenticationToken
        from pulsarwire.client.blocking import Client

        kw = dict(self.options)
        if self.auth_token is not None:
            kw["authentication"] = AuthenticationToken(self.auth_token)
        elif self.auth_token_file is not None:
            kw["authentication"] = AuthenticationToken("file:" + self.auth_token_file)
        elif self.auth is not None:
            provider, extra = self.auth.build()
            if provider is not None:
                kw["authentication"] = provider
            kw.update(extra)
        return Client(self.service_url, **kw)


def client_settings(options: Mapping[str, str]) -> ClientSettings:
    """Read ``service.url`` and every ``pulsar.client.*`` option; unknown client keys are errors."""
    url = options.get("service.url")
    if not url:
        raise OptionError("service.url", "required (e.g. pulsar://localhost:6650)")
    if not url.startswith(("pulsar://", "pulsar+ssl://")):
        raise OptionError("service.url", f"expected pulsar:// or pulsar+ssl://, got {url!r}")
    kw: dict[str, Any] = {}
    token: str | None = None
    token_file: str | None = None
    plugin: dict[str, str] = {}
    for name, value in options.items():
        if not name.lower().startswith(CLIENT_PREFIX):
            continue
        key = name[len(CLIENT_PREFIX) :].lower()
        if key not in _CLIENT_KEYS:
            known = ", ".join(sorted(CLIENT_PREFIX + k for k in _CLIENT_KEYS))
            raise OptionError(name, f"unknown client option (known: {known})")
        target, kind = _CLIENT_KEYS[key]
        if kind == "secret":
            token = value
        elif kind == "auth":
            plugin[target] = value
        elif target == "auth_token_file":
            token_file = value
        elif kind == "ms":
            kw[target] = option_value(name, value, lambda v: integer(v, 1)) / 1000
        elif kind == "float":
            try:
                kw[target] = float(value)
            except ValueError:
                raise OptionError(name, f"expected a number, got {value!r}") from None
        elif kind == "bool":
            kw[target] = option_value(name, value, boolean)
        else:
            kw[target] = value
    if token is not None and token_file is not None:
        raise OptionError(CLIENT_PREFIX + "authToken", "give authToken or authTokenFile, not both")
    auth = parse_auth(plugin.get("auth_plugin"), plugin.get("auth_params"))
    if auth is not None and (token is not None or token_file is not None):
        raise OptionError(
            CLIENT_PREFIX + "authPluginClassName",
            "give authPluginClassName or authToken/authTokenFile, not both",
        )
    return ClientSettings(url, kw, token, token_file, auth)
