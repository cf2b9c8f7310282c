"""A message that can never be decoded does not fail every batch forever (``on_corrupt_message``).

The example ingest job (Pulsar topic ``orders`` → Delta ``orders_raw``, exactly once) runs with
the runner on our broker, whose topic holds 300 orders and, between them, one poison entry: a
batch declaring 0 messages. Our broker refuses such a SEND, so the entry is appended to the
topic's log in-process, as a broker that stored it earlier would hold it. Batches of 100
messages, so the driver's scans (admission control) meet the poison entry too.

* ``fail`` (the default): the job fails naming the topic, the message id and the reason, and
  writes nothing;
* ``skip``: the job goes on; the progress line counts the skipped message;
* ``quarantine``: the entry's bytes, id and reason land in the quarantine table, the 300 orders
  in ``orders_raw`` exactly once, the subscription's backlog ends at 0 (the poison entry is
  acknowledged with the rest), and a rerun adds nothing to either table.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from jobs.demo import produce
from pipelines.jobs.testing import run_job
from pulsarwire.broker import Broker
from pulsarwire.codec import MessageId, encode_batch
from pulsarwire.codec.frames import encode_payload_section
from pulsarwire.proto import pb

ROOT = Path(__file__).resolve().parents[3]
TOPIC = "persistent://public/default/orders"
JOB = "jobs/orders_ingest.yaml"


@pytest.fixture
def env(spark: Any, pulsar_broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Broker:
    monkeypatch.setenv("PULSAR_URL", pulsar_broker.service_url)
    monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path))
    monkeypatch.chdir(ROOT)
    return pulsar_broker


def append_poison(b: Broker, topic: str) -> tuple[MessageId, bytes]:
    """Append a batch entry that declares 0 messages to ``topic``'s log; its id and bytes."""
    md = pb.MessageMetadata(
        producer_name="poison", sequence_id=0, publish_time=int(time.time() * 1000), num_messages_in_batch=0
    )
    section = encode_payload_section(md, encode_batch([(pb.SingleMessageMetadata(), b'{"id": -1}')]))

    def append() -> tuple[int, int]:
        topic_ = b.get_topic(topic, create=True)
        assert topic_ is not None
        entry = topic_.append(section, md)
        topic_.dispatch_all()
        return entry.position

    ledger, entry = b.call(append)
    return MessageId(ledger, entry), section


def orders_with_poison(b: Broker) -> tuple[MessageId, bytes]:
    produce(b.service_url, "orders", 150)
    poison = append_poison(b, TOPIC)
    produce(b.service_url, "orders", 150, first=150)
    return poison


def order_ids(tmp_path: Path) -> list[int]:
    path = tmp_path / "tables" / "orders_raw"
    if not path.exists():
        return []
    return sorted(DeltaTable(str(path)).to_pyarrow_table().column("order_id").to_pylist())


def test_quarantined_message_lands_in_its_table_and_the_rest_exactly_once(
    env: Broker, tmp_path: Path
) -> None:
    poison_id, poison_bytes = orders_with_poison(env)
    quarantine = str(tmp_path / "tables" / "quarantine")
    settings = {
        "source__pulsar__on_corrupt_message": "quarantine",
        "source__pulsar__quarantine_table": quarantine,
        "source__pulsar__max_messages_per_trigger": 100,
    }
    assert run_job(JOB, **settings).exit_code == 0
    assert order_ids(tmp_path) == list(range(300))
    rows = DeltaTable(quarantine).to_pyarrow_table().to_pylist()
    assert len(rows) == 1
    row = rows[0]
    assert (row["job"], row["topic"], row["ledgerId"], row["entryId"]) == (
        "orders_ingest",
        TOPIC,
        poison_id.ledger_id,
        poison_id.entry_id,
    )
    assert row["raw"] == poison_bytes
    assert MessageId.deserialize(row["messageId"]) == poison_id
    assert "num_messages_in_batch" in row["reason"] or "count" in row["reason"]
    assert env.stats(TOPIC)["subscriptions"]["orders_ingest"]["backlog"] == 0

    produce(env.service_url, "orders", 50, first=300)
    assert run_job(JOB, **settings).exit_code == 0
    assert order_ids(tmp_path) == list(range(350))
    assert len(DeltaTable(quarantine).to_pyarrow_table()) == 1  # the replay-safe key held


def test_fail_names_the_message_then_skip_goes_on(
    env: Broker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    poison_id, _ = orders_with_poison(env)
    with pytest.raises(Exception) as info:
        run_job(JOB, source__pulsar__max_messages_per_trigger=100)
    text = str(info.value)
    assert "CorruptMessageError" in text and TOPIC in text and str(poison_id) in text, text[-2000:]
    assert "on_corrupt_message" in text
    written_before = order_ids(tmp_path)
    assert set(written_before) <= set(range(150))  # nothing from the failed batch onwards

    capsys.readouterr()
    result = run_job(
        JOB, source__pulsar__on_corrupt_message="skip", source__pulsar__max_messages_per_trigger=100
    )
    assert result.exit_code == 0
    assert order_ids(tmp_path) == list(range(300))
    out = capsys.readouterr().out
    assert "1 corrupt message skipped" in out, out
    assert env.stats(TOPIC)["subscriptions"]["orders_ingest"]["backlog"] == 0
