"""The generic codec over every message and version of the definitions: defaults round-trip,
hypothesis-generated bodies re-encode byte for byte, headers, flexible encodings, tagged
fields (known, unknown, out of order), and hostile input ending in typed errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarwire.errors import PulsarWireError, RemoteProtocolError
from pulsarwire.kafka.codec import messages as m
from pulsarwire.kafka.codec.definitions import MESSAGES
from pulsarwire.kafka.codec.frames import Correlator, FrameSplitter, join
from pulsarwire.kafka.errors import (
    KafkaCorrelationError,
    KafkaEncodeError,
    KafkaFrameTooLargeError,
    KafkaLengthError,
    KafkaProtocolError,
    KafkaTaggedFieldError,
    KafkaTrailingBytesError,
    KafkaTruncatedError,
    KafkaUnknownApiError,
    KafkaVarintError,
    kafka_error,
)

ALL = [(name, v) for name, spec in MESSAGES.items() for v in range(spec[1], spec[2] + 1)]
JUDGED_APIS = {
    "ApiVersions",
    "Metadata",
    "Produce",
    "Fetch",
    "ListOffsets",
    "FindCoordinator",
    "JoinGroup",
    "SyncGroup",
    "Heartbeat",
    "LeaveGroup",
    "OffsetCommit",
    "OffsetFetch",
    "CreateTopics",
    "DeleteTopics",
    "CreatePartitions",
    "DescribeConfigs",
    "InitProducerId",
    "AddPartitionsToTxn",
    "AddOffsetsToTxn",
    "TxnOffsetCommit",
    "EndTxn",
    "SaslHandshake",
    "SaslAuthenticate",
    "DescribeGroups",
    "ListGroups",
    # the group admin APIs the broker's coordinator answers (confluent-kafka's and kafka-python's
    # admin clients send them)
    "DeleteGroups",
    "OffsetDelete",
}

SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "uint32": st.integers(0, 2**32 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "float64": st.floats(allow_nan=False),
    "bool": st.booleans(),
    "string": st.text(max_size=8),
    "bytes": st.binary(max_size=8),
    "records": st.binary(max_size=8),
    "uuid": st.binary(min_size=16, max_size=16),
}


def body_strategy(fields: tuple[Any, ...], version: int) -> st.SearchStrategy[dict[str, Any]]:
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for name, ftype, versions, nullable, _, _, _, children, _ in fields:
        if not versions[0] <= version <= versions[1]:
            continue
        if ftype in ("[]", "{}"):
            sub = body_strategy(children, version)
            s: st.SearchStrategy[Any] = st.lists(sub, max_size=2) if ftype == "[]" else sub
        elif ftype.startswith("[]"):
            s = st.lists(SCALARS[ftype[2:]], max_size=3)
        else:
            s = SCALARS[ftype]
        if nullable is not None and nullable[0] <= version <= nullable[1]:
            s = st.none() | s
        parts[name] = s
    return st.fixed_dictionaries(parts)


def test_definitions_cover_the_judged_apis() -> None:
    assert set(m.API_KEYS) == JUDGED_APIS
    assert m.versions(m.API_KEYS["Produce"]) == (0, 11)
    assert m.versions(m.API_KEYS["Fetch"]) == (0, 17)


@pytest.mark.parametrize(("name", "version"), ALL, ids=[f"{n}-v{v}" for n, v in ALL])
def test_defaults_round_trip(name: str, version: int) -> None:
    data = m.encode_body(name, version, {})
    assert m.encode_body(name, version, m.decode_body(name, version, data)) == data
    if data:
        with pytest.raises(KafkaProtocolError):
            m.decode_body(name, version, data[:-1])
    with pytest.raises(KafkaTrailingBytesError):
        m.decode_body(name, version, data + b"\x00")


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_random_bodies_round_trip(name: str, data: st.DataObject) -> None:
    _, lo, hi, _, fields = MESSAGES[name]
    version = data.draw(st.integers(lo, hi))
    body = data.draw(body_strategy(fields, version))
    encoded = m.encode_body(name, version, body)
    decoded = m.decode_body(name, version, encoded)
    assert m.encode_body(name, version, decoded) == encoded


def test_request_header_versions_and_client_id_not_compact() -> None:
    # ApiVersions v3 is flexible: header v2, client id still a classic int16-length string
    data = m.encode_request(18, 3, 7, "cli", {"client_software_name": "x", "client_software_version": "1"})
    assert data == bytes.fromhex("00120003 00000007 0003636c69 00 027802 3100".replace(" ", ""))
    req = m.decode_request(data)
    assert (req.api_name, req.correlation_id, req.client_id) == ("ApiVersions", 7, "cli")
    # Metadata v1 is not flexible: header v1, no tagged fields; null client id
    data = m.encode_request(3, 1, 1, None, {"topics": None})
    assert data == bytes.fromhex("0003000100000001ffffffffffff")


def test_api_versions_response_uses_header_v0() -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 0, "max_version": 11}]}
    data = m.encode_response(18, 3, 9, body)
    assert data[:4] == b"\x00\x00\x00\x09" and data[4:6] == b"\x00\x00"  # no header tagged fields
    cid, decoded = m.decode_response(18, 3, data)
    assert cid == 9 and decoded["api_keys"] == body["api_keys"]


def test_tagged_fields_known_unknown_and_order() -> None:
    # FetchRequest v12: cluster_id is tagged (tag 0)
    base = {"cluster_id": "c1", "topics": []}
    data = m.encode_body("FetchRequest", 12, base)
    assert m.decode_body("FetchRequest", 12, data)["cluster_id"] == "c1"
    assert data.endswith(b"\x01\x00\x03\x03c1")  # one tag: 0, size 3, compact "c1"
    plain = m.encode_body("FetchRequest", 12, {"topics": []})
    assert plain.endswith(b"\x00")
    # an unknown tag survives a round trip
    with_unknown = plain[:-1] + b"\x01\x07\x02hi"
    decoded = m.decode_body("FetchRequest", 12, with_unknown)
    assert decoded[m.UNKNOWN_TAGS] == {7: b"hi"}
    assert m.encode_body("FetchRequest", 12, decoded) == with_unknown
    # tags must ascend
    with pytest.raises(KafkaTaggedFieldError):
        m.decode_body("FetchRequest", 12, plain[:-1] + b"\x02\x07\x00\x05\x00")
    # a known tag's value must fill its size exactly
    with pytest.raises(KafkaTaggedFieldError):
        m.decode_body("FetchRequest", 12, plain[:-1] + b"\x01\x00\x04\x03c1\x00")


def test_hostile_lengths_and_varints() -> None:
    # MetadataRequest v4: topics array count far over the bytes left
    with pytest.raises(KafkaTruncatedError):
        m.decode_body("MetadataRequest", 4, b"\x7f\xff\xff\xff\x00")
    with pytest.raises(KafkaLengthError):
        m.decode_body("MetadataRequest", 4, b"\xff\xff\xff\xfe\x00")
    # v9 (flexible): a compact count whose varint never ends / is over 32 bits
    with pytest.raises(KafkaVarintError):
        m.decode_body("MetadataRequest", 9, b"\xff\xff\xff\xff\xff\xff")
    with pytest.raises(KafkaVarintError):
        m.decode_body("MetadataRequest", 9, b"\xff\xff\xff\xff\x7f")
    with pytest.raises(KafkaTruncatedError):
        m.decode_body("MetadataRequest", 9, b"\xff")
    # a null where the field is not nullable (DeleteTopics v0 names: array of non-null strings)
    with pytest.raises(KafkaLengthError):
        m.decode_body("DeleteTopicsRequest", 0, b"\x00\x00\x00\x01\xff\xff\x00\x00\x00\x00")


def test_unknown_api_and_version() -> None:
    with pytest.raises(KafkaUnknownApiError):
        m.decode_request(b"\x00\x63\x00\x00\x00\x00\x00\x01\x00\x00")
    # an ApiVersions request newer than ours: what a broker needs for its v0 fallback answer
    with pytest.raises(KafkaUnknownApiError) as err:
        m.decode_request(b"\x00\x12\x00\x63\x00\x00\x00\x2a\x00\x00")
    assert (err.value.api_key, err.value.api_version, err.value.correlation_id) == (18, 99, 42)
    fallback = m.encode_response(18, 0, 42, {"error_code": 35, "api_keys": []})
    cid, body = m.decode_response(18, 0, fallback)
    assert (cid, body["error_code"], body["api_keys"]) == (42, 35, [])
    assert fallback == bytes.fromhex("0000002a002300000000")  # header v0, error, empty array
    with pytest.raises(KafkaUnknownApiError):
        m.decode_request(b"\x00\x00\x00\x63\x00\x00\x00\x01\x00\x00")
    with pytest.raises(KafkaTruncatedError):
        m.decode_request(b"\x00")


def test_encode_errors_are_local() -> None:
    with pytest.raises(KafkaEncodeError, match="no field named partiton"):
        m.encode_body("ListOffsetsRequest", 1, {"topics": [{"name": "t", "partitions": [{"partiton": 0}]}]})
    with pytest.raises(KafkaEncodeError):
        m.encode_body("HeartbeatRequest", 0, {"group_id": "g", "generation_id": 2**40, "member_id": "m"})
    with pytest.raises(KafkaEncodeError):
        m.encode_body("HeartbeatRequest", 0, {"group_id": None, "generation_id": 1, "member_id": "m"})


def test_errors_are_typed_and_rooted() -> None:
    assert issubclass(KafkaProtocolError, RemoteProtocolError)
    err = kafka_error(6)
    assert isinstance(err, PulsarWireError)
    assert (err.name, err.code, err.retriable) == ("NOT_LEADER_OR_FOLLOWER", 6, True)
    assert kafka_error(36).retriable is False  # TOPIC_ALREADY_EXISTS
    assert kafka_error(9999).name == "UNKNOWN_9999"


def test_frame_splitter_and_correlator() -> None:
    client = Correlator("me")
    wire = client.request(18, 0, {}) + client.request(
        12, 0, {"group_id": "g", "generation_id": 1, "member_id": "m"}
    )
    server = FrameSplitter(max_frame_size=1024)
    got = []
    for i in range(len(wire)):  # a byte at a time
        server.feed(wire[i : i + 1])
        got.extend(server.frames())
    assert [m.decode_request(f).api_name for f in got] == ["ApiVersions", "Heartbeat"]
    answer = m.encode_response(12, 0, 1, {"error_code": 27})
    resp = client.response(answer)
    assert (resp.api_key, resp.correlation_id, resp.body["error_code"]) == (12, 1, 27)
    with pytest.raises(KafkaCorrelationError):
        client.response(answer)
    assert client.pending == 1
    big = FrameSplitter(max_frame_size=1024)
    big.feed(join(b"x" * 1025)[:4])
    with pytest.raises(KafkaFrameTooLargeError):
        big.next_frame()
    neg = FrameSplitter()
    neg.feed(b"\xff\xff\xff\xff")
    with pytest.raises(KafkaFrameTooLargeError):
        neg.next_frame()


def test_the_codec_is_sans_io() -> None:
    """The codec's modules import no sockets, threads, clocks, asyncio or pyspark."""
    import ast
    from pathlib import Path

    import pulsarwire.kafka.codec as codec_pkg

    allowed = {
        "__future__",
        "collections",
        "dataclasses",
        "struct",
        "typing",
        "zlib",
        "crc32c",
        "cramjam",
        "lz4",
        "zstandard",
        "pulsarwire",
    }
    for path in Path(codec_pkg.__file__).parent.glob("*.py"):
        if path.name == "_generate.py":  # the offline generator (git, json), never imported at runtime
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


def test_every_module_imports_first() -> None:
    """No import cycle: each Kafka module can be the first one a program imports."""
    import subprocess
    import sys

    script = (
        "import importlib, sys\n"
        "mods = ['pulsarwire.kafka', 'pulsarwire.kafka.errors', 'pulsarwire.kafka.error_codes',\n"
        "        'pulsarwire.kafka.codec', 'pulsarwire.kafka.codec.primitives',\n"
        "        'pulsarwire.kafka.codec.messages',\n"
        "        'pulsarwire.kafka.codec.records', 'pulsarwire.kafka.codec.compression',\n"
        "        'pulsarwire.kafka.codec.frames', 'pulsarwire.kafka.codec.definitions']\n"
        "for mod in mods:\n"
        "    for name in [n for n in sys.modules if n.startswith('pulsarwire.kafka')]:\n"
        "        del sys.modules[name]\n"
        "    importlib.import_module(mod)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
