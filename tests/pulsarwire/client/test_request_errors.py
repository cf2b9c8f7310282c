"""A broker error answering one request fails that request, at once, and nothing else.

A scripted fake broker answers one topic's PRODUCER / SUBSCRIBE / LOOKUP / PARTITIONED_METADATA
with an error that no retry can cure (InvalidTopicName, NotAllowed, AuthorizationError,
TopicNotFound): the call raises that typed error after exactly one request, and the producer
already working on the same connection keeps its connection (one CONNECT in all) and its
sends. Our own broker is asked for ``"y" * 300`` too: today it stores the name (an answer, not a
dropped connection), and whatever it answers comes back fast.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest

from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client
from pulsarwire.codec import Frame, new_command
from pulsarwire.errors import (
    AuthorizationError,
    InvalidTopicName,
    NotAllowedError,
    ServerError,
    TopicNotFound,
)
from pulsarwire.proto import pb
from tests.helpers.fake_broker import ScriptedBroker, error_answer, lookup_answer, topic_of
from tests.helpers.recorder import Connection

T = pb.BaseCommand
GOOD = "persistent://public/default/good"
LONG = "y" * 300
BAD = f"persistent://public/default/{LONG}"
ERRORS = [
    pytest.param(InvalidTopicName, id="InvalidTopicName"),
    pytest.param(NotAllowedError, id="NotAllowed"),
    pytest.param(AuthorizationError, id="AuthorizationError"),
    pytest.param(TopicNotFound, id="TopicNotFound"),
]


def on_bad(frame: Frame) -> bool:
    return topic_of(frame) == BAD


def partitioned_metadata_failed(code: int) -> Callable[[Connection, Frame], bool]:
    def answer(conn: Connection, frame: Frame) -> bool:
        if not on_bad(frame):
            return False
        cmd, r = new_command(T.PARTITIONED_METADATA_RESPONSE)
        r.request_id = frame.sub.request_id
        r.response = pb.CommandPartitionedTopicMetadataResponse.Failed
        r.error = code  # type: ignore[assignment]
        r.message = "refused by the script"
        conn.reply(cmd)
        return True

    return answer


def assert_bystander_unharmed(fake: ScriptedBroker, producer: object, sends_before: int) -> None:
    producer.send(b"still here")  # type: ignore[attr-defined]
    assert len(fake.frames(T.SEND)) == sends_before + 1
    assert len(fake.frames(T.CONNECT)) == 1, "the error cost the other producer its connection"


@pytest.mark.parametrize("error", ERRORS)
@pytest.mark.parametrize("request_type", ["PRODUCER", "SUBSCRIBE", "LOOKUP", "PARTITIONED_METADATA"])
def test_refused_request_fails_once_with_its_typed_error(
    fake: ScriptedBroker, fake_pw: Client, error: type[ServerError], request_type: str
) -> None:
    bystander = fake_pw.create_producer(GOOD)
    bystander.send(b"before")
    kind = getattr(T, request_type)
    if kind == T.LOOKUP:
        fake.script(kind, lookup_answer(failed=error.code, when=on_bad))
    elif kind == T.PARTITIONED_METADATA:
        fake.script(kind, partitioned_metadata_failed(error.code))
    else:
        fake.script(kind, error_answer(error.code, f"no {LONG[:10]}...", when=on_bad))
    with pytest.raises(error):
        if kind == T.SUBSCRIBE:
            fake_pw.subscribe(BAD, "sub")
        else:
            fake_pw.create_producer(BAD)
    asked = [f for f in fake.frames(kind) if topic_of(f.decoded) == BAD]
    assert len(asked) == 1, f"{request_type} was sent {len(asked)} times"
    assert_bystander_unharmed(fake, bystander, 1)


def test_our_broker_answers_a_300_character_topic_name_at_once(broker: Broker) -> None:
    """In memory our broker stores the name; with any typed answer the call returns at once."""
    b = broker
    client = Client(b.service_url, operation_timeout_seconds=10)
    try:
        bystander = client.create_producer(GOOD)
        started = time.monotonic()
        with contextlib.suppress(ServerError):  # a typed refusal is an answer too
            client.create_producer(LONG).send(b"long name")
        took = time.monotonic() - started
        bystander.send(b"still here")
    finally:
        client.close()
    assert took < 5, f"create_producer of a 300-character topic took {took:.1f} s (a retry loop?)"
    assert b.connections_accepted == 1
