"""The public API: ``import pulsarwire`` as one would ``import pulsar``.

* The typed user program of tests/typecheck (checked by ``make typecheck``) runs against our broker.
* Parity with the installed official client: for every method both have, the parameter names and
  defaults are the official ones, except the differences listed below, each with its reason (the
  ones a user notices are in docs/client.md). The lists are exact both ways: a parameter added on
  either side, or a listed difference that went away, fails the test; so are the lists of methods
  only one side has.
* No ``**kwargs`` catch-all and a numpydoc docstring on every public method.
* Clients, producers, consumers and readers are context managers; closing twice is harmless.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pulsar
import pulsar.asyncio
import pytest

import pulsarwire
import pulsarwire.asyncio
from pulsarwire.broker import Broker

ROOT = Path(__file__).resolve().parents[2]

# -- official parameters pulsarwire does not accept (absent rather than silently ignored) -----------
SCHEMA = "values are bytes: no client-side schema (the topic's schema is read with get_schema)"
CRYPTO = "no end-to-end encryption"
LISTENER = "no listener threads: receive in a loop, or use pulsarwire.asyncio"
CPP = "tuning of the C++ client (threads, stats, log configuration) with no counterpart here"
WRAPPER = "a wrapper over the core object, made by the client (never by the user)"
NOT_YET = "not implemented"

UNSUPPORTED: dict[str, dict[str, str]] = {
    "Client.__init__": {
        "io_threads": CPP,
        "message_listener_threads": CPP,
        "concurrent_lookup_requests": CPP,
        "log_conf_file_path": CPP,
        "stats_interval_in_seconds": CPP,
        "use_tls": "deprecated in the official client: the service URL's scheme decides",
        "logger": "logging goes through the standard logging module ('pulsarwire' loggers)",
        "listener_name": NOT_YET,
    },
    "Client.create_producer": {
        "schema": SCHEMA,
        "encryption_key": CRYPTO,
        "crypto_key_reader": CRYPTO,
        "max_pending_messages_across_partitions": "max_pending_messages bounds each partition",
        "lazy_start_partitioned_producers": NOT_YET,
        "batching_type": NOT_YET,
        "access_mode": NOT_YET,
    },
    "Client.subscribe": {
        "schema": SCHEMA,
        "crypto_key_reader": CRYPTO,
        "crypto_failure_action": CRYPTO,
        "message_listener": LISTENER,
        "max_total_receiver_queue_size_across_partitions": "receiver_queue_size bounds the one queue",
        "broker_consumer_stats_cache_time_ms": CPP,
        "batch_receive_policy": "batch_receive takes its limits as arguments",
        "properties": NOT_YET,
        "replicate_subscription_state_enabled": "single cluster: nothing to replicate",
        "regex_subscription_mode": "regex subscriptions cover persistent topics (the default)",
    },
    "Client.create_reader": {
        "schema": SCHEMA,
        "crypto_key_reader": CRYPTO,
        "crypto_failure_action": CRYPTO,
        "reader_listener": LISTENER,
    },
    "Producer.send": {"replication_clusters": "single cluster", "disable_replication": "single cluster"},
    "Producer.send_async": {
        "replication_clusters": "single cluster",
        "disable_replication": "single cluster",
    },
    "Producer.__init__": {"args": WRAPPER, "kwargs": WRAPPER},
    "Consumer.__init__": {"args": WRAPPER, "kwargs": WRAPPER},
    "Reader.__init__": {"args": WRAPPER, "kwargs": WRAPPER},
    "MessageId.deserialize": {
        "message_id_bytes": "the codec's name for it is data (positional in both)",
        "topic": "a MessageId does not carry its topic here",
    },
    "ConsumerDeadLetterPolicy.__init__": {"initial_subscription_name": NOT_YET},
    "ConsumerKeySharedPolicy.__init__": {
        "key_shared_mode": "sticky when sticky_ranges are given, auto-split otherwise"
    },
    "asyncio.Client.__init__": {"kwargs": "explicit parameters, those of pulsarwire.Client"},
    "asyncio.Client.create_producer": {
        "schema": SCHEMA,
        "encryption_key": CRYPTO,
        "crypto_key_reader": CRYPTO,
        "max_pending_messages_across_partitions": "max_pending_messages bounds each partition",
        "lazy_start_partitioned_producers": NOT_YET,
        "batching_type": NOT_YET,
        "access_mode": NOT_YET,
    },
    "asyncio.Client.subscribe": {
        "schema": SCHEMA,
        "crypto_key_reader": CRYPTO,
        "crypto_failure_action": CRYPTO,
        "max_total_receiver_queue_size_across_partitions": "receiver_queue_size bounds the one queue",
        "broker_consumer_stats_cache_time_ms": CPP,
        "batch_receive_policy": "batch_receive takes its limits as arguments",
        "properties": NOT_YET,
        "replicate_subscription_state_enabled": "single cluster: nothing to replicate",
        "regex_subscription_mode": "regex subscriptions cover persistent topics (the default)",
        "is_pattern_topic": "a regex is given as a compiled re.Pattern, as in the blocking API",
    },
    "asyncio.Client.create_reader": {
        "schema": SCHEMA,
        "crypto_key_reader": CRYPTO,
        "crypto_failure_action": CRYPTO,
    },
    "asyncio.Producer.send": {
        "replication_clusters": "single cluster",
        "disable_replication": "single cluster",
    },
    "asyncio.Producer.__init__": {"producer": WRAPPER, "schema": SCHEMA},
    "asyncio.Consumer.__init__": {"consumer": WRAPPER, "schema": SCHEMA},
    "asyncio.Reader.__init__": {"reader": WRAPPER, "schema": SCHEMA},
}

# -- parameters only pulsarwire has -----------------------------------------------------------------
CLIENT_EXTRA = {"keepalive_interval_seconds", "connection_timeout_seconds", "retry_policy"}
SUBSCRIBE_EXTRA = {
    "durable",
    "priority_level",
    "ack_group_time_ms",
    "expire_time_of_incomplete_chunked_message_ms",
    "max_message_size",
    "force_topic_creation",
}
EXTRA: dict[str, set[str]] = {
    "Client.__init__": CLIENT_EXTRA,
    "Client.create_producer": {"hashing_scheme"},
    "Client.subscribe": SUBSCRIBE_EXTRA,
    "Client.get_topic_partitions": {"create"},  # False: ask without creating (pipelines' source)
    "Producer.__init__": {"client", "core"},
    "Consumer.__init__": {"client", "core"},
    "Reader.__init__": {"client", "core"},
    "Consumer.batch_receive": {"max_num_messages", "max_num_bytes", "timeout_ms"},
    "MessageId.__init__": {"batch_size", "first_chunk_message_id"},
    "MessageId.deserialize": {"data"},
    # the official JSON string's fields as keywords too, the HTTP knobs of the token fetch, and the
    # opt-in to send the client secret to a cleartext http:// issuer that is not loopback
    "AuthenticationOauth2.__init__": {
        "allow_insecure_issuer",
        "issuer_url",
        "private_key",
        "audience",
        "scope",
        "retries",
        "retry_delay",
        "http_timeout",
        "ssl_context",
    },
    "asyncio.Client.__init__": {
        "authentication",
        "operation_timeout_seconds",
        "connection_timeout_ms",
        "tls_trust_certs_file_path",
        "tls_allow_insecure_connection",
        "tls_validate_hostname",
        "tls_private_key_file_path",
        "tls_certificate_file_path",
    }
    | CLIENT_EXTRA,
    "asyncio.Client.create_producer": {"hashing_scheme"},
    "asyncio.Client.subscribe": SUBSCRIBE_EXTRA | {"pattern_auto_discovery_period"},
    "asyncio.Client.get_topic_partitions": {"create"},
    "asyncio.Producer.__init__": {"core"},
    "asyncio.Consumer.__init__": {"core"},
    "asyncio.Reader.__init__": {"core"},
    "asyncio.Consumer.receive": {"timeout_millis"},
    "asyncio.Reader.read_next": {"timeout_millis"},
}

# -- defaults that differ (docs/client.md says why) ---------------------------------------------
DIFFERENT_DEFAULTS: dict[str, dict[str, tuple[Any, Any]]] = {
    "Client.__init__": {"tls_validate_hostname": (True, False)},
    "Client.create_producer": {"batching_enabled": (True, False)},
    "Client.subscribe": {"batch_index_ack_enabled": (True, False)},
    "asyncio.Client.subscribe": {"batch_index_ack_enabled": (True, False)},
    # a dataclass: ledger and entry are required, the partition is the third field
    "MessageId.__init__": {
        "ledger_id": (inspect.Parameter.empty, -1),
        "entry_id": (inspect.Parameter.empty, -1),
    },
    "ConsumerKeySharedPolicy.__init__": {"sticky_ranges": ((), None)},
    # optional: the same fields may come as keywords instead of the JSON string
    "AuthenticationOauth2.__init__": {"auth_params_string": (None, inspect.Parameter.empty)},
}

# -- official methods pulsarwire does not have ---------------------------------------------------
MISSING_METHODS: dict[str, set[str]] = {
    "Client": {"create_table_view", "get_service_info", "shutdown"},
    "Consumer": {"pause_message_listener", "resume_message_listener"},
    # ledger_id, entry_id, partition and batch_index are attributes of our value type, not methods
    "MessageId": {"wrap", "ledger_id", "entry_id", "partition", "batch_index"},
    "Message": {"encryption_context"},
    "ConsumerDeadLetterPolicy": {"policy"},
    "ConsumerKeySharedPolicy": {"policy"},
    "asyncio.Client": {"shutdown"},
}

# -- methods only pulsarwire has -------------------------------------------------------------------
OURS_ONLY: dict[str, set[str]] = {
    "Client": {"check_connection", "get_schema", "get_topics_of_namespace", "read_arrow"},
    "Producer": {"send_arrow"},  # rows of a pyarrow RecordBatch as batch entries (docs/client.md)
    "Consumer": {"get_backlog", "get_mark_delete_positions"},
    "MessageId": {"entry", "from_proto", "parse", "to_proto", "with_partition"},
    "Message": {"sequence_id"},
    "AuthenticationOauth2": {"auth_data", "auth_data_async", "token_expires_in"},
    "AuthenticationBasic": {"auth_data"},
    "asyncio.Producer": {"send_arrow"},
    "asyncio.Consumer": {"batch_receive", "is_connected"},
}

PAIRS: dict[str, tuple[type, type]] = {
    "Client": (pulsarwire.Client, pulsar.Client),
    "Producer": (pulsarwire.Producer, pulsar.Producer),
    "Consumer": (pulsarwire.Consumer, pulsar.Consumer),
    "Reader": (pulsarwire.Reader, pulsar.Reader),
    "MessageId": (pulsarwire.MessageId, pulsar.MessageId),
    "Message": (pulsarwire.Message, pulsar.Message),
    "ConsumerDeadLetterPolicy": (pulsarwire.ConsumerDeadLetterPolicy, pulsar.ConsumerDeadLetterPolicy),
    "ConsumerKeySharedPolicy": (pulsarwire.ConsumerKeySharedPolicy, pulsar.ConsumerKeySharedPolicy),
    "AuthenticationOauth2": (pulsarwire.AuthenticationOauth2, pulsar.AuthenticationOauth2),
    "AuthenticationBasic": (pulsarwire.AuthenticationBasic, pulsar.AuthenticationBasic),
    "asyncio.Client": (pulsarwire.asyncio.Client, pulsar.asyncio.Client),
    "asyncio.Producer": (pulsarwire.asyncio.Producer, pulsar.asyncio.Producer),
    "asyncio.Consumer": (pulsarwire.asyncio.Consumer, pulsar.asyncio.Consumer),
    "asyncio.Reader": (pulsarwire.asyncio.Reader, pulsar.asyncio.Reader),
}


def _methods(cls: type) -> set[str]:
    return {n for n in dir(cls) if (not n.startswith("_") or n == "__init__") and callable(getattr(cls, n))}


def _params(fn: Any) -> dict[str, inspect.Parameter]:
    return {k: v for k, v in inspect.signature(fn).parameters.items() if k not in ("self", "cls")}


def _same_default(ours: Any, theirs: Any) -> bool:
    """Equal, or the official enum member's name is an attribute of our type with our value
    (``PartitionsRoutingMode.RoundRobinDistribution``, ``CompressionType.NONE``, ...)."""
    if ours is inspect.Parameter.empty or theirs is inspect.Parameter.empty:
        return ours is theirs
    name = getattr(theirs, "name", None)
    if isinstance(name, str) and not isinstance(theirs, type) and hasattr(type(ours), name):
        return bool(getattr(type(ours), name) == ours)
    return bool(ours == theirs)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_parameters_match_the_official_client(name: str) -> None:
    ours, theirs = PAIRS[name]
    assert _methods(theirs) - _methods(ours) == MISSING_METHODS.get(name, set())
    assert _methods(ours) - _methods(theirs) == OURS_ONLY.get(name, set())
    for method in sorted(_methods(ours) & _methods(theirs)):
        key = f"{name}.{method}"
        mine, official = _params(getattr(ours, method)), _params(getattr(theirs, method))
        assert set(official) - set(mine) == set(UNSUPPORTED.get(key, {})), key
        assert set(mine) - set(official) == EXTRA.get(key, set()), key
        differ = {
            p: (mine[p].default, official[p].default)
            for p in set(mine) & set(official)
            if not _same_default(mine[p].default, official[p].default)
        }
        assert differ == DIFFERENT_DEFAULTS.get(key, {}), key
    for key in (*UNSUPPORTED, *EXTRA, *DIFFERENT_DEFAULTS):  # no stale entry
        cls, _, method = key.rpartition(".")
        assert cls in PAIRS and method in _methods(PAIRS[cls][0]) & _methods(PAIRS[cls][1]), key


def test_official_spellings_are_accepted() -> None:
    assert pulsarwire.MessageId.earliest == pulsarwire.MessageId.EARLIEST
    assert pulsarwire.MessageId.latest == pulsarwire.MessageId.LATEST
    mode = pulsarwire.PartitionsRoutingMode
    assert mode.RoundRobinDistribution is mode.RoundRobinPartition
    assert mode.UseSinglePartition is mode.SinglePartition
    for enum_name in ("CompressionType", "ConsumerType", "InitialPosition", "PartitionsRoutingMode"):
        official = getattr(pulsar, enum_name)
        for member in official.__members__:
            assert hasattr(getattr(pulsarwire, enum_name), member), f"{enum_name}.{member}"
    for enum_name in ("CompressionType", "ConsumerType", "InitialPosition"):  # same wire values
        for member, value in getattr(pulsar, enum_name).__members__.items():
            assert int(getattr(getattr(pulsarwire, enum_name), member)) == int(value)
    assert pulsarwire.ConsumerDeadLetterPolicy(max_redeliver_count=3).max_redeliver_count == 3
    assert pulsarwire.KeySharedPolicy is pulsarwire.ConsumerKeySharedPolicy


PUBLIC_CLASSES = [
    pulsarwire.Message,
    pulsarwire.Client,
    pulsarwire.Producer,
    pulsarwire.Consumer,
    pulsarwire.Reader,
    pulsarwire.asyncio.Client,
    pulsarwire.asyncio.Producer,
    pulsarwire.asyncio.Consumer,
    pulsarwire.asyncio.Reader,
]
USER_MADE = {pulsarwire.Client, pulsarwire.asyncio.Client}  # the others are made by a client


@pytest.mark.parametrize("cls", PUBLIC_CLASSES, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_public_methods_have_explicit_parameters_and_docstrings(cls: type) -> None:
    for method in sorted(_methods(cls)):
        if method == "__init__" and cls not in USER_MADE:
            continue
        fn = getattr(cls, method)
        params = _params(fn)
        assert not any(p.kind is p.VAR_KEYWORD or p.kind is p.VAR_POSITIONAL for p in params.values()), method
        assert all(p.annotation is not p.empty for p in params.values()), method
        doc = inspect.getdoc(fn) or ""
        assert doc and not doc.startswith(("Initialize self", "Return self")), f"{cls.__name__}.{method}"
        if params:  # numpydoc: every parameter is described under Parameters
            assert "Parameters\n----------" in doc, f"{cls.__name__}.{method}"
            described = doc.split("Parameters\n----------", 1)[1]
            for p in params:
                assert p in described, f"{cls.__name__}.{method}: {p}"


def test_help_of_create_producer_reads_like_the_official_one() -> None:
    doc = inspect.getdoc(pulsarwire.Client.create_producer) or ""
    sig = str(inspect.signature(pulsarwire.Client.create_producer))
    assert "compression_type: 'CompressionType | int' = <CompressionType.NONE: 0>" in sig
    for section in ("Parameters\n----------", "Returns\n-------", "Raises\n------"):
        assert section in doc
    assert "batching_enabled: bool, default=True" in doc


def _load_user_code() -> ModuleType:
    path = ROOT / "tests" / "typecheck" / "user_code.py"
    spec = importlib.util.spec_from_file_location("user_code", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_typed_user_program_runs(pulsar_broker: Broker) -> None:
    user_code = _load_user_code()
    topic = f"user-code-{uuid.uuid4().hex[:8]}"
    seen = user_code.produce_and_consume(pulsar_broker.service_url, topic)
    assert seen == [
        "sent True 2 by True",
        "one {'k': 'v'} 0",
        "two {} 0",
        "three {} 0",
        "no more",
        "read one",
        "read two",
        "read three",
    ]
    seen = asyncio.run(user_code.produce_and_consume_async(pulsar_broker.service_url, topic + "-async"))
    assert seen == [
        f"sent 3 to persistent://public/default/{topic}-async",
        "m0",
        "m1",
        "m2",
        "caught up: True",
    ]
    assert user_code.credentials().auth_data() == b"my-jwt"
    assert user_code.topic_names("orders") == [
        "persistent://public/default/orders",
        "public/default",
        "persistent://public/default/orders-partition-0",
        "persistent://public/default/orders",
        "0",
    ]


def test_import_is_light() -> None:
    """``import pulsarwire`` loads neither pyarrow nor the client machinery; the first use does."""
    code = (
        "import sys, pulsarwire\n"
        "heavy = [m for m in ('pyarrow', 'pyspark', 'pulsarwire.client.blocking', 'pulsarwire.asyncio') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "pulsarwire.Client\n"
        "assert 'pulsarwire.client.blocking' in sys.modules and 'pyarrow' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_blocking_objects_are_context_managers_and_close_twice(pulsar_broker: Broker) -> None:
    topic = f"ctx-{uuid.uuid4().hex[:8]}"
    with pulsarwire.Client(pulsar_broker.service_url) as client:
        with client.create_producer(topic) as producer:
            producer.send(b"x")
        assert not producer.is_connected()
        producer.close()  # a second close does nothing
        with client.subscribe(topic, "s", initial_position=pulsarwire.InitialPosition.Earliest) as consumer:
            assert consumer.receive(timeout_millis=5000).data() == b"x"
            assert consumer.is_connected()
        assert not consumer.is_connected()
        consumer.close()
        with pytest.raises(pulsarwire.AlreadyClosedError):
            consumer.receive(timeout_millis=10)
        with client.create_reader(topic, pulsarwire.MessageId.earliest) as reader:
            assert reader.read_next(timeout_millis=5000).data() == b"x"
        reader.close()
        left_open = client.create_producer(topic)
        left_open_consumer = client.subscribe(topic, "s2")
    client.close()  # twice
    left_open.close()  # after its client: nothing left to do
    left_open_consumer.close()
    with pytest.raises(pulsarwire.AlreadyClosedError):
        client.create_producer(topic)


def test_a_client_that_cannot_start_leaves_no_thread() -> None:
    before = set(threading.enumerate())
    with pytest.raises(pulsarwire.InvalidConfigurationError):
        pulsarwire.Client("ftp://localhost:8080")  # http(s):// is a valid service URL (HTTP lookup)
    time.sleep(0.1)
    assert [t for t in threading.enumerate() if t not in before and t.is_alive()] == []


def test_asyncio_objects_are_context_managers_and_close_twice(pulsar_broker: Broker) -> None:
    topic = f"actx-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with pulsarwire.asyncio.Client(pulsar_broker.service_url) as client:
            async with await client.create_producer(topic) as producer:
                await producer.send(b"x")
            await producer.close()
            consumer = await client.subscribe(
                topic, "s", initial_position=pulsarwire.InitialPosition.Earliest
            )
            async with consumer:
                assert (await consumer.receive(timeout_millis=5000)).data() == b"x"
            await consumer.close()
            async with await client.create_reader(topic, pulsarwire.MessageId.earliest) as reader:
                assert (await reader.read_next(timeout_millis=5000)).data() == b"x"
            await reader.close()
            left_open = await client.subscribe(topic, "s2")
        await client.close()
        assert not left_open.is_connected()
        await left_open.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "method",
    [
        "Client.__init__",
        "Client.create_producer",
        "Client.subscribe",
        "Client.create_reader",
        "Client.get_topic_partitions",
        "Producer.send_arrow",
    ],
)
def test_blocking_and_asyncio_clients_take_the_same_parameters(method: str) -> None:
    """One list of parameters for both APIs (they share the conversion to the core's keywords)."""

    def described(fn: Any) -> list[tuple[str, Any, Any, Any]]:
        return [(p.name, p.kind, p.default, p.annotation) for p in _params(fn).values()]

    cls, _, name = method.partition(".")
    blocking_method = getattr(getattr(pulsarwire, cls), name)
    asyncio_method = getattr(getattr(pulsarwire.asyncio, cls), name)
    assert described(blocking_method) == described(asyncio_method)
    assert inspect.getdoc(blocking_method) == inspect.getdoc(asyncio_method)


def test_a_message_router_routes_every_message_as_in_the_official_client(pulsar_broker: Broker) -> None:
    """Giving ``message_router`` is enough (the mode becomes CustomPartition); it gets the key."""
    topic = f"persistent://public/default/routed-{uuid.uuid4().hex[:8]}"
    pulsar_broker.create_partitioned_topic(topic, 3)
    keys: list[str | None] = []

    def router(key: str | None, num_partitions: int) -> int:
        keys.append(key)
        return num_partitions - 1

    with (
        pulsarwire.Client(pulsar_broker.service_url, connection_timeout_ms=5000) as client,
        client.create_producer(topic, message_router=router, batching_enabled=False) as producer,
    ):
        ids = [producer.send(b"a", partition_key="k"), producer.send(b"b")]
    assert [mid.partition for mid in ids] == [2, 2]
    assert keys == ["k", None]
