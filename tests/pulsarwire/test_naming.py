"""TopicName: Pulsar's parsing of full and short names, partitions, and the typed refusal of the rest."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pulsarwire
from pulsarwire import InvalidTopicName, TopicName

# A part of a name: anything but '/' (so never '://', which would start a domain).
part = st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1, max_size=12)
domain = st.sampled_from(["persistent", "non-persistent"])


@pytest.mark.parametrize(
    ("text", "full"),
    [
        ("orders", "persistent://public/default/orders"),
        ("acme/sales/orders", "persistent://acme/sales/orders"),
        ("persistent://acme/sales/orders", "persistent://acme/sales/orders"),
        ("non-persistent://acme/sales/orders", "non-persistent://acme/sales/orders"),
    ],
)
def test_short_and_full_names(text: str, full: str) -> None:
    assert str(TopicName.parse(text)) == full


def test_parts() -> None:
    t = TopicName.parse("non-persistent://acme/sales/orders-partition-7")
    assert (t.domain, t.tenant, t.namespace, t.local_name) == (
        "non-persistent",
        "acme",
        "sales",
        "orders-partition-7",
    )
    assert t.namespace_name == "acme/sales"
    assert not t.is_persistent and TopicName.parse("x").is_persistent
    assert t.partition_index == 7 and t.is_partition
    assert str(t.partitioned_topic) == "non-persistent://acme/sales/orders"
    assert t.partitioned_topic.partition_index == -1 and not t.partitioned_topic.is_partition


@pytest.mark.parametrize(
    ("local", "index"),
    [
        ("t-partition-0", 0),
        ("t-partition-12", 12),
        ("t-partition-1-partition-2", 2),  # the last suffix counts
        ("t-partition-01", -1),  # not a canonical number: an ordinary topic, as in Pulsar
        ("t-partition--1", -1),
        ("t-partition-+1", -1),
        ("t-partition-", -1),
        ("t-partition-x", -1),
        ("-partition-3", -1),  # nothing before the suffix
        (f"t-partition-{2**31}", -1),  # beyond Pulsar's 32-bit index
        ("t", -1),
    ],
)
def test_partition_index_follows_pulsar(local: str, index: int) -> None:
    t = TopicName.parse(local)
    assert t.partition_index == index
    assert (t.partitioned_topic == t) is (index < 0)


def test_partition() -> None:
    t = TopicName.parse("acme/sales/orders")
    assert str(t.partition(3)) == "persistent://acme/sales/orders-partition-3"
    assert t.partition(3).partitioned_topic == t
    assert t.partition(-1) is t
    assert t.partition(3).partition(3) == t.partition(3)  # already that partition, as Pulsar's getPartition
    assert [str(p) for p in t.partitions(2)] == [
        "persistent://acme/sales/orders-partition-0",
        "persistent://acme/sales/orders-partition-1",
    ]
    assert t.partitions(0) == [t]
    with pytest.raises(InvalidTopicName):
        t.partition(-2)


def test_rest_path() -> None:
    assert TopicName.parse("non-persistent://t/ns/a b").rest_path == "non-persistent/t/ns/a%20b"
    assert TopicName.parse("t/ns/x?y#z").rest_path == "persistent/t/ns/x%3Fy%23z"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a/b",  # two parts
        "a/b/c/d",  # short name with four parts
        "persistent://a/b",
        "persistent://tenant/cluster/ns/topic",  # Pulsar's legacy names with a cluster
        "kafka://a/b/c",  # unknown domain
        "://a/b/c",
        "persistent://a//c",
        "persistent://a/b/",
        "/b/c",
        "persistent://",
    ],
)
def test_invalid_names_raise_the_typed_error(text: str) -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.parse(text)


def test_invalid_parts_raise_the_typed_error() -> None:
    with pytest.raises(InvalidTopicName):
        TopicName("persistent", "a", "b", "c/d")
    with pytest.raises(InvalidTopicName):
        TopicName("durable", "a", "b", "c")
    with pytest.raises(InvalidTopicName):
        TopicName("persistent", "", "b", "c")


def test_is_public() -> None:
    assert pulsarwire.TopicName is TopicName
    assert "TopicName" in pulsarwire.__all__


@given(domain, part, part, part)
def test_full_name_round_trip(d: str, tenant: str, namespace: str, local: str) -> None:
    name = TopicName(d, tenant, namespace, local)
    text = str(name)
    assert TopicName.parse(text) == name
    assert str(TopicName.parse(text)) == text


@given(part, part, part)
def test_short_names_are_persistent(local: str, tenant: str, namespace: str) -> None:
    assert TopicName.parse(local) == TopicName("persistent", "public", "default", local)
    assert TopicName.parse(f"{tenant}/{namespace}/{local}") == TopicName(
        "persistent", tenant, namespace, local
    )


@given(domain, part, part, part, st.integers(0, 2**31 - 1))
def test_partition_round_trip(d: str, tenant: str, namespace: str, local: str, index: int) -> None:
    base = TopicName(d, tenant, namespace, local).partitioned_topic
    p = base.partition(index)
    assert p.partition_index == index
    assert p.partitioned_topic == base
    assert TopicName.parse(str(p)) == p
