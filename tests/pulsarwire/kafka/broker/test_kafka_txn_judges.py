"""Transactions judged by the three clients, each in a process of its own, against
``python -m pulsarwire.kafka.broker`` (FindCoordinator from the group coordinator, the rest
from the broker core's transaction coordinator):

- each client's transactional producer commits a transaction, aborts the next, commits a third;
  a ``read_committed`` consumer gets the committed records only, a ``read_uncommitted`` one
  all nine; both see the end offset past the three markers;
- exactly once, consume-transform-produce (confluent-kafka): a consumer's group offsets go with
  the transaction (``send_offsets_to_transaction``); after an abort the group has no committed
  offset and the output nothing; after the commit both are there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from pulsarwire.testing.process import kafka_broker_process
from tests.helpers.kafka_judge import run_judge


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with kafka_broker_process() as address:
        yield address


@pytest.mark.parametrize("client", ["confluent", "kafkapython", "aiokafka"])
def test_committed_and_aborted_transactions(bootstrap: str, client: str) -> None:
    result = run_judge(client, "txn", bootstrap, f"txn-{client}-{uuid.uuid4().hex[:8]}")
    keys = [f"{name}-{i}" for name in ("first", "second", "third") for i in range(3)]
    assert result == {
        "read_committed": [k for k in keys if not k.startswith("second")],
        "read_committed_end": 12,
        "read_uncommitted": keys,
        "read_uncommitted_end": 12,
    }


def test_consume_transform_produce_commits_offsets_with_the_transaction(bootstrap: str) -> None:
    result = run_judge("confluent", "eos", bootstrap, f"eos-{uuid.uuid4().hex[:8]}")
    assert result["seen"] == ["in-0", "in-1", "in-2", "in-3"]
    assert result["committed"] == {"abort": -1001, "commit": 4}  # -1001: no committed offset
    assert result["output"] == ["out-0", "out-1", "out-2", "out-3"]
