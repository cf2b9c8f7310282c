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
    clients = {f.name.split("-")[0] for f in FRAMES}
    assert clients == {"confluent", "kafkapython", "aiokafka"}
    apis = {f.name.split("-")[2] for f in FRAMES}
    assert {"ApiVersions", "Metadata", "Produce", "FindCoordinator", "JoinGroup", "SyncGroup"} <= apis


@pytest.mark.parametrize("path", FRAMES, ids=lambda p: p.stem)
def test_golden_frame_round_trips(path: Path) -> None:
    frame = path.read_bytes()
    req = messages.decode_request(frame)
    _, scenario, api, version = path.stem.split("-")
    assert req.api_name == api and f"v{req.api_version}" == version
    again = messages.encode_request(
        req.api_key, req.api_version, req.correlation_id, req.client_id, req.body, req.header_tags
    )
    assert again == frame
    if api == "Produce":
        for topic in req.body["topic_data"]:
            for part in topic["partition_data"]:
                batches = records.decode_batches(part["records"])
                assert batches and all(b.compression == CODECS[scenario] for b in batches)
                recs = [r for b in batches for r in b.records]
                assert recs[0].key == b"key-0" and recs[0].value == b"value-0" * 4
                assert ("h", b"v") in recs[0].headers
                assert compression.NAMES[batches[0].compression] == scenario
