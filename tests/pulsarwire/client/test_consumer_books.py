"""The consumer's books without a broker: ack grouping, redelivery timers, FLOW permits, cumulative acks."""

from __future__ import annotations

import asyncio

import pytest

from pulsarwire.client.acks import (
    MAX_GROUPED,
    AckGroup,
    merge_ack_sets,
    refuse_cumulative,
    run_of_id,
    runs_of_messages,
)
from pulsarwire.client.flow import PermitBooks
from pulsarwire.client.message import Delivery, messages_of
from pulsarwire.client.redelivery import RedeliveryTimers
from pulsarwire.codec.batch import ack_set_for, unacked_indexes
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import InvalidConfigurationError
from pulsarwire.proto import pb

SubType = pb.CommandSubscribe.SubType


def group(flushes: list[int], *, batch_index_ack_enabled: bool = True, group_time_ms: int = 0) -> AckGroup:
    return AckGroup(
        batch_index_ack_enabled=batch_index_ack_enabled,
        group_time_ms=group_time_ms,
        flush=lambda: flushes.append(1),
    )


def test_a_batch_is_acked_whole_once_every_index_is() -> None:
    flushes: list[int] = []
    acks = group(flushes)
    first, second = MessageId(3, 7, -1, 0, 2), MessageId(3, 7, -1, 1, 2)
    assert acks.entries_done([run_of_id(first)]) == []
    assert acks.pending == {(3, 7): []}  # partly acked: its ack_set is made when sent
    assert acks.still_unacked((3, 7), 2) == {1}
    cmd = acks.individual_command(consumer_id=5)
    (sent,) = cmd.ack.message_id
    assert (sent.ledgerId, sent.entryId, list(unacked_indexes(list(sent.ack_set), 2))) == (3, 7, [1])
    assert acks.entries_done([run_of_id(second)]) == [(3, 7)]
    assert (3, 7) not in acks.batches and flushes  # group time 0: flushed at once


def test_runs_of_acks_complete_each_batch_once() -> None:
    acks = group([], batch_index_ack_enabled=False)
    run = [MessageId(1, e, -1, i, 3) for e in (4, 5) for i in (0, 1)]
    run.insert(2, MessageId(1, 9))  # a message that is a whole entry between the batches
    assert acks.entries_done(map(run_of_id, run)) == [(1, 9)]
    assert acks.batches == {(1, 4): {0, 1}, (1, 5): {0, 1}}
    again = [MessageId(1, 5, -1, 1, 3), MessageId(1, 5, -1, 2, 3), MessageId(1, 4, -1, 2, 3)]
    assert acks.entries_done(map(run_of_id, again)) == [(1, 5), (1, 4)]  # a repeated index counts once
    assert acks.batches == {}


def test_without_batch_index_acks_a_partial_batch_waits() -> None:
    acks = group([], batch_index_ack_enabled=False)
    assert acks.entries_done([run_of_id(MessageId(3, 7, -1, 0, 2))]) == []
    assert acks.pending == {}
    assert acks.still_unacked((3, 7), 2) is None


def test_a_cumulative_ack_keeps_the_furthest() -> None:
    acks = group([])
    acks.cumulative(MessageId(1, 5, -1, 0, 3))
    assert acks.pending_cumulative == (MessageId(1, 5, -1, 0, 3), ack_set_for(3, [1, 2]))
    acks.cumulative(MessageId(1, 2))
    assert acks.pending_cumulative is not None and acks.pending_cumulative[0] == MessageId(1, 5, -1, 0, 3)
    cmd = AckGroup.cumulative_command(9, acks.pending_cumulative)
    assert cmd.ack.ack_type == pb.CommandAck.Cumulative and cmd.ack.message_id[0].entryId == 5
    no_index = group([], batch_index_ack_enabled=False)
    no_index.cumulative(MessageId(1, 5, -1, 0, 3))
    assert no_index.pending_cumulative == (MessageId(1, 4, -1), None)  # only the entries before the batch


def test_requeued_acks_merge_with_newer_ones() -> None:
    acks = group([])
    acks.pending = {(1, 1): [0b110]}
    acks.requeue({(1, 1): [0b011], (1, 2): None}, (MessageId(1, 9), None))
    assert acks.pending == {(1, 1): [0b010], (1, 2): None}
    assert acks.pending_cumulative == (MessageId(1, 9), None)
    assert merge_ack_sets(None, [1]) is None


def test_acks_from_threads_come_out_in_order_and_tell_the_loop_once_per_group() -> None:
    acks = group([])
    assert acks.from_thread(("individual", MessageId(1, 1)))  # the first: the loop is told
    assert not acks.from_thread(("negative", MessageId(1, 2)))  # told already
    waiting = acks.take_from_threads()
    assert list(waiting) == [("individual", MessageId(1, 1)), ("negative", MessageId(1, 2))]
    waiting.clear()
    assert acks.from_thread(("individual", MessageId(1, 3)))  # after the loop took them: told again
    told = [acks.from_thread(("individual", MessageId(2, i))) for i in range(MAX_GROUPED - 1)]
    assert told[-1] and not any(told[:-1])  # a full group waiting tells the loop again


def test_many_acks_are_sent_without_waiting_for_the_group_time() -> None:
    async def run() -> list[int]:
        flushes: list[int] = []
        acks = group(flushes, group_time_ms=60_000)
        for i in range(MAX_GROUPED):
            acks.add((1, i), None)
        acks.cancel_timer()
        return flushes

    assert asyncio.run(run()) == [1]


@pytest.mark.parametrize("kind", [SubType.Shared, SubType.Key_Shared])
def test_cumulative_acks_are_refused_on_shared_subscriptions(kind: int) -> None:
    with pytest.raises(InvalidConfigurationError):
        refuse_cumulative(kind)


@pytest.mark.parametrize("kind", [SubType.Exclusive, SubType.Failover])
def test_cumulative_acks_are_allowed_on_exclusive_subscriptions(kind: int) -> None:
    assert refuse_cumulative(kind) is None


def test_redelivery_timers() -> None:
    timers = RedeliveryTimers()
    timers.nack((1, 1), due=10.0)
    timers.handed_out((1, 2), due=5.0)
    timers.handed_out((1, 3), due=5.0)
    timers.handed_out((1, 1), due=1.0)
    assert timers.due(4.0) == [(1, 1)]
    assert timers.due(10.0) == [(1, 1), (1, 2), (1, 3)]  # negative acks first, each entry once
    timers.acked_up_to((1, 2))
    assert timers.due(10.0) == [(1, 1), (1, 3)]
    timers.acked((1, 1))
    assert timers.due(10.0) == [(1, 3)]
    timers.clear()
    assert timers.due(100.0) == []


def test_permits_go_back_in_halves() -> None:
    books = PermitBooks(receiver_queue_size=10)
    assert [books.consume(1) for _ in range(5)] == [0, 0, 0, 0, 5]
    assert books.consumed == 0


def test_a_broker_sending_more_entries_than_permits_is_caught() -> None:
    books = PermitBooks(receiver_queue_size=10)
    books.granting(2)
    assert books.entry(100) and books.entry(1)  # a batch takes one permit per entry at least
    assert not books.entry(1)
    books.redelivery_requested()  # the broker may give back one permit per message it sent
    assert books.granted == 2 + 102


def test_a_corrupt_count_widens_the_books() -> None:
    books = PermitBooks(receiver_queue_size=10)
    books.granting(1)
    assert books.entry(-5)  # may have given the broker permits: widened by at most a queue
    assert books.granted == 1 + 6
    books.restart()
    assert (books.granted, books.entries, books.received, books.consumed) == (0, 0, 0, 0)


def test_acks_of_messages_come_as_one_run_per_delivered_entry() -> None:
    md = pb.MessageMetadata()
    first, again, other = (Delivery(e, -1, 3, "t", md, 0) for e in ((1, 4), (1, 4), (1, 5)))
    a = messages_of(first, [b"a0", b"a1", b"a2"], [None] * 3, range(3))
    b = messages_of(other, [b"b0", b"b1", b"b2"], [None] * 3, range(3))
    redelivered = messages_of(again, [b"a2"], [None], [2])  # (1, 4) delivered again: another run
    acked = [a[0], a[1], b[0], b[2], b[1], *redelivered]
    assert runs_of_messages(acked) == [((1, 4), 3, [0, 1]), ((1, 5), 3, [0, 2, 1]), ((1, 4), 3, [2])]
    acks = group([], batch_index_ack_enabled=False)
    assert acks.entries_done(runs_of_messages(acked)) == [(1, 5), (1, 4)]
    single = Delivery((2, 0), -1, 0, "t", md, 0)  # not a batch: the entry whole
    assert runs_of_messages(messages_of(single, [b"s"], [None], [-1])) == [((2, 0), 0, [-1])]
    assert acks.entries_done([run_of_id(MessageId(2, 0))]) == [(2, 0)]
