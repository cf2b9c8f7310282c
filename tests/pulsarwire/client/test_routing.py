"""Partition routing: key hashing, round robin with batching awareness, single and custom routers.

Key vectors are computed from the Java definitions, not from pulsarwire:
``String.hashCode()`` is ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code
units in 32-bit signed arithmetic, masked with ``Integer.MAX_VALUE``; the
Murmur3 values are the published x86_32 seed-0 vectors ("hello",
"The quick brown fox ...") and those of another Pulsar client (pulsar-client-dotnet's
MurmurHash3 tests, which mask with 0x7fffffff as the Java client does).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarwire.client.routing import HashingScheme, Router, RoutingMode, partition_for_key
from pulsarwire.codec.hashing import java_string_hash, murmur3_32_hash
from tests.helpers.examples import examples

JAVA = HashingScheme.JavaStringHash
MURMUR = HashingScheme.Murmur3_32Hash

# key -> String.hashCode() & Integer.MAX_VALUE
JAVA_VECTORS = {
    "": 0,
    "key-1": 101943363,  # 107*31^4 + 101*31^3 + 121*31^2 + 45*31 + 49
    "key-2": 101943364,
    "Hello world": 1314491044,  # hashCode() is -832992604: the mask matters
    "ключ": 33309882,
    "日本語": 25921943,
    "🔑": 1772660,  # U+1F511 = surrogates D83D DD11: 55357 * 31 + 56593
}

# key -> murmur3_32(utf8(key), seed 0) & 0x7fffffff
MURMUR_VECTORS = {
    "": 0,
    "hello": 0x248BFA47,
    "The quick brown fox jumps over the lazy dog": 0x2E4FF723,
    "I will not buy this record, it is scratched.": 684731290,
    "Hello world": 764499724,
    "Съешь ещё этих мягких французских булок, да выпей чаю": 1885574967,
}


# ---------------------------------------------------------------------------
# hashing schemes and keyed routing
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS.items())
def test_java_string_hash_scheme(key: str, expected: int) -> None:
    assert JAVA.hash(key) == expected == java_string_hash(key)


@pytest.mark.parametrize(("key", "expected"), MURMUR_VECTORS.items())
def test_murmur3_scheme(key: str, expected: int) -> None:
    assert MURMUR.hash(key) == expected == murmur3_32_hash(key)


@pytest.mark.parametrize("mode", [RoutingMode.RoundRobinPartition, RoutingMode.SinglePartition])
@pytest.mark.parametrize("n", [1, 3, 7, 16, 100])
def test_keyed_messages_hash_in_every_builtin_mode(mode: RoutingMode, n: int) -> None:
    for scheme, vectors in ((JAVA, JAVA_VECTORS), (MURMUR, MURMUR_VECTORS)):
        router = Router(mode, scheme, rng=random.Random(0))
        for key, h in vectors.items():
            assert router.choose(key, n, now_ms=12345) == h % n
            assert partition_for_key(key, n, scheme) == h % n


def test_key_1_lands_where_the_java_client_puts_it() -> None:
    # 101943363 = 3 * 33981121, so mod 3 is 0; mod 10 is 3.
    r = Router()
    assert r.choose("key-1", 3, now_ms=0) == 0
    assert r.choose("key-1", 10, now_ms=0) == 3
    assert Router(hashing_scheme=MURMUR).choose("hello", 10, now_ms=0) == 0x248BFA47 % 10


def test_empty_key_is_a_key() -> None:
    r = Router(batching_enabled=False, rng=random.Random(3))
    assert [r.choose("", 5, now_ms=0) for _ in range(4)] == [0, 0, 0, 0]


def test_keys_ignore_the_clock_and_the_round_robin_counter() -> None:
    r = Router(batching_enabled=False)
    for t in range(0, 1000, 37):
        assert r.choose("key-2", 4, now_ms=t) == 101943364 % 4


# ---------------------------------------------------------------------------
# round robin
# ---------------------------------------------------------------------------


class FirstDraw(random.Random):
    """A Random whose randrange returns a fixed value (the Java client's random start)."""

    def __init__(self, start: int) -> None:
        super().__init__(0)
        self.start = start
        self.draws = 0

    def randrange(self, *args: object, **kwargs: object) -> int:
        self.draws += 1
        return self.start


def test_round_robin_without_batching_switches_every_message() -> None:
    r = Router(batching_enabled=False, rng=FirstDraw(2))
    assert [r.choose(None, 4, now_ms=0) for _ in range(9)] == [2, 3, 0, 1, 2, 3, 0, 1, 2]


def test_round_robin_with_batching_switches_on_clock_boundaries() -> None:
    rng = FirstDraw(1)
    r = Router(batching_enabled=True, batching_max_publish_delay_ms=1, rng=rng)
    assert r.partition_switch_ms == 10  # Java default: 10 x the max publish delay
    # partition = (now_ms // 10 + start) mod n: fixed within a 10 ms window, then the next partition
    clock = [0, 3, 9, 10, 15, 19, 20, 35, 40, 1000]
    assert [r.choose(None, 3, now_ms=t) for t in clock] == [1, 1, 1, 2, 2, 2, 0, 1, 2, 2]
    assert rng.draws == 1


def test_partition_switch_follows_the_publish_delay_and_frequency() -> None:
    assert Router(batching_max_publish_delay_ms=5).partition_switch_ms == 50
    assert Router(batching_max_publish_delay_ms=5, partition_switch_frequency=1).partition_switch_ms == 5
    assert Router(batching_max_publish_delay_ms=0.3).partition_switch_ms == 3
    assert Router(batching_max_publish_delay_ms=0.05).partition_switch_ms == 1  # never below 1 ms
    assert Router(batching_max_publish_delay_ms=0).partition_switch_ms == 1


def test_round_robin_with_batching_and_a_slow_clock_stays_put() -> None:
    r = Router(batching_max_publish_delay_ms=2, partition_switch_frequency=1, rng=FirstDraw(0))
    assert {r.choose(None, 8, now_ms=4001) for _ in range(100)} == {(4001 // 2) % 8}


def test_round_robin_start_is_random_and_drawn_once() -> None:
    starts = {
        Router(batching_enabled=False, rng=random.Random(seed)).choose(None, 16, now_ms=0)
        for seed in range(50)
    }
    assert len(starts) > 5
    rng = FirstDraw(5)
    r = Router(batching_enabled=False, rng=rng)
    for _ in range(10):
        r.choose(None, 16, now_ms=0)
    assert rng.draws == 1


def test_round_robin_counter_wraps_like_a_java_int() -> None:
    r = Router(batching_enabled=False, rng=FirstDraw(0))
    r.choose(None, 3, now_ms=0)
    r._counter = 2**31 - 1  # Integer.MAX_VALUE
    # signSafeMod(MAX_VALUE, 3) = 1, then the int wraps to MIN_VALUE: signSafeMod(-2^31, 3) = 1
    assert [r.choose(None, 3, now_ms=0) for _ in range(3)] == [1, 1, 2]


def test_round_robin_keeps_working_when_partitions_are_added() -> None:
    r = Router(batching_enabled=False, rng=FirstDraw(1))
    assert [r.choose(None, 2, now_ms=0) for _ in range(2)] == [1, 0]
    assert [r.choose(None, 4, now_ms=0) for _ in range(3)] == [3, 0, 1]


# ---------------------------------------------------------------------------
# single partition
# ---------------------------------------------------------------------------


def test_single_partition_uses_one_random_partition() -> None:
    r = Router(RoutingMode.SinglePartition, rng=FirstDraw(3))
    assert {r.choose(None, 5, now_ms=t) for t in range(0, 10_000, 7)} == {3}


def test_single_partition_is_random_across_producers() -> None:
    chosen = {
        Router(RoutingMode.SinglePartition, rng=random.Random(s)).choose(None, 8, now_ms=0) for s in range(40)
    }
    assert len(chosen) > 3


def test_single_partition_still_hashes_keys() -> None:
    r = Router(RoutingMode.SinglePartition, MURMUR, rng=FirstDraw(0))
    assert r.choose("hello", 10, now_ms=0) == 0x248BFA47 % 10
    assert r.choose(None, 10, now_ms=0) == 0


# ---------------------------------------------------------------------------
# custom
# ---------------------------------------------------------------------------


def test_custom_router_gets_key_and_partition_count() -> None:
    seen: list[tuple[str | None, int]] = []

    def route(key: str | None, n: int) -> int:
        seen.append((key, n))
        return n - 1

    r = Router(RoutingMode.CustomPartition, custom=route)
    assert r.choose("key-1", 4, now_ms=0) == 3  # the custom router decides even for keys
    assert r.choose(None, 6, now_ms=0) == 5
    assert seen == [("key-1", 4), (None, 6)]


@pytest.mark.parametrize("bad", [-1, 4, 100])
def test_custom_router_out_of_range_raises(bad: int) -> None:
    r = Router(RoutingMode.CustomPartition, custom=lambda key, n: bad)
    with pytest.raises(ValueError, match="not in"):
        r.choose(None, 4, now_ms=0)


@pytest.mark.parametrize("bad", [1.0, "1", None, True])
def test_custom_router_non_int_raises(bad: object) -> None:
    r = Router(RoutingMode.CustomPartition, custom=lambda key, n: bad)  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match="expected int"):
        r.choose(None, 4, now_ms=0)


def test_custom_mode_needs_a_router_and_only_custom_mode_takes_one() -> None:
    with pytest.raises(ValueError):
        Router(RoutingMode.CustomPartition)
    with pytest.raises(ValueError):
        Router(RoutingMode.RoundRobinPartition, custom=lambda key, n: 0)


@pytest.mark.parametrize("kwargs", [{"partition_switch_frequency": 0}, {"batching_max_publish_delay_ms": -1}])
def test_bad_batching_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Router(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [0, -1])
def test_partition_count_must_be_positive(n: int) -> None:
    with pytest.raises(ValueError):
        Router().choose("k", n, now_ms=0)
    with pytest.raises(ValueError):
        partition_for_key("k", n)


# ---------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------

keys = st.one_of(st.none(), st.text(max_size=30))


@settings(max_examples=examples(300), deadline=None)
@given(
    mode=st.sampled_from([RoutingMode.RoundRobinPartition, RoutingMode.SinglePartition]),
    scheme=st.sampled_from(list(HashingScheme)),
    batching=st.booleans(),
    delay=st.integers(min_value=0, max_value=1000),
    seed=st.integers(min_value=0, max_value=2**32),
    calls=st.lists(
        st.tuples(
            keys, st.integers(min_value=1, max_value=10_000), st.integers(min_value=0, max_value=2**62)
        ),
        min_size=1,
        max_size=20,
    ),
)
def test_choice_is_always_in_range(
    mode: RoutingMode,
    scheme: HashingScheme,
    batching: bool,
    delay: int,
    seed: int,
    calls: list[tuple[str | None, int, int]],
) -> None:
    r = Router(
        mode, scheme, batching_enabled=batching, batching_max_publish_delay_ms=delay, rng=random.Random(seed)
    )
    for key, n, now_ms in calls:
        p = r.choose(key, n, now_ms=now_ms)
        assert 0 <= p < n
        if key is not None:
            assert p == scheme.hash(key) % n


@settings(max_examples=examples(200), deadline=None)
@given(key=st.text(max_size=30), n=st.integers(min_value=1, max_value=1 << 20))
def test_key_routing_is_the_same_across_routers(key: str, n: int) -> None:
    a = Router(RoutingMode.RoundRobinPartition, rng=random.Random(1))
    b = Router(RoutingMode.SinglePartition, rng=random.Random(2))
    assert a.choose(key, n, now_ms=0) == b.choose(key, n, now_ms=99) == java_string_hash(key) % n
