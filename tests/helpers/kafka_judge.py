"""The Kafka judges: confluent-kafka, kafka-python and aiokafka, each in a process of its own.

``python -m tests.helpers.kafka_judge CLIENT SCENARIO BOOTSTRAP TOPIC`` runs one scenario with
one client against a broker and prints one JSON object (bytes as latin-1 strings) on stdout;
the tests (``tests/pulsarwire/kafka/broker/``) start it with :func:`run_judge` and check the
answer. Scenarios:

- ``admin``: create TOPIC (3 partitions) and TOPIC-gone, then the refusals (the same name
  again, an illegal name, replication factor 3, fewer partitions), list, grow TOPIC to 4
  partitions, describe its configs, delete TOPIC-gone, delete it again; the error names each
  client reports are collected.
- ``produce``: an idempotent producer writes :data:`PER_CODEC` records with keys, headers and
  given timestamps under every codec (none, gzip, snappy, lz4, zstd) to TOPIC, partition =
  codec's position; then reads each partition back with ``assign`` + seek to the beginning, and
  reads from a given offset, from the end (after one more record) and by timestamp.
- ``consume``: read every partition of TOPIC from the beginning (restart tests).
- ``txn``: a transactional producer commits a transaction of three records, aborts the next,
  commits a third; then ``read_committed`` and ``read_uncommitted`` consumers read partition 0
  (the keys they get, and the end offset). Needs FindCoordinator (the group coordinator's API).

Everything is kept small: a judge run costs about a second, most of it the client's start.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 12
#: base of the records' timestamps (ms); record i of a codec is stamped BASE_TS + i * 1000
BASE_TS = 1_700_000_000_000
DEADLINE = 20.0
#: the environment variable run_judge sets to a CA file: the judge then speaks TLS
CA_ENV = "PULSARWIRE_KAFKA_JUDGE_CA"


def expected_records(codec_index: int) -> list[list[Any]]:
    """(key, value, headers, timestamp) of the records the produce scenario writes to a partition."""
    return [
        [f"k{i}", f"{CODECS[codec_index]}-{i}", [["h", f"x{i}"], ["empty", ""]], BASE_TS + i * 1000]
        for i in range(PER_CODEC)
    ]


def run_judge(
    client: str, scenario: str, bootstrap: str, topic: str, timeout: float = 120.0, ca: Path | None = None
) -> dict[str, Any]:
    """Run a judge process; returns its JSON answer (raises AssertionError with its stderr on failure).
    With ``ca`` (a PEM file) the client connects with TLS and trusts that CA."""
    env = {**os.environ, CA_ENV: str(ca)} if ca is not None else None
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.kafka_judge", client, scenario, bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, f"{client} {scenario} exited {proc.returncode}: {proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _s(b: bytes | str | None) -> str | None:
    if b is None:
        return None
    return b.decode("latin-1") if isinstance(b, bytes) else b


def _headers(hs: Any) -> list[list[str | None]]:
    return [[k, _s(v)] for k, v in (hs or [])]


# -- confluent-kafka ------------------------------------------------------------------------------


def confluent(scenario: str, bootstrap: str, topic: str) -> dict[str, Any]:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    ca = os.environ.get(CA_ENV)
    base = {
        "bootstrap.servers": bootstrap,
        **({"security.protocol": "SSL", "ssl.ca.location": ca} if ca else {}),
    }

    def consumer() -> Any:
        return Consumer(
            {**base, "group.id": "judge-unused", "enable.auto.commit": False, "auto.offset.reset": "error"}
        )

    def read(c: Any, n: int) -> list[list[Any]]:
        out: list[list[Any]] = []
        deadline = time.monotonic() + DEADLINE
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                raise RuntimeError(str(m.error()))
            out.append(
                [
                    _s(m.key()),
                    _s(m.value()),
                    _headers(m.headers()),
                    m.timestamp()[1],
                    m.partition(),
                    m.offset(),
                ]
            )
        return out

    if scenario == "admin":
        admin = AdminClient(base)

        def code(fut: Any) -> str:
            try:
                fut.result(timeout=DEADLINE)
                return "NONE"
            except KafkaException as exc:
                return str(exc.args[0].name())

        out: dict[str, Any] = {}
        fs = admin.create_topics([NewTopic(topic, 3, 1), NewTopic(f"{topic}-gone", 1, 1)])
        out["create"] = {t: code(f) for t, f in fs.items()}
        out["again"] = code(admin.create_topics([NewTopic(topic, 3, 1)])[topic])
        out["illegal"] = code(admin.create_topics([NewTopic("bad/name", 1, 1)])["bad/name"])
        out["replicas"] = code(admin.create_topics([NewTopic(f"{topic}-r", 1, 3)])[f"{topic}-r"])
        out["listed"] = sorted(t for t in admin.list_topics(timeout=DEADLINE).topics if t.startswith(topic))
        out["grow"] = code(admin.create_partitions([NewPartitions(topic, 4)])[topic])
        out["shrink"] = code(admin.create_partitions([NewPartitions(topic, 2)])[topic])
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = admin.describe_configs([res])[res].result(timeout=DEADLINE)
        out["configs"] = {k: v.value for k, v in configs.items() if k in ("cleanup.policy", "retention.ms")}
        out["partitions"] = len(admin.list_topics(topic, timeout=DEADLINE).topics[topic].partitions)
        out["delete"] = code(admin.delete_topics([f"{topic}-gone"])[f"{topic}-gone"])
        out["delete_again"] = code(admin.delete_topics([f"{topic}-gone"])[f"{topic}-gone"])
        return out

    if scenario == "txn":
        return _confluent_txn(bootstrap, topic)
    if scenario == "eos":
        return _confluent_eos(bootstrap, topic)

    if scenario == "consume":
        c = consumer()
        md = c.list_topics(topic, timeout=DEADLINE).topics[topic]
        parts = sorted(md.partitions)
        c.assign([TopicPartition(topic, p, -2) for p in parts])
        ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=DEADLINE)[1] for p in parts]
        got = read(c, sum(ends))
        c.close()
        return {"records": sorted(got, key=lambda r: (r[4], r[5])), "ends": ends}

    out = {}
    # one producer per codec, all at once (their start-up waits overlap)
    producers = [
        Producer({**base, "enable.idempotence": True, "compression.type": codec, "linger.ms": 20})
        for codec in CODECS
    ]
    for i, p in enumerate(producers):
        for key, value, headers, ts in expected_records(i):
            p.produce(
                topic, key=key, value=value, headers=[(k, v) for k, v in headers], partition=i, timestamp=ts
            )
    for p in producers:
        assert p.flush(DEADLINE) == 0
    c = consumer()
    c.assign([TopicPartition(topic, i, -2) for i in range(len(CODECS))])
    out["earliest"] = sorted(read(c, PER_CODEC * len(CODECS)), key=lambda r: (r[4], r[5]))
    c.assign([TopicPartition(topic, 0, 5)])
    out["from_offset"] = read(c, PER_CODEC - 5)
    times = c.offsets_for_times(
        [TopicPartition(topic, 1, BASE_TS + 7000), TopicPartition(topic, 2, BASE_TS + 99_000)]
    )
    out["by_time"] = [[t.partition, t.offset] for t in times]
    c.assign([TopicPartition(topic, 3, -1)])
    time.sleep(0.5)
    p = Producer(base)
    p.produce(topic, key="late", value="after-the-end", partition=3)
    p.flush(DEADLINE)
    out["latest"] = read(c, 1)
    c.close()
    return out


def _confluent_txn(bootstrap: str, topic: str) -> dict[str, Any]:
    """Commit one transaction, abort the next, commit a third; read back committed and not."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx", "linger.ms": 5})
    p.init_transactions(DEADLINE)
    for name, commit in (("first", True), ("second", False), ("third", True)):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, key=f"{name}-{i}", value=name, partition=0)
        if commit:
            p.commit_transaction(DEADLINE)
        else:
            p.flush(DEADLINE)
            p.abort_transaction(DEADLINE)
    out: dict[str, Any] = {}
    for level in ("read_committed", "read_uncommitted"):
        c = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "judge-unused", "enable.auto.commit": False,
             "isolation.level": level, "enable.partition.eof": True}
        )  # fmt: skip
        c.assign([TopicPartition(topic, 0, -2)])
        got: list[str] = []
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF: everything read
                    break
                raise RuntimeError(str(m.error()))
            got.append(_s(m.key()) or "")
        out[level] = got
        out[f"{level}_end"] = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE)[1]
        c.close()
    return out


def _confluent_eos(bootstrap: str, topic: str) -> dict[str, Any]:
    """Consume-transform-produce: a consumer of a group reads TOPIC, a transactional producer
    writes to TOPIC-out and sends the consumer's offsets with the transaction; aborted once, then
    committed."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    source = Producer({"bootstrap.servers": bootstrap})
    for i in range(4):
        source.produce(topic, value=f"in-{i}", partition=0)
    assert source.flush(DEADLINE) == 0
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-g", "enable.auto.commit": False,
         "auto.offset.reset": "earliest", "isolation.level": "read_committed"}
    )  # fmt: skip
    c.assign([TopicPartition(topic, 0, -2)])  # a group id, no membership: offsets still go to the group
    seen: list[str] = []
    deadline = time.monotonic() + DEADLINE
    while len(seen) < 4 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            seen.append(_s(m.value()) or "")
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-eos"})
    p.init_transactions(DEADLINE)
    committed = {}
    for commit, position in ((False, 2), (True, 4)):
        p.begin_transaction()
        for value in seen[:position]:
            p.produce(f"{topic}-out", value=value.replace("in", "out"), partition=0)
        p.send_offsets_to_transaction(
            [TopicPartition(topic, 0, position)], c.consumer_group_metadata(), DEADLINE
        )
        if commit:
            p.commit_transaction(DEADLINE)
        else:
            p.abort_transaction(DEADLINE)
        parts = c.committed([TopicPartition(topic, 0)], DEADLINE)
        committed["commit" if commit else "abort"] = parts[0].offset
    c.close()
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "judge-unused", "enable.auto.commit": False,
         "isolation.level": "read_committed", "enable.partition.eof": True}
    )  # fmt: skip
    reader.assign([TopicPartition(f"{topic}-out", 0, -2)])
    out: list[str] = []
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        m = reader.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:  # _PARTITION_EOF
                break
            raise RuntimeError(str(m.error()))
        out.append(_s(m.value()) or "")
    reader.close()
    return {"seen": seen, "committed": committed, "output": out}


# -- kafka-python ---------------------------------------------------------------------------------


def kafkapython(scenario: str, bootstrap: str, topic: str) -> dict[str, Any]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic
    from kafka.errors import KafkaError

    ca = os.environ.get(CA_ENV)
    tls: dict[str, Any] = {"security_protocol": "SSL", "ssl_cafile": ca} if ca else {}

    def read(c: Any, n: int) -> list[list[Any]]:
        out: list[list[Any]] = []
        deadline = time.monotonic() + DEADLINE
        while len(out) < n and time.monotonic() < deadline:
            for _tp, msgs in c.poll(timeout_ms=200).items():
                for m in msgs:
                    out.append(
                        [_s(m.key), _s(m.value), _headers(m.headers), m.timestamp, m.partition, m.offset]
                    )
        return out

    if scenario == "admin":
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **tls)

        def code(fn: Any, *args: Any) -> str:
            try:
                fn(*args)
                return "NONE"
            except KafkaError as exc:
                return type(exc).__name__

        out: dict[str, Any] = {}
        out["create"] = code(admin.create_topics, [NewTopic(topic, 3, 1), NewTopic(f"{topic}-gone", 1, 1)])
        out["again"] = code(admin.create_topics, [NewTopic(topic, 3, 1)])
        out["illegal"] = code(admin.create_topics, [NewTopic("bad/name", 1, 1)])
        out["replicas"] = code(admin.create_topics, [NewTopic(f"{topic}-r", 1, 3)])
        out["listed"] = sorted(t for t in admin.list_topics() if t.startswith(topic))
        out["grow"] = code(admin.create_partitions, {topic: NewPartitions(4)})
        out["shrink"] = code(admin.create_partitions, {topic: NewPartitions(2)})
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
        )
        entries = described["topic"][topic]
        out["configs"] = {k: entries[k]["value"] for k in ("cleanup.policy", "retention.ms") if k in entries}
        out["partitions"] = len(admin.describe_topics([topic])[0]["partitions"])
        out["delete"] = code(admin.delete_topics, [f"{topic}-gone"])
        out["delete_again"] = code(admin.delete_topics, [f"{topic}-gone"])
        admin.close()
        return out

    if scenario == "txn":
        p = KafkaProducer(bootstrap_servers=bootstrap, **tls, transactional_id=f"{topic}-tx")
        p.init_transactions()
        for name, commit in (("first", True), ("second", False), ("third", True)):
            p.begin_transaction()
            for i in range(3):
                p.send(topic, key=f"{name}-{i}".encode(), value=name.encode(), partition=0)
            if commit:
                p.commit_transaction()
            else:
                p.flush()
                p.abort_transaction()
        p.close()
        out = {}
        for level in ("read_committed", "read_uncommitted"):
            c = KafkaConsumer(
                bootstrap_servers=bootstrap, **tls, enable_auto_commit=False, isolation_level=level
            )
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek_to_beginning()
            end = c.end_offsets([tp])[tp]
            got: list[str] = []
            deadline = time.monotonic() + DEADLINE
            while c.position(tp) < end and time.monotonic() < deadline:
                got.extend(_s(m.key) or "" for msgs in c.poll(timeout_ms=200).values() for m in msgs)
            out[level] = got
            out[f"{level}_end"] = end
            c.close()
        return out

    if scenario == "consume":
        c = KafkaConsumer(bootstrap_servers=bootstrap, **tls, enable_auto_commit=False)
        parts = sorted(c.partitions_for_topic(topic) or ())
        tps = [TopicPartition(topic, p) for p in parts]
        c.assign(tps)
        c.seek_to_beginning()
        ends = c.end_offsets(tps)
        got = read(c, sum(ends.values()))
        c.close()
        return {"records": sorted(got, key=lambda r: (r[4], r[5])), "ends": [ends[tp] for tp in tps]}

    out = {}
    for i, codec in enumerate(CODECS):
        p = KafkaProducer(
            bootstrap_servers=bootstrap,
            **tls,
            enable_idempotence=True,
            compression_type=None if codec == "none" else codec,
            linger_ms=20,
        )
        for key, value, headers, ts in expected_records(i):
            p.send(
                topic, key=key.encode(), value=value.encode(), partition=i, timestamp_ms=ts,
                headers=[(k, v.encode() if v is not None else None) for k, v in headers],
            )  # fmt: skip
        p.flush(DEADLINE)
        p.close()
    c = KafkaConsumer(bootstrap_servers=bootstrap, **tls, enable_auto_commit=False)
    tps = [TopicPartition(topic, i) for i in range(len(CODECS))]
    c.assign(tps)
    c.seek_to_beginning()
    out["earliest"] = sorted(read(c, PER_CODEC * len(CODECS)), key=lambda r: (r[4], r[5]))
    c.assign([TopicPartition(topic, 0)])
    c.seek(TopicPartition(topic, 0), 5)
    out["from_offset"] = read(c, PER_CODEC - 5)
    times = c.offsets_for_times(
        {TopicPartition(topic, 1): BASE_TS + 7000, TopicPartition(topic, 2): BASE_TS + 99_000}
    )
    out["by_time"] = [[tp.partition, o.offset if o is not None else -1] for tp, o in sorted(times.items())]
    c.assign([TopicPartition(topic, 3)])
    c.seek_to_end()
    c.position(TopicPartition(topic, 3))
    p = KafkaProducer(bootstrap_servers=bootstrap, **tls)
    p.send(topic, key=b"late", value=b"after-the-end", partition=3)
    p.flush(DEADLINE)
    p.close()
    out["latest"] = read(c, 1)
    c.close()
    return out


# -- aiokafka -------------------------------------------------------------------------------------


async def _aiokafka(scenario: str, bootstrap: str, topic: str) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from aiokafka.errors import KafkaError
    from aiokafka.helpers import create_ssl_context

    ca = os.environ.get(CA_ENV)
    tls: dict[str, Any] = (
        {"security_protocol": "SSL", "ssl_context": create_ssl_context(cafile=ca)} if ca else {}
    )

    async def read(c: Any, n: int) -> list[list[Any]]:
        out: list[list[Any]] = []
        deadline = time.monotonic() + DEADLINE
        while len(out) < n and time.monotonic() < deadline:
            for _tp, msgs in (await c.getmany(timeout_ms=200)).items():
                for m in msgs:
                    out.append(
                        [_s(m.key), _s(m.value), _headers(m.headers), m.timestamp, m.partition, m.offset]
                    )
        return out

    if scenario == "admin":
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **tls)
        await admin.start()

        async def code(coro: Any) -> str:
            try:
                answer = await coro
            except KafkaError as exc:
                return type(exc).__name__
            # aiokafka hands back the response; its per-topic error codes are ours to read
            errors = [e for e in _error_codes(answer) if e]
            return f"code {errors[0]}" if errors else "NONE"

        out: dict[str, Any] = {}
        out["create"] = await code(
            admin.create_topics([NewTopic(topic, 3, 1), NewTopic(f"{topic}-gone", 1, 1)])
        )
        out["again"] = await code(admin.create_topics([NewTopic(topic, 3, 1)]))
        out["illegal"] = await code(admin.create_topics([NewTopic("bad/name", 1, 1)]))
        out["replicas"] = await code(admin.create_topics([NewTopic(f"{topic}-r", 1, 3)]))
        out["listed"] = sorted(t for t in await admin.list_topics() if t.startswith(topic))
        out["grow"] = await code(admin.create_partitions({topic: NewPartitions(4)}))
        out["shrink"] = await code(admin.create_partitions({topic: NewPartitions(2)}))
        answer = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        entries = answer[0].resources[0][4]
        out["configs"] = {e[0]: e[1] for e in entries if e[0] in ("cleanup.policy", "retention.ms")}
        described = await admin.describe_topics([topic])
        out["partitions"] = len(described[0]["partitions"])
        out["delete"] = await code(admin.delete_topics([f"{topic}-gone"]))
        out["delete_again"] = await code(admin.delete_topics([f"{topic}-gone"]))
        await admin.close()
        return out

    if scenario == "txn":
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, **tls, transactional_id=f"{topic}-tx")
        await p.start()
        for name, commit in (("first", True), ("second", False), ("third", True)):
            await p.begin_transaction()
            for i in range(3):
                await p.send_and_wait(topic, key=f"{name}-{i}".encode(), value=name.encode(), partition=0)
            if commit:
                await p.commit_transaction()
            else:
                await p.abort_transaction()
        await p.stop()
        txn_out: dict[str, Any] = {}
        for level in ("read_committed", "read_uncommitted"):
            c = AIOKafkaConsumer(
                bootstrap_servers=bootstrap, **tls, enable_auto_commit=False, isolation_level=level
            )
            await c.start()
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            end = (await c.end_offsets([tp]))[tp]
            got: list[str] = []
            deadline = time.monotonic() + DEADLINE
            while await c.position(tp) < end and time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=200)
                got.extend(_s(m.key) or "" for msgs in batches.values() for m in msgs)
            txn_out[level] = got
            txn_out[f"{level}_end"] = end
            await c.stop()
        return txn_out

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, **tls, enable_auto_commit=False)
    await c.start()
    try:
        if scenario == "consume":
            parts = sorted(c.partitions_for_topic(topic) or ())
            if not parts:
                await c._client.force_metadata_update()
                parts = sorted(c.partitions_for_topic(topic) or ())
            tps = [TopicPartition(topic, p) for p in parts]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            ends = await c.end_offsets(tps)
            got = await read(c, sum(ends.values()))
            return {"records": sorted(got, key=lambda r: (r[4], r[5])), "ends": [ends[tp] for tp in tps]}
        out = {}
        for i, codec in enumerate(CODECS):
            p = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                **tls,
                enable_idempotence=True,
                compression_type=None if codec == "none" else codec,
                linger_ms=20,
            )
            await p.start()
            futures = [
                await p.send(
                    topic,
                    key=key.encode(),
                    value=value.encode(),
                    partition=i,
                    timestamp_ms=ts,
                    headers=[(k, v.encode() if v is not None else None) for k, v in headers],
                )
                for key, value, headers, ts in expected_records(i)
            ]
            await asyncio.gather(*futures)
            await p.stop()
        tps = [TopicPartition(topic, i) for i in range(len(CODECS))]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        out["earliest"] = sorted(await read(c, PER_CODEC * len(CODECS)), key=lambda r: (r[4], r[5]))
        c.assign([TopicPartition(topic, 0)])
        c.seek(TopicPartition(topic, 0), 5)
        out["from_offset"] = await read(c, PER_CODEC - 5)
        times = await c.offsets_for_times(
            {TopicPartition(topic, 1): BASE_TS + 7000, TopicPartition(topic, 2): BASE_TS + 99_000}
        )
        out["by_time"] = [
            [tp.partition, o.offset if o is not None else -1] for tp, o in sorted(times.items())
        ]
        c.assign([TopicPartition(topic, 3)])
        await c.seek_to_end(TopicPartition(topic, 3))
        await c.position(TopicPartition(topic, 3))
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, **tls)
        await p.start()
        await p.send_and_wait(topic, key=b"late", value=b"after-the-end", partition=3)
        await p.stop()
        out["latest"] = await read(c, 1)
        return out
    finally:
        await c.stop()


def _error_codes(answer: Any) -> list[int]:
    """Every ``error_code`` in an aiokafka admin answer (a response object or a list of them)."""
    found: list[int] = []
    items = answer if isinstance(answer, list) else [answer]
    for item in items:
        obj = item.to_object() if hasattr(item, "to_object") else item

        def walk(v: Any) -> None:
            if isinstance(v, dict):
                for k, x in v.items():
                    if k == "error_code":
                        found.append(int(x))
                    walk(x)
            elif isinstance(v, list | tuple):
                for x in v:
                    walk(x)

        walk(obj)
    return found


def main(argv: list[str]) -> None:
    client, scenario, bootstrap, topic = argv
    if client == "confluent":
        result = confluent(scenario, bootstrap, topic)
    elif client == "kafkapython":
        result = kafkapython(scenario, bootstrap, topic)
    elif client == "aiokafka":
        result = asyncio.run(_aiokafka(scenario, bootstrap, topic))
    else:
        raise SystemExit(f"unknown client {client}")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
