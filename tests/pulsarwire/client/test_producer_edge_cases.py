"""Producer edge cases against misbehaving brokers: redirect loops, receipts ahead, timeouts, full queues."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client
from pulsarwire.codec import new_command
from pulsarwire.codec.frames import Frame
from pulsarwire.errors import ProducerQueueIsFullError, SendTimeoutError, TooManyRedirectsError
from pulsarwire.proto import pb
from tests.helpers.judge import new_topic, payloads, read_all
from tests.helpers.recorder import Connection, Recorder

T = pb.BaseCommand


class RedirectLoop(Recorder):
    """Answers every LOOKUP with a Redirect to itself."""

    def _respond(self, conn: Connection, frame: Frame) -> None:
        if frame.command.type == T.LOOKUP:
            cmd, sub = new_command(T.LOOKUP_RESPONSE)
            sub.request_id = frame.command.lookupTopic.request_id
            sub.brokerServiceUrl = self.url
            sub.response = pb.CommandLookupTopicResponse.Redirect
            sub.authoritative = True
            conn.reply(cmd)
        else:
            super()._respond(conn, frame)


def test_lookup_redirect_loop_is_bounded() -> None:
    with RedirectLoop() as broker:
        client = Client(broker.url, operation_timeout_seconds=2)
        try:
            with pytest.raises(TooManyRedirectsError):
                client.create_producer("looping")
        finally:
            client.close()
        assert len(broker.frames(T.LOOKUP)) >= 20


class ReceiptAhead(Recorder):
    """The first SEND gets a receipt for a later sequence id (the broker 'lost' the message)."""

    tricked = False

    def _on_send(self, conn: Connection, frame: Frame) -> None:
        if not self.tricked:
            self.tricked = True
            cmd, sub = new_command(T.SEND_RECEIPT)
            sub.producer_id = frame.command.send.producer_id
            sub.sequence_id = frame.command.send.sequence_id + 5
            sub.message_id.ledgerId, sub.message_id.entryId = 7, 7
            conn.reply(cmd)
            return
        super()._on_send(conn, frame)


def test_receipt_ahead_of_the_pending_message_forces_reconnect_and_resend() -> None:
    with ReceiptAhead() as broker:
        client = Client(broker.url, operation_timeout_seconds=5)
        try:
            producer = client.create_producer("ahead", batching_enabled=False)
            mid = producer.send(b"only-once")
        finally:
            client.close()
        per_connection = [
            [c.command.send.sequence_id for c in conn if c.type == T.SEND]
            for conn in broker.captured_by_connection()
        ]
        # resent with the same sequence id, on a new connection
        assert [seqs for seqs in per_connection if seqs] == [[0], [0]]
        entries = broker.entries("persistent://public/default/ahead")
        assert len(entries) == 1 and entries[0].section.endswith(b"only-once")
        assert (mid.ledger_id, mid.entry_id) == (
            entries[0].message_id.ledger_id,
            entries[0].message_id.entry_id,
        )


def test_send_timeout_fails_the_message(start_broker: Callable[..., Broker]) -> None:
    b = start_broker()
    client = Client(b.service_url)
    try:
        producer = client.create_producer(new_topic(), batching_enabled=False, send_timeout_millis=300)
        b.inject(delay_receipts=1, receipt_delay=2.0)
        started = time.monotonic()
        with pytest.raises(SendTimeoutError):
            producer.send(b"slow")
        assert time.monotonic() - started < 1.5
    finally:
        client.close()


def test_pending_queue_full_fails_or_blocks(start_broker: Callable[..., Broker]) -> None:
    b = start_broker()
    topic = new_topic()
    client = Client(b.service_url)
    try:
        failing = client.create_producer(topic, batching_enabled=False, max_pending_messages=5)
        b.inject(delay_receipts=5, receipt_delay=0.5)
        for v in payloads(5):
            failing.send_async(v, None)
        with pytest.raises(ProducerQueueIsFullError):
            failing.send_async(b"one-too-many", None)
        failing.flush()
        blocking = client.create_producer(
            topic, batching_enabled=False, max_pending_messages=5, block_if_queue_full=True
        )
        b.inject(delay_receipts=5, receipt_delay=0.3)
        started = time.monotonic()
        for v in payloads(8, "b"):
            blocking.send_async(v, None)  # the 6th waits for a receipt instead of failing
        assert time.monotonic() - started >= 0.25
        blocking.flush()
    finally:
        client.close()
    assert read_all(b.service_url, topic, 13) == payloads(5) + payloads(8, "b")
