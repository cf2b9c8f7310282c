"""Hostile-client tests: our broker in its own process, raw frames from this one, a bystander timed.

The broker hardening suites (tests/pulsarwire/broker/test_hostile_*.py) all follow one shape:

1. start ``python -m pulsarwire.broker`` as a separate process (:func:`broker_url`);
2. send the hostile input over a real socket with :class:`~tests.helpers.raw.RawConnection`
   (raw frames, no client logic that could refuse to send them);
3. check the broker's answer to that request, and that the hostile connection itself is still
   served where Pulsar keeps it (:func:`ping`);
4. check that a bystander connection opened afterwards is served promptly
   (:func:`assert_bystander_served`): one event loop serves every client, so a request that
   burns CPU or blocks freezes everyone, and this is how a test sees it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from pulsarwire.codec import Frame, encode_payload_command, new_command
from pulsarwire.codec.frames import U32, encode_with_stored_entry
from pulsarwire.proto import pb
from pulsarwire.testing.process import broker_subprocess
from tests.helpers.raw import RawConnection

T = pb.BaseCommand
#: A bystander must be answered within this many seconds (the broker answers in ~1 ms when idle;
#: generous for a loaded 2-core CI machine, far below what a frozen event loop produces).
BYSTANDER_LIMIT = 2.0


@contextlib.contextmanager
def broker_url(*args: str, **process: Any) -> Iterator[str]:
    """A broker process started with ``args``; yields its ``pulsar://127.0.0.1:PORT``.

    ``process`` goes to :func:`~pulsarwire.testing.process.broker_subprocess` (``preexec_fn``
    runs in the child before the broker starts, e.g. to lower a resource limit; ``stderr``).
    """
    with broker_with_pid(*args, **process) as (url, _pid):
        yield url


@contextlib.contextmanager
def broker_with_pid(*args: str, **process: Any) -> Iterator[tuple[str, int]]:
    """:func:`broker_url` that also yields the broker's pid (for /proc/PID: memory, open files)."""
    with broker_subprocess("--keepalive", "60", *args, **process) as (url, proc):
        yield url, proc.pid


def connect(url: str, **kw: Any) -> RawConnection:
    """A raw connection that has completed CONNECT."""
    return RawConnection.to(url, **kw)


def ping(conn: RawConnection, timeout: float = BYSTANDER_LIMIT) -> float:
    """Round trip of PING → PONG on ``conn`` in seconds; AssertionError when no PONG comes."""
    start = time.monotonic()
    conn.send(new_command(T.PING)[0])
    conn.expect(T.PONG, timeout=timeout)
    return time.monotonic() - start


def bystander_latency(url: str, timeout: float = BYSTANDER_LIMIT, token: str | None = None) -> float:
    """Seconds for a new connection to CONNECT (with ``token`` when given) and get a PARTITIONED_METADATA
    answer (on a broker with authentication, ``token``'s role needs a grant on public/default)."""
    start = time.monotonic()
    conn = RawConnection.to(url, token=token)
    try:
        cmd, req = new_command(T.PARTITIONED_METADATA)
        req.topic = "persistent://public/default/bystander"
        req.request_id = 1
        conn.send(cmd)
        conn.expect(T.PARTITIONED_METADATA_RESPONSE, timeout=timeout)
    finally:
        conn.close()
    return time.monotonic() - start


def assert_bystander_served(url: str, limit: float = BYSTANDER_LIMIT, token: str | None = None) -> float:
    """A fresh connection (authenticated with ``token`` when given) is served within ``limit`` seconds."""
    latency = bystander_latency(url, timeout=limit + 1, token=token)
    assert latency < limit, f"a bystander waited {latency:.2f} s for the broker"
    return latency


def answer(conn: RawConnection, cmd: pb.BaseCommand, type_: int, timeout: float = 5.0) -> Frame:
    """Send ``cmd`` and wait for the first frame of ``type_``."""
    conn.send(cmd)
    return conn.expect(type_, timeout=timeout)


def producer(conn: RawConnection, topic: str, producer_id: int = 1, name: str | None = None) -> Frame:
    """Create a producer; returns the PRODUCER_SUCCESS or ERROR frame."""
    cmd, req = new_command(T.PRODUCER)
    req.topic = topic
    req.producer_id = producer_id
    req.request_id = 1000 + producer_id
    if name is not None:
        req.producer_name = name
    conn.send(cmd)
    return expect_either(conn, T.PRODUCER_SUCCESS, T.ERROR)


def expect_either(conn: RawConnection, *types: int, timeout: float = 5.0) -> Frame:
    """The first frame of any of ``types``."""
    deadline = time.monotonic() + timeout
    while True:
        for i, f in enumerate(conn.frames):
            if f.type in types:
                return conn.frames.pop(i)
        if conn.closed or time.monotonic() > deadline:
            names = ", ".join(T.Type.Name(t) for t in types)
            raise AssertionError(f"none of {names} arrived (closed={conn.closed})")
        conn._read(max(0.01, deadline - time.monotonic()))


def send_frame(
    producer_id: int,
    sequence_id: int,
    metadata: pb.MessageMetadata,
    payload: bytes,
    *,
    checksum: bool = True,
    num_messages: int | None = None,
) -> bytes:
    """A SEND frame as a producer would write it; ``checksum=False`` leaves out the optional
    0x0e01 section (as pulsar-lite and some clients do)."""
    cmd, req = new_command(T.SEND)
    req.producer_id = producer_id
    req.sequence_id = sequence_id
    if num_messages is not None:
        req.num_messages = num_messages
    if checksum:
        return encode_payload_command(cmd, metadata, payload)
    md = metadata.SerializeToString()
    return encode_with_stored_entry(cmd, U32.pack(len(md)) + md + payload)


def read_all(url: str, topic: str, expected: int, timeout_ms: int = 5000) -> list[bytes]:
    """Every message of ``topic`` from the start, read with the official client; reads until
    ``expected`` arrived, then proves nothing more comes for a moment."""
    import pulsar

    client = pulsar.Client(
        url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = [reader.read_next(timeout_ms).data() for _ in range(expected)]
        with contextlib.suppress(Exception):
            out.append(reader.read_next(300).data())
        return out
    finally:
        client.close()
