"""Request frames captured from confluent-kafka, kafka-python and aiokafka
(``tests/helpers/kafka_capture.py``) decode and re-encode byte for byte; their record batches
decode with valid CRCs and the codec the producer was configured with."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarwire.kafka.codec import compression, messages, records

GOLDEN = Path(__file__).parent.parent / "golden"
FRAMES = sorted(GOLDEN.glob("*.bin"))
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def test_all_three_clients_are_captured() -> None:
    by_client: dict[str, set[str]] = {}
    for f in FRAMES:
        client, _, api, _ = f.stem.split("-")
        by_client.setdefault(client, set()).add(api)
    assert set(by_client) == {"confluent", "kafkapython", "aiokafka"}
    everyday = {
        "ApiVersions",
        "Metadata",
        "Produce",
        "Fetch",
        "ListOffsets",
        "FindCoordinator",
        "JoinGroup",
        "SyncGroup",
        "Heartbeat",
        "OffsetCommit",
        "OffsetFetch",
        "InitProducerId",
        "SaslHandshake",
        "SaslAuthenticate",
        "CreateTopics",
        "DeleteTopics",
    }
    for client, apis in by_client.items():
        assert everyday <= apis, (client, everyday - apis)
    # the 25 APIs of the clients' everyday work, from real clients; the group admin APIs the broker
    # added (DeleteGroups, OffsetDelete) are exercised by the broker's judge tests instead
    admin_only = {"DeleteGroups", "OffsetDelete"}
    assert set().union(*by_client.values()) == set(messages.API_KEYS) - admin_only


@pytest.mark.parametrize("path", FRAMES, ids=lambda p: p.stem)
def test_golden_frame_round_trips(path: Path) -> None:
    frame = path.read_bytes()
    req = messages.decode_request(frame)
    client, scenario, api, version = path.stem.split("-")
    assert req.api_name == api and f"v{req.api_version}" == version
    again = messages.encode_request(
        req.api_key, req.api_version, req.correlation_id, req.client_id, req.body, req.header_tags
    )
    assert again == frame
    if api == "Produce":
        batches = [
            b
            for topic in req.body["topic_data"]
            for part in topic["partition_data"]
            for b in records.decode_batches(part["records"])
        ]
        assert batches
        first = batches[0].records[0]
        assert first.key == b"key-0"
        if scenario in CODECS:  # producers configured with each compression codec
            assert {compression.NAMES[b.compression] for b in batches} == {scenario}
            assert first.value == b"value-0" * 4 and ("h", b"v") in first.headers
        elif scenario == "txn":  # transactional producer: the id the capture listener handed out
            assert all(b.is_transactional and b.producer_id == 1000 for b in batches)
            assert first.value == b"in-txn"
        if client == "confluent" and scenario == "none":  # enable.idempotence
            assert batches[0].producer_id == 1000 and batches[0].base_sequence == 0


RESPONSES = sorted((GOLDEN / "responses").glob("*.bin"))


def test_responses_of_every_api_are_captured() -> None:
    names = {p.stem.split("-")[1].removesuffix("Response") for p in RESPONSES}
    # DeleteGroups and OffsetDelete came with the broker's coordinator, after the real-Kafka capture
    assert names == set(messages.API_KEYS) - {"DeleteGroups", "OffsetDelete"}


@pytest.mark.parametrize("path", RESPONSES, ids=lambda p: p.stem)
def test_real_kafka_response_round_trips(path: Path) -> None:
    """Apache Kafka 4.3.1's answers to our requests (test_kafka_codec_real.py saved them)."""
    _, name, version = path.stem.split("-")
    api_key = messages.API_KEYS[name.removesuffix("Response")]
    frame = path.read_bytes()
    correlation_id, body = messages.decode_response(api_key, int(version[1:]), frame)
    assert messages.encode_response(api_key, int(version[1:]), correlation_id, body) == frame
    if name == "FetchResponse":  # the batches we produced, one per codec, as Kafka stored them
        part = body["responses"][0]["partitions"][0]
        batches = records.decode_batches(part["records"], partial_tail=True)
        assert [b.compression for b in batches] == [0, 1, 2, 3, 4]
        assert [b.base_offset for b in batches] == [0, 1, 2, 3, 4]
