"""``pulsarwire.testing.process``: our broker as a separate process."""

from __future__ import annotations

import pytest

from pulsarwire.client.blocking import Client
from pulsarwire.codec.message_id import MessageId
from pulsarwire.testing.process import broker_process


def test_broker_process_serves_until_the_block_ends() -> None:
    with broker_process() as url:
        assert url.startswith("pulsar://127.0.0.1:")
        client = Client(url)
        try:
            client.create_producer("persistent://public/default/process").send(b"hello")
            reader = client.create_reader("persistent://public/default/process", MessageId.EARLIEST)
            assert reader.read_next(10_000).data() == b"hello"
        finally:
            client.close()


def test_a_broker_that_exits_at_once_is_reported_with_its_exit_code() -> None:
    with pytest.raises(RuntimeError, match=r"exit code 2"), broker_process("--no-such-option"):
        pass


def test_the_start_deadline_holds_while_the_broker_prints_nothing() -> None:
    # Python alone takes longer than this to start: no line has come when the deadline passes.
    with pytest.raises(RuntimeError, match=r"within 0.001 s"), broker_process(start_timeout=0.001):
        pass
