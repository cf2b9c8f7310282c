"""Group, SASL and ACL judges: confluent-kafka, kafka-python and aiokafka in processes of their own.

``python -m tests.helpers.kafka_group_judge CLIENT SCENARIO BOOTSTRAP ARGS_JSON``; the
scenarios print JSON lines on stdout (bytes as latin-1). Client options that every scenario
shares come in ARGS_JSON (``sasl``: ``[mechanism, user, password]`` for SASL_PLAINTEXT).

- ``member``: a consumer of ``topic`` in ``group`` (confluent-kafka: a static member when
  ``instance`` names its ``group.instance.id``) with the partition assignors ``assignors``
  (protocol names, in preference order), short session and heartbeat times; prints
  ``{"assigned": [partitions]}`` whenever its assignment changes and ``{"records": [[p, offset,
  value], ...]}`` after each poll that brought some, committing them synchronously first.
  A line ``leave`` on stdin closes it (the client sends LeaveGroup), then it prints
  ``{"left": true}`` and exits.
- ``produce``: ``count`` records to each of ``partitions`` partitions of ``topic`` (creating it
  with that many partitions first when ``create``), values ``"P-I"``.
- ``committed``: the group's committed offsets of the topic's partitions, as the client reads
  them (``{"committed": {partition: offset}}``).
- ``describe``: the group as the client's admin API describes it (confluent-kafka only).
- ``groupadmin``: the admin API on a group without members (confluent-kafka, kafka-python):
  set its offsets (OffsetCommit, generation -1), list them, delete one (OffsetDelete,
  kafka-python), list and describe the groups, delete the group (DeleteGroups) and again.
- ``roundtrip``: produce one record to ``topic`` and read it back through ``group``
  (``{"value": ...}``), or ``{"error": NAME}`` with the client's name for what failed first.
- ``denied``: with grants on, try to produce to ``topic`` and consume ``topic`` in ``group``;
  ``{"produce": NAME|null, "consume": NAME|null}`` -- the client's error names.

Every client prints what it got; the tests decide.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

DEADLINE = 30.0
SESSION_MS = 6000
HEARTBEAT_MS = 300


# -- the test's side ------------------------------------------------------------------------------


def command(client: str, scenario: str, bootstrap: str, args: dict[str, Any]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.helpers.kafka_group_judge",
        client,
        scenario,
        bootstrap,
        json.dumps(args),
    ]


def run(client: str, scenario: str, bootstrap: str, timeout: float = 90.0, **args: Any) -> dict[str, Any]:
    """Run a scenario to its end; its last JSON line (AssertionError with its stderr on failure)."""
    proc = subprocess.run(
        command(client, scenario, bootstrap, args), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{client} {scenario} exited {proc.returncode}: {proc.stderr[-3000:]}"
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


class Member:
    """A ``member`` scenario running in the background; its events are read as they come."""

    def __init__(self, client: str, bootstrap: str, **args: Any) -> None:
        self.client = client
        self.proc = subprocess.Popen(
            command(client, "member", bootstrap, args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.assigned: list[int] = []
        self.records: list[list[Any]] = []
        self.left = False
        self._events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._events.put(json.loads(line))
        self._events.put(None)

    def drain(self) -> None:
        """Take in the events printed so far."""
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            if event is None:
                if not self.left:
                    assert self.proc.stderr is not None
                    raise AssertionError(f"{self.client} member died: {self.proc.stderr.read()[-3000:]}")
                return
            self.assigned = event.get("assigned", self.assigned)
            self.records.extend(event.get("records", []))
            self.left = self.left or bool(event.get("left"))

    def leave(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("leave\n")
        self.proc.stdin.flush()
        self.proc.stdin.close()
        self.proc.wait(30)
        self._reader.join(10)
        self.drain()
        assert self.proc.stderr is not None
        assert self.left and self.proc.returncode == 0, (
            f"{self.client} did not leave: {self.proc.stderr.read()[-2000:]}"
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.left = True


def wait_until(
    members: list[Member], condition: Callable[[], bool], what: str, timeout: float = DEADLINE
) -> None:
    """Poll the members' events until ``condition()``; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        for m in members:
            m.drain()
        if condition():
            return
        if time.monotonic() > deadline:
            state = {m.client: (m.assigned, len(m.records)) for m in members}
            raise AssertionError(
                f"{what}: not reached in {timeout:.0f} s; members (assigned, records): {state}"
            )
        time.sleep(0.05)


def split_evenly(members: list[Member], partitions: int) -> bool:
    """Every partition assigned to exactly one member, every member given some."""
    got = sorted(p for m in members for p in m.assigned)
    return got == list(range(partitions)) and all(m.assigned for m in members)


# -- the clients' side ----------------------------------------------------------------------------


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def _stdin_leave() -> threading.Event:
    leave = threading.Event()

    def watch() -> None:
        for line in sys.stdin:
            if line.strip() == "leave":
                break
        leave.set()

    threading.Thread(target=watch, daemon=True).start()
    return leave


class AuthErrors(logging.Handler):
    """The names of authentication errors a client logs (kafka-python and aiokafka log the broker's
    SASL refusal and then raise a bootstrap/connection error)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self.messages: list[str] = []
        logging.getLogger().addHandler(self)
        logging.getLogger().setLevel(logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        found = (
            [a for a in record.args if isinstance(a, BaseException)] if isinstance(record.args, tuple) else []
        )
        if record.exc_info and record.exc_info[1] is not None:
            found.append(record.exc_info[1])
        for exc in found:
            if "Authentication" in type(exc).__name__:
                self.names.append(type(exc).__name__)
                self.messages.append(str(exc))

    def first(self, fallback: str) -> str:
        return self.names[0] if self.names else fallback


def _python_sasl(args: dict[str, Any]) -> dict[str, Any]:
    """kafka-python's and aiokafka's SASL options (the same names in both)."""
    if not args.get("sasl"):
        return {}
    mechanism, user, password = args["sasl"]
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


def _value(v: bytes | None) -> str | None:
    return None if v is None else v.decode("latin-1")


# -- confluent-kafka ------------------------------------------------------------------------------


def confluent(scenario: str, bootstrap: str, args: dict[str, Any]) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    base: dict[str, Any] = {"bootstrap.servers": bootstrap}
    if args.get("sasl"):
        mech, user, password = args["sasl"]
        base.update(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mech,
                "sasl.username": user,
                "sasl.password": password,
            }
        )

    def consumer(group: str, **extra: Any) -> Any:
        return Consumer(
            {
                **base,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
                **extra,
            }
        )

    if scenario == "member":
        leave = _stdin_leave()
        extra = {"partition.assignment.strategy": ",".join(args["assignors"])}
        if args.get("instance"):
            extra["group.instance.id"] = args["instance"]  # static membership (KIP-345)
        c = consumer(args["group"], **extra)
        c.subscribe([args["topic"]])
        last: list[int] | None = None
        while not leave.is_set():
            msgs = c.consume(100, 0.2)
            got = [[m.partition(), m.offset(), _value(m.value())] for m in msgs if m.error() is None]
            if got:
                c.commit(asynchronous=False)
                emit(records=got)
            now = sorted(tp.partition for tp in c.assignment())
            if now != last:
                last = now
                emit(assigned=now)
        c.close()
        emit(left=True)
    elif scenario == "produce":
        if args.get("create"):
            admin = AdminClient(base)
            admin.create_topics([NewTopic(args["topic"], args["partitions"], 1)])[args["topic"]].result(10)
        p = Producer(base)
        failed: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append(f"partition {msg.partition()}: {err}")

        for part in range(args["partitions"]):
            for i in range(args["count"]):
                p.produce(args["topic"], f"{part}-{i}".encode(), partition=part, on_delivery=delivered)
        assert p.flush(20) == 0
        assert not failed, f"not delivered: {failed}"  # flush() empties the queue, failures too
        emit(produced=True)
    elif scenario == "committed":
        c = consumer(args["group"])
        tps = [TopicPartition(args["topic"], p) for p in range(args["partitions"])]
        emit(committed={str(tp.partition): tp.offset for tp in c.committed(tps, timeout=10)})
        c.close()
    elif scenario == "groupadmin":
        from confluent_kafka import ConsumerGroupTopicPartitions

        admin = AdminClient(base)
        group, topic = args["group"], args["topic"]
        tps = [TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)]
        altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[
            group
        ].result(10)
        listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
        groups = admin.list_consumer_groups().result(10).valid
        admin.delete_consumer_groups([group])[group].result(10)
        try:
            admin.delete_consumer_groups([group])[group].result(10)
            again = None
        except KafkaException as exc:
            again = exc.args[0].name()
        emit(
            altered=[tp.error is None for tp in altered.topic_partitions],
            offsets={str(tp.partition): tp.offset for tp in listed.topic_partitions},
            groups=[[g.group_id, g.state.name] for g in groups],
            deleted_again=again,
        )
    elif scenario == "describe":
        admin = AdminClient(base)
        d = admin.describe_consumer_groups([args["group"]])[args["group"]].result(10)
        emit(
            state=str(d.state.name),
            protocol=d.partition_assignor,
            members=len(d.members),
            assignments=sorted(tp.partition for m in d.members for tp in m.assignment.topic_partitions),
        )
    elif scenario in ("roundtrip", "denied"):
        errors: list[Any] = []
        conf = {**base, "error_cb": errors.append, "message.timeout.ms": 5000}
        p = Producer(conf)
        delivered: list[Any] = []
        p.produce(args["topic"], b"hello", on_delivery=lambda err, msg: delivered.append(err))
        deadline = time.monotonic() + 10
        # an authentication error ends the wait (librdkafka would retry until the message times out)
        while (
            not delivered
            and time.monotonic() < deadline
            and not any(e.code() == KafkaError._AUTHENTICATION for e in errors)
        ):
            p.flush(0.2)
        produce_error = delivered[0].name() if delivered and delivered[0] is not None else None
        if errors and produce_error in (None, "_MSG_TIMED_OUT") and not delivered:
            produce_error = errors[0].name()
        if scenario == "roundtrip" and produce_error is not None:
            emit(error=produce_error, message=errors[0].str() if errors else "")
            return
        c = Consumer(
            {
                **conf,
                "group.id": args["group"],
                "auto.offset.reset": "earliest",
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
            }
        )
        c.subscribe([args["topic"]])
        consume_error = value = None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and value is None and consume_error is None:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    consume_error = m.error().name()
            else:
                value = _value(m.value())
        with contextlib.suppress(KafkaException):
            c.close()
        if scenario == "roundtrip":
            emit(value=value, error=consume_error)
        else:
            emit(produce=produce_error, consume=consume_error)
    else:
        raise SystemExit(f"unknown scenario {scenario}")


# -- kafka-python ---------------------------------------------------------------------------------


def kafkapython(scenario: str, bootstrap: str, args: dict[str, Any]) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.errors import KafkaError

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    base: dict[str, Any] = {"bootstrap_servers": bootstrap, "bootstrap_timeout_ms": 4000}
    base.update(_python_sasl(args))

    def consumer(group: str, *topics: str, **extra: Any) -> Any:
        return KafkaConsumer(
            *topics,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            **base,
            **extra,
        )

    if scenario == "member":
        leave = _stdin_leave()
        c = consumer(
            args["group"],
            args["topic"],
            partition_assignment_strategy=[assignors[a] for a in args["assignors"]],
        )
        last: list[int] | None = None
        while not leave.is_set():
            got = [[m.partition, m.offset, _value(m.value)] for ms in c.poll(200).values() for m in ms]
            if got:
                c.commit()
                emit(records=got)
            now = sorted(tp.partition for tp in c.assignment())
            if now != last:
                last = now
                emit(assigned=now)
        c.close()
        emit(left=True)
    elif scenario == "committed":
        c = consumer(args["group"])
        emit(
            committed={
                str(p): c.committed(TopicPartition(args["topic"], p)) for p in range(args["partitions"])
            }
        )
        c.close()
    elif scenario == "groupadmin":
        from kafka.admin import KafkaAdminClient
        from kafka.structs import OffsetAndMetadata

        admin = KafkaAdminClient(**base)
        group, topic = args["group"], args["topic"]
        p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        altered = admin.alter_group_offsets(
            group, {p0: OffsetAndMetadata(5, "", -1), p1: OffsetAndMetadata(6, "", -1)}
        )
        removed = admin.delete_group_offsets(group, [p1])
        listed = admin.list_group_offsets({group: None})[group]
        described = admin.describe_groups([group])[group]
        deleted = admin.delete_groups([group])
        emit(
            altered=[e.__name__ for e in altered.values()],
            removed=[e.__name__ for e in removed.values()],
            offsets={str(tp.partition): o.offset for tp, o in listed.items()},
            state=described["group_state"],
            deleted={str(g): str(e) for g, e in (deleted.items() if isinstance(deleted, dict) else deleted)},
            after=[g["group_id"] for g in admin.list_groups()],
        )
        admin.close()
    elif scenario in ("roundtrip", "denied"):
        produce_error = consume_error = value = None
        auth = AuthErrors()
        try:
            p = KafkaProducer(**base)
            p.send(args["topic"], b"hello").get(timeout=10)
            p.close()
        except KafkaError as exc:
            produce_error = auth.first(type(exc).__name__)
        if scenario == "roundtrip" and produce_error is not None:
            emit(error=produce_error, message=(auth.messages or [""])[0])
            return
        try:
            c = consumer(args["group"], args["topic"])
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and value is None:
                for ms in c.poll(200).values():
                    value = _value(ms[0].value)
            c.close()
        except KafkaError as exc:
            consume_error = type(exc).__name__
        if scenario == "roundtrip":
            emit(value=value, error=consume_error)
        else:
            emit(produce=produce_error, consume=consume_error)
    else:
        raise SystemExit(f"unknown scenario {scenario}")


# -- aiokafka -------------------------------------------------------------------------------------


async def _aiokafka(scenario: str, bootstrap: str, args: dict[str, Any]) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.errors import KafkaError

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    base: dict[str, Any] = {"bootstrap_servers": bootstrap}
    base.update(_python_sasl(args))

    def consumer(group: str, *topics: str, **extra: Any) -> Any:
        return AIOKafkaConsumer(
            *topics,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            **base,
            **extra,
        )

    if scenario == "member":
        leave = _stdin_leave()
        c = consumer(
            args["group"],
            args["topic"],
            partition_assignment_strategy=tuple(assignors[a] for a in args["assignors"]),
        )
        await c.start()
        last: list[int] | None = None
        while not leave.is_set():
            batches = await c.getmany(timeout_ms=200)
            got = [[m.partition, m.offset, _value(m.value)] for ms in batches.values() for m in ms]
            if got:
                await c.commit()
                emit(records=got)
            now = sorted(tp.partition for tp in c.assignment())
            if now != last:
                last = now
                emit(assigned=now)
        await c.stop()
        emit(left=True)
    elif scenario == "committed":
        c = consumer(args["group"])
        await c.start()
        emit(
            committed={
                str(p): await c.committed(TopicPartition(args["topic"], p)) for p in range(args["partitions"])
            }
        )
        await c.stop()
    elif scenario in ("roundtrip", "denied"):
        produce_error = consume_error = value = None
        auth = AuthErrors()
        p = AIOKafkaProducer(**base)
        try:
            await p.start()
            await asyncio.wait_for(p.send_and_wait(args["topic"], b"hello"), 10)
        except (TimeoutError, KafkaError) as exc:
            produce_error = auth.first(type(exc).__name__)
        finally:
            await p.stop()
        if scenario == "roundtrip" and produce_error is not None:
            emit(error=produce_error, message=(auth.messages or [""])[0])
            return
        c = consumer(args["group"], args["topic"])
        try:
            await c.start()
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and value is None:
                for ms in (await c.getmany(timeout_ms=200)).values():
                    value = _value(ms[0].value)
        except KafkaError as exc:
            consume_error = type(exc).__name__
        finally:
            await c.stop()
        if scenario == "roundtrip":
            emit(value=value, error=consume_error)
        else:
            emit(produce=produce_error, consume=consume_error)
    else:
        raise SystemExit(f"unknown scenario {scenario}")


def aiokafka(scenario: str, bootstrap: str, args: dict[str, Any]) -> None:
    asyncio.run(_aiokafka(scenario, bootstrap, args))


CLIENTS = {"confluent": confluent, "kafkapython": kafkapython, "aiokafka": aiokafka}

if __name__ == "__main__":
    client, scenario, bootstrap, raw = sys.argv[1:5]
    CLIENTS[client](scenario, bootstrap, json.loads(raw))
