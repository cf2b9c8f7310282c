"""The Kafka client's configuration: Java-client / librdkafka names, typed values, typed errors.

An unknown key names itself and the closest known one; a value of the wrong type or range names
the key; keys of features not built yet are refused rather than ignored; confluent-kafka's
spellings (strings for numbers and booleans, ``acks=all``, aliases) are taken.
"""

from __future__ import annotations

import pytest

from pulsarwire.errors import PulsarWireError
from pulsarwire.kafka.client import KafkaConfigError, KafkaError, Producer
from pulsarwire.kafka.client.config import parse

BASE = {"bootstrap.servers": "127.0.0.1:9092"}


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("linger.mss", "linger.ms"),
        ("bootstrap.server", "bootstrap.servers"),
        ("compresion.type", "compression.type"),
    ],
)
def test_an_unknown_key_names_itself_and_the_closest_known_one(key: str, suggestion: str) -> None:
    with pytest.raises(KafkaConfigError) as info:
        parse({**BASE, key: 1}, "producer")
    text = str(info.value)
    assert repr(key) in text and f"did you mean {suggestion!r}" in text
    assert info.value.error.code() == KafkaError._INVALID_ARG  # type: ignore[attr-defined]
    assert isinstance(info.value, PulsarWireError) and isinstance(info.value, ValueError)


def test_a_key_far_from_every_known_one_gets_no_guess() -> None:
    with pytest.raises(KafkaConfigError, match=r"unknown config key 'zzzz'$"):
        parse({**BASE, "zzzz": 1}, "producer")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("linger.ms", "soon", "expected a number"),
        ("batch.size", 0, r"outside 1\.\."),
        ("enable.idempotence", "maybe", "expected true or false"),
        ("compression.type", "brotli", "not one of none, gzip, snappy, lz4, zstd"),
        ("client.id", 5, "expected a string"),
        ("on_delivery", "print", "expected a callable"),
        ("retries", True, "expected an integer"),
    ],
)
def test_a_value_of_the_wrong_type_or_range_names_the_key(key: str, value: object, message: str) -> None:
    with pytest.raises(KafkaConfigError, match=message) as info:
        parse({**BASE, key: value}, "producer")
    assert repr(key) in str(info.value)


def test_confluent_spellings_are_taken() -> None:
    config = parse(
        {
            **BASE,
            "acks": "all",
            "linger.ms": "7",
            "enable.idempotence": "false",
            "compression.codec": "LZ4",
            "queue.buffering.max.ms": 3,
            "message.send.max.retries": "2",
        },
        "producer",
    )
    assert config["acks"] == -1
    assert config["linger.ms"] == 3.0  # the alias given last wins, as in librdkafka
    assert config["enable.idempotence"] is False
    assert config["compression.type"] == "lz4"
    assert config["retries"] == 2


@pytest.mark.parametrize("key", ["sasl.mechanism", "transactional.id", "ssl.ca.location", "group.id"])
def test_keys_of_features_not_built_yet_are_refused_not_ignored(key: str) -> None:
    role = "consumer" if key == "group.id" else "producer"
    with pytest.raises(KafkaConfigError, match="not supported by pulsarwire's Kafka client yet"):
        parse({**BASE, key: "x"}, role)


def test_a_property_of_the_other_role_is_refused() -> None:
    with pytest.raises(KafkaConfigError, match=r"'fetch\.min\.bytes' is a consumer property"):
        parse({**BASE, "fetch.min.bytes": 1}, "producer")


@pytest.mark.parametrize("servers", ["", "localhost", "host:port", "ssl://h:1", "h:70000"])
def test_bad_bootstrap_servers_are_refused(servers: str) -> None:
    with pytest.raises(KafkaConfigError, match=r"bootstrap\.servers"):
        parse({"bootstrap.servers": servers}, "producer")


def test_idempotence_needs_acks_all() -> None:
    with pytest.raises(KafkaConfigError, match="'acks' must be all"):
        Producer({**BASE, "acks": 1})


def test_a_fetch_size_over_the_frame_bound_is_refused() -> None:
    with pytest.raises(
        KafkaConfigError, match=r"'receive\.message\.max\.bytes' \(1048576\) must be at least"
    ):
        parse({**BASE, "receive.message.max.bytes": 1 << 20}, "consumer")
    parse({**BASE, "receive.message.max.bytes": 1 << 20, "fetch.max.bytes": (1 << 20) - 512}, "consumer")
