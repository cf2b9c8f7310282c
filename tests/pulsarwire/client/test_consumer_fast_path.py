"""The blocking consumer's fast path: the lock-free receive queue and acks grouped on the caller's thread.

First the queue alone (:class:`~pulsarwire.client.receive_queue.MessageQueue` between a real event
loop and caller threads): every message goes to exactly one taker, and every message is counted
once, as taken (settled to its owner) or as dropped. Then against our broker with the official
client as the judge: concurrent ``receive`` calls, the permits with a tiny receiver queue, acks
sent within the group time, a full group sent at once, grouped acks flushed by ``close``, and acks
of a closed consumer refused.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pulsar
import pytest

from pulsarwire.broker import Broker
from pulsarwire.client.acks import MAX_GROUPED
from pulsarwire.client.blocking import Client, ConsumerType, InitialPosition
from pulsarwire.client.message import Delivery, Message, messages_of
from pulsarwire.client.receive_queue import MessageQueue, pop_front
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import AlreadyClosedError, OperationTimeoutError, ReachedEndOfTopicError
from pulsarwire.proto import pb
from tests.helpers.judge import assert_silent, payloads, send_all, wait_until
from tests.helpers.pw_client import backlog, pw_receive_n

EARLIEST = InitialPosition.Earliest


# -- the queue alone ------------------------------------------------------------------------------


@dataclass
class _Config:
    receiver_queue_size: int


@dataclass(eq=False)
class _Owner:
    """Stands for a PartitionConsumer: what the queue asks of one."""

    topic: str
    config: _Config = field(default_factory=lambda: _Config(100))
    last_taken: Message | None = None
    settled: list[Message] = field(default_factory=list)

    def handed_out(self, messages: list[Message]) -> None:
        self.settled.extend(messages)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def _on(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: object) -> None:
    """Run ``fn(*args)`` on the loop and wait for it."""

    async def go() -> None:
        fn(*args)

    asyncio.run_coroutine_threadsafe(go(), loop).result(5)


def _messages(owner: _Owner, entry: int, n: int) -> list[Message]:
    delivery = Delivery((1, entry), -1, n, owner.topic, pb.MessageMetadata(), 0)
    return messages_of(delivery, [b"%d-%d" % (entry, i) for i in range(n)], [None] * n, range(n))


def test_concurrent_takers_get_every_message_once_and_the_loop_settles_each_once(
    loop: asyncio.AbstractEventLoop,
) -> None:
    queue = MessageQueue()
    owners = [_Owner("a"), _Owner("b")]
    for o in owners:
        queue.register(o)
    entries, per_entry = 200, 50
    got: list[list[Message]] = [[] for _ in range(4)]
    done = threading.Event()

    def take(mine: list[Message]) -> None:
        while not (done.is_set() and not len(queue)):
            msg = queue.take()
            if msg is None:
                queue.wait_ready(0.05, stop=False)
            else:
                mine.append(msg)

    takers = [threading.Thread(target=take, args=(g,)) for g in got]
    for t in takers:
        t.start()
    sent = []
    for e in range(entries):
        msgs = _messages(owners[e % 2], e, per_entry)
        sent += msgs
        loop.call_soon_threadsafe(queue.put_many, msgs)
        time.sleep(0.0005)  # entries keep arriving while the takers take
    _on(loop, lambda: None)  # every put ran
    done.set()
    for t in takers:
        t.join(10)
    taken = [m for g in got for m in g]
    assert Counter(map(id, taken)) == Counter(map(id, sent))  # each to exactly one taker
    assert sum(1 for g in got if g) >= 2  # ... and they did take turns
    _on(loop, queue.settle)
    for o in owners:  # each settled once, to its owner
        assert Counter(map(id, o.settled)) == Counter(id(m) for m in sent if m.topic_name() == o.topic)


class _Uncomparable:
    """An item that fails when compared: popping must not compare (a Message's ``==`` is Python code)."""

    def __eq__(self, other: object) -> bool:
        raise AssertionError("compared")

    __hash__ = object.__hash__


def test_pop_front_pops_that_many_in_order_without_comparing_them() -> None:
    items = [_Uncomparable() for _ in range(5)]
    waiting = deque(items)
    first = pop_front(waiting, 3)
    assert [id(x) for x in first] == [id(x) for x in items[:3]]
    assert [id(x) for x in waiting] == [id(x) for x in items[3:]]
    rest = pop_front(waiting, 2)
    assert [id(x) for x in rest] == [id(x) for x in items[3:]] and not waiting
    assert pop_front(waiting, 0) == []


def test_a_taker_asks_the_loop_to_settle_after_half_a_receiver_queue(loop: asyncio.AbstractEventLoop) -> None:
    queue = MessageQueue()
    owner = _Owner("a", _Config(10))
    queue.register(owner)
    _on(loop, queue.put_many, _messages(owner, 1, 8))
    for _ in range(4):
        assert queue.take() is not None
    time.sleep(0.05)
    assert owner.settled == []  # fewer than half a queue taken: the loop was not bothered
    assert queue.take() is not None  # the 5th: half of 10
    wait_until(lambda: len(owner.settled) == 5)
    assert owner.last_taken is not None and owner.last_taken.message_id() == MessageId(1, 1, -1, 4, 8)
    out, size = queue.take_many(10, 1 << 20)
    assert len(out) == 3 and size == sum(len(m.data()) for m in out)
    wait_until(lambda: len(owner.settled) == 8)  # the queue ran empty: settled without waiting for more


def test_dropped_messages_are_never_handed_out_and_each_is_counted_once(
    loop: asyncio.AbstractEventLoop,
) -> None:
    queue = MessageQueue()
    a, b = _Owner("a"), _Owner("b")
    queue.register(a)
    queue.register(b)
    _on(loop, queue.put_many, _messages(a, 1, 5))
    _on(loop, queue.put_many, _messages(b, 2, 5))
    first = queue.take()
    assert first is not None and first.topic_name() == "a"
    dropped: list[int] = []
    _on(loop, lambda: dropped.append(queue.drop(a)))
    assert dropped == [4] and len(queue) == 5 and not queue.holds(a) and queue.holds(b)
    assert a.settled == [first]  # settled before the drop: taken, not dropped
    rest = [queue.take() for _ in range(6)]
    assert [m.topic_name() for m in rest if m is not None] == ["b"] * 5 and rest[-1] is None


# -- against our broker ---------------------------------------------------------------------------


def _produce(client: pulsar.Client, topic: str, n: int, *, batching: bool) -> list[bytes]:
    producer = client.create_producer(
        topic, batching_enabled=batching, batching_max_messages=10, block_if_queue_full=True
    )
    values = payloads(n)
    send_all(producer, values)
    producer.close()
    return values


def test_receivers_on_several_threads_get_each_message_exactly_once(
    client: pulsar.Client, pw: Client, topic: str, shared_broker: Broker
) -> None:
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST, receiver_queue_size=50)
    values = _produce(client, topic, 2000, batching=True)
    got: list[list[bytes]] = [[] for _ in range(4)]
    # each thread waits after its first message until every thread has one: they really take
    # from the queue at the same time, whichever the scheduler runs first
    all_started = threading.Barrier(len(got), timeout=30)

    def receive(mine: list[bytes]) -> None:
        while True:
            try:
                msg = consumer.receive(500)
            except OperationTimeoutError:
                return
            consumer.acknowledge(msg)
            mine.append(msg.data())
            if len(mine) == 1:
                all_started.wait()

    threads = [threading.Thread(target=receive, args=(g,)) for g in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(v for g in got for v in g) == values  # none lost, none twice
    assert all(got)  # every thread took messages
    consumer.close()  # flushes the acks
    assert backlog(shared_broker, topic, "sub") == 0


def test_a_tiny_receiver_queue_still_gets_everything_in_order(
    client: pulsar.Client, pw: Client, topic: str
) -> None:
    # Permits come back from messages taken on this thread, settled by the loop in halves.
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST, receiver_queue_size=4)
    values = _produce(client, topic, 300, batching=False)
    assert [m.data() for m in pw_receive_n(consumer, 300, ack=True)] == values
    (part,) = consumer._core.parts
    books = part.permits
    assert books.entries <= books.granted  # the broker never sent beyond the permits
    wait_until(lambda: books.granted - books.entries <= 4)  # nothing taken is left unsettled


def test_acks_wait_for_the_group_time_then_go_out(
    client: pulsar.Client, pw: Client, topic: str, shared_broker: Broker
) -> None:
    group_ms = 1500
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST, ack_group_time_ms=group_ms)
    _produce(client, topic, 10, batching=False)
    messages = pw_receive_n(consumer, 10)
    first_ack = time.monotonic()
    for m in messages:
        consumer.acknowledge(m)
    if time.monotonic() - first_ack < group_ms / 1000 / 2:  # (a stall this long says nothing)
        assert backlog(shared_broker, topic, "sub") == 10  # grouped: not sent yet
    wait_until(lambda: backlog(shared_broker, topic, "sub") == 0, timeout=group_ms / 1000 + 5)
    assert time.monotonic() - first_ack >= group_ms / 1000 * 0.9


def test_a_full_group_goes_out_without_waiting_for_the_group_time(
    client: pulsar.Client, pw: Client, topic: str, shared_broker: Broker
) -> None:
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST, ack_group_time_ms=120_000)
    _produce(client, topic, MAX_GROUPED, batching=False)  # one entry each
    for m in pw_receive_n(consumer, MAX_GROUPED):
        consumer.acknowledge(m)
    wait_until(lambda: backlog(shared_broker, topic, "sub") == 0, timeout=10)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_close_sends_the_grouped_acks_before_closing(
    client: pulsar.Client, pw: Client, topic: str, shared_broker: Broker, batching: bool
) -> None:
    consumer = pw.subscribe(
        topic, "sub", consumer_type=ConsumerType.Shared, initial_position=EARLIEST, ack_group_time_ms=120_000
    )
    _produce(client, topic, 50, batching=batching)
    for m in pw_receive_n(consumer, 50):
        consumer.acknowledge(m)
    consumer.close()  # at once: the acks still wait in their group
    assert backlog(shared_broker, topic, "sub") == 0
    judge = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert_silent(judge)  # nothing acknowledged comes back


def test_acks_by_message_by_id_and_cumulative_mixed_in_one_group_ack_everything(
    client: pulsar.Client, pw: Client, topic: str, shared_broker: Broker
) -> None:
    # The loop reads a group's acks of Messages as runs and the others one by one, in order.
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST, ack_group_time_ms=120_000)
    _produce(client, topic, 40, batching=True)  # entries of 10
    messages = pw_receive_n(consumer, 40)
    for m in messages[:15]:
        consumer.acknowledge(m if m.data()[-1] % 2 else m.message_id())
    consumer.acknowledge_cumulative(messages[29])  # half way through the third batch
    for m in reversed(messages[30:]):
        consumer.acknowledge(m.message_id() if m.data()[-1] % 3 else m)
    consumer.close()  # sends the group
    assert backlog(shared_broker, topic, "sub") == 0
    judge = client.subscribe(topic, "sub")
    assert_silent(judge)


def test_acks_of_a_closed_consumer_raise(client: pulsar.Client, pw: Client, topic: str) -> None:
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST)
    _produce(client, topic, 1, batching=False)
    (msg,) = pw_receive_n(consumer, 1)
    consumer.close()
    for ack in (consumer.acknowledge, consumer.acknowledge_cumulative, consumer.negative_acknowledge):
        with pytest.raises(AlreadyClosedError):
            ack(msg)


def test_batch_receive_gathers_across_entries_then_reports_the_end_of_the_topic(
    client: pulsar.Client, pw: Client, topic: str, shared_broker: Broker
) -> None:
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST, receiver_queue_size=20)
    values = _produce(client, topic, 60, batching=True)  # entries of 10, at most 2 queued
    shared_broker.terminate_topic(topic)
    batch = consumer.batch_receive(45, timeout_ms=30_000)
    assert [m.data() for m in batch] == values[:45]  # gathered across entries as they came
    for m in batch:
        consumer.acknowledge(m)
    rest = consumer.batch_receive(45, timeout_ms=300)
    assert [m.data() for m in rest] == values[45:]
    for m in rest:
        consumer.acknowledge(m)
    with pytest.raises(ReachedEndOfTopicError):  # everything acknowledged: the broker says so
        consumer.batch_receive(45, timeout_ms=10_000)
