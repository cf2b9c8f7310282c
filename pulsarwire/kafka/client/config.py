"""The client's configuration: a dict keyed by the Java client's / librdkafka's property names.

:func:`parse` checks a user's dict against :data:`PROPERTIES` for one role (producer, consumer,
admin) and returns a :class:`Config` of typed values, defaults filled in. An unknown key raises
:class:`~pulsarwire.kafka.client.errors.KafkaConfigError` naming it and the closest known name
(``difflib``); a value of the wrong type or out of range names the key and what it takes; a key
of a feature we do not have yet (SASL, TLS, transactions, ...) is refused, never ignored, so a
program never runs with a setting it believes is applied. Values are taken as confluent-kafka
takes them: booleans and numbers may be given as strings (``"true"``, ``"5"``), ``acks`` may be
``"all"``, enums are case-insensitive, aliases (``queue.buffering.max.ms`` for ``linger.ms``,
``compression.codec`` for ``compression.type``) map to one name.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pulsarwire.kafka.client.errors import KafkaConfigError

COMMON, PRODUCER, CONSUMER = "common", "producer", "consumer"


@dataclass(frozen=True, slots=True)
class Prop:
    kind: str  # str int float bool enum callable any
    default: Any
    role: str = COMMON
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()


_I32 = 2**31 - 1
PROPERTIES: dict[str, Prop] = {
    "bootstrap.servers": Prop("str", None),
    "client.id": Prop("str", "pulsarwire"),
    "security.protocol": Prop("enum", "plaintext", choices=("plaintext",)),
    "socket.timeout.ms": Prop("int", 60000, low=10, high=300000),
    "socket.connection.setup.timeout.ms": Prop("int", 30000, low=1000, high=_I32),
    "request.timeout.ms": Prop("int", 30000, low=1, high=900000),
    "metadata.max.age.ms": Prop("int", 900000, low=1, high=86400000),
    "reconnect.backoff.ms": Prop("int", 100, low=0, high=3600000),
    "reconnect.backoff.max.ms": Prop("int", 10000, low=0, high=3600000),
    "retry.backoff.ms": Prop("int", 100, low=1, high=300000),
    "receive.message.max.bytes": Prop("int", 100000000, low=1000, high=2147483647),
    "message.max.bytes": Prop("int", 1000000, low=1000, high=1000000000),
    "api.version.request": Prop("bool", True),
    "error_cb": Prop("callable", None),
    "debug": Prop("str", ""),
    "log_level": Prop("int", 6, low=0, high=7),
    "logger": Prop("any", None),
    # producer
    "acks": Prop("int", -1, PRODUCER, low=-1, high=1000),
    "linger.ms": Prop("float", 5.0, PRODUCER, low=0, high=900000),
    "batch.size": Prop("int", 1000000, PRODUCER, low=1, high=_I32),
    "batch.num.messages": Prop("int", 10000, PRODUCER, low=1, high=1000000),
    "compression.type": Prop("enum", "none", PRODUCER, choices=("none", "gzip", "snappy", "lz4", "zstd")),
    "enable.idempotence": Prop("bool", True, PRODUCER),
    "retries": Prop("int", _I32, PRODUCER, low=0, high=_I32),
    "delivery.timeout.ms": Prop("int", 300000, PRODUCER, low=0, high=_I32),
    "queue.buffering.max.messages": Prop("int", 100000, PRODUCER, low=0, high=_I32),
    "queue.buffering.max.kbytes": Prop("int", 1048576, PRODUCER, low=1, high=_I32),
    "max.in.flight.requests.per.connection": Prop("int", 5, PRODUCER, low=1, high=1000000),
    "partitioner": Prop("enum", "murmur2_random", PRODUCER, choices=("murmur2_random", "murmur2")),
    "on_delivery": Prop("callable", None, PRODUCER),
    "delivery.report.only.error": Prop("bool", False, PRODUCER),
    # consumer
    "auto.offset.reset": Prop(
        "enum",
        "latest",
        CONSUMER,
        choices=("earliest", "smallest", "beginning", "latest", "largest", "end", "error"),
    ),
    "fetch.min.bytes": Prop("int", 1, CONSUMER, low=1, high=100000000),
    "fetch.max.bytes": Prop("int", 52428800, CONSUMER, low=0, high=2147483135),
    "max.partition.fetch.bytes": Prop("int", 1048576, CONSUMER, low=1, high=1000000000),
    "fetch.wait.max.ms": Prop("int", 500, CONSUMER, low=0, high=300000),
    "isolation.level": Prop(
        "enum", "read_committed", CONSUMER, choices=("read_committed", "read_uncommitted")
    ),
    "check.crcs": Prop("bool", True, CONSUMER),
    "enable.partition.eof": Prop("bool", False, CONSUMER),
    "queued.max.messages.kbytes": Prop("int", 65536, CONSUMER, low=1, high=2097151),
}

ALIASES: dict[str, str] = {
    "metadata.broker.list": "bootstrap.servers",
    "queue.buffering.max.ms": "linger.ms",
    "compression.codec": "compression.type",
    "request.required.acks": "acks",
    "message.send.max.retries": "retries",
    "message.timeout.ms": "delivery.timeout.ms",
    "max.in.flight": "max.in.flight.requests.per.connection",
    "delivery.report.cb": "on_delivery",
    "dr_cb": "on_delivery",
}

# keys of features this client does not have yet: refused, never silently ignored
UNSUPPORTED: dict[str, str] = {
    "transactional.id": "transactions",
    "group.id": "consumer groups and offset commits",
    "sasl.mechanism": "SASL authentication",
    "sasl.mechanisms": "SASL authentication",
    "sasl.username": "SASL authentication",
    "sasl.password": "SASL authentication",
    "sasl.oauthbearer.method": "SASL/OAUTHBEARER",
    "ssl.ca.location": "TLS",
    "ssl.certificate.location": "TLS",
    "ssl.key.location": "TLS",
    "ssl.endpoint.identification.algorithm": "TLS",
    "partition.assignment.strategy": "consumer groups",
    "session.timeout.ms": "consumer groups",
    "heartbeat.interval.ms": "consumer groups",
    "max.poll.interval.ms": "consumer groups",
    "auto.commit.interval.ms": "consumer groups",
    "group.instance.id": "consumer groups",
    "on_commit": "consumer groups",
    "enable.auto.commit": "consumer groups and offset commits",
    "enable.auto.offset.store": "consumer groups and offset commits",
}

_ENUM_ALIASES = {
    "smallest": "earliest",
    "beginning": "earliest",
    "largest": "latest",
    "end": "latest",
    "murmur2": "murmur2_random",
}
_TRUE = {"true", "t", "1", "yes", "y", "on"}
_FALSE = {"false", "f", "0", "no", "n", "off"}


class Config:
    """Typed, checked configuration values; ``config["linger.ms"]``."""

    def __init__(self, values: dict[str, Any], given: frozenset[str]) -> None:
        self._values = values
        self.given = given  # the canonical names the user set

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def get_int(self, key: str) -> int:
        value = self._values[key]
        assert isinstance(value, int)
        return value

    def get_float(self, key: str) -> float:
        return float(self._values[key])

    def get_str(self, key: str) -> str:
        value = self._values[key]
        assert isinstance(value, str)
        return value

    def get_bool(self, key: str) -> bool:
        return bool(self._values[key])


def _convert(key: str, prop: Prop, value: Any) -> Any:
    what = f"config {key!r}"
    if prop.kind == "any":
        return value
    if prop.kind == "callable":
        if value is not None and not callable(value):
            raise KafkaConfigError(f"{what}: expected a callable, got {type(value).__name__}")
        return value
    if prop.kind == "str":
        if not isinstance(value, str):
            raise KafkaConfigError(f"{what}: expected a string, got {type(value).__name__} {value!r}")
        return value
    if prop.kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise KafkaConfigError(f"{what}: expected true or false, got {value!r}")
    if prop.kind == "enum":
        text = str(value).strip().lower() if isinstance(value, str) else None
        if text is None or text not in prop.choices:
            raise KafkaConfigError(f"{what}: {value!r} is not one of {', '.join(prop.choices)}")
        return _ENUM_ALIASES.get(text, text)
    # numbers
    if key == "acks" and isinstance(value, str) and value.strip().lower() == "all":
        return -1
    number: float
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value) if prop.kind == "float" else int(value)
    except (TypeError, ValueError):
        kind = "an integer" if prop.kind == "int" else "a number"
        raise KafkaConfigError(f"{what}: expected {kind}, got {value!r}") from None
    if (prop.low is not None and number < prop.low) or (prop.high is not None and number > prop.high):
        raise KafkaConfigError(f"{what}: {value!r} is outside {prop.low:g}..{prop.high:g}")
    return number


def parse(conf: Mapping[str, Any], role: str, *, need_bootstrap: bool = True) -> Config:
    """Check ``conf`` for ``role`` (producer, consumer or admin); raises KafkaConfigError."""
    if not isinstance(conf, Mapping):
        raise KafkaConfigError(f"configuration must be a dict, got {type(conf).__name__}")
    values = {name: prop.default for name, prop in PROPERTIES.items()}
    given: set[str] = set()
    for raw_key, value in conf.items():
        if not isinstance(raw_key, str):
            raise KafkaConfigError(f"config key {raw_key!r} is not a string")
        key = ALIASES.get(raw_key, raw_key)
        if key in UNSUPPORTED:
            raise KafkaConfigError(
                f"config {raw_key!r}: {UNSUPPORTED[key]} are not supported by pulsarwire's "
                "Kafka client yet; remove the key"
            )
        prop = PROPERTIES.get(key)
        if prop is None:
            known = [*PROPERTIES, *ALIASES, *UNSUPPORTED]
            close = difflib.get_close_matches(raw_key, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise KafkaConfigError(f"unknown config key {raw_key!r}{hint}")
        if prop.role not in (COMMON, role) and role != "admin":
            raise KafkaConfigError(f"config {raw_key!r} is a {prop.role} property; this is a {role}")
        values[key] = _convert(raw_key, prop, value)
        given.add(key)
    if need_bootstrap and not values["bootstrap.servers"]:
        raise KafkaConfigError("config 'bootstrap.servers' is required (host:port[,host:port...])")
    if values["bootstrap.servers"]:
        bootstrap_addresses(values["bootstrap.servers"])
    if role == "consumer" and values["receive.message.max.bytes"] < values["fetch.max.bytes"] + 512:
        # librdkafka's rule: else every full Fetch answer would be refused as an oversize frame
        raise KafkaConfigError(
            f"config 'receive.message.max.bytes' ({values['receive.message.max.bytes']}) must be at least "
            f"'fetch.max.bytes' ({values['fetch.max.bytes']}) + 512"
        )
    return Config(values, frozenset(given))


def bootstrap_addresses(servers: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` as pairs (an optional ``PLAINTEXT://`` prefix is dropped)."""
    out: list[tuple[str, int]] = []
    for item in servers.split(","):
        item = item.strip()
        if "://" in item:
            scheme, _, item = item.partition("://")
            if scheme.lower() != "plaintext":
                raise KafkaConfigError(
                    f"config 'bootstrap.servers': {scheme}:// is not supported yet ({item})"
                )
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise KafkaConfigError(f"config 'bootstrap.servers': {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    return out
