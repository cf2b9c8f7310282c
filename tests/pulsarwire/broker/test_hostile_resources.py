"""Bounded memory and file handles: stored data stays on disk, topics do not cost a file each,
any topic name fits on disk, and a data dir that refuses writes fails the request cleanly.

The broker runs as a separate process (tests.helpers.hostile) where the figure is the process's
own: its RSS (/proc/PID/status), its open descriptors (/proc/PID/fd), what it does under a lowered
resource limit. The storage layer's own guarantees (index lookups, cache bound, cut partial
writes, check_data_dir) are checked in process against ``TopicLog`` directly.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import struct
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pulsar
import pytest

from pulsarwire.broker.storage import (
    CACHE_ITEM_OVERHEAD,
    DEFAULT_MAX_OPEN_LOGS,
    INDEX_BYTES_PER_ENTRY,
    READ_CHUNK,
    EntryCache,
    OpenFiles,
    TopicLog,
    check_data_dir,
    stored_topics,
    topic_dir,
)
from pulsarwire.codec import Frame, crc32c, encode_payload_command, encode_payload_section, new_command
from pulsarwire.errors import StorageError
from pulsarwire.proto import pb
from tests.helpers.hostile import (
    answer,
    assert_bystander_served,
    broker_url,
    broker_with_pid,
    connect,
    expect_either,
    ping,
    producer,
)
from tests.helpers.judge import make_client, new_topic, read_n, receive_n
from tests.helpers.raw import RawConnection

T = pb.BaseCommand
E = pb.ServerError
MiB = 1024 * 1024


# -- helpers ---------------------------------------------------------------------------------------


def vm_kib(pid: int, field: str = "VmRSS") -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak resident) of process ``pid``, KiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/PID/status")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def metadata(
    sequence_id: int, producer_name: str = "raw", publish_time: int = 1_700_000_000_000
) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name=producer_name, sequence_id=sequence_id, publish_time=publish_time)


def raw_send(conn: RawConnection, producer_id: int, sequence_id: int, payload: bytes, name: str) -> None:
    cmd, send = new_command(T.SEND)
    send.producer_id = producer_id
    send.sequence_id = sequence_id
    conn.sock.sendall(encode_payload_command(cmd, metadata(sequence_id, name), payload))


def expect_n(conn: RawConnection, type_: int, n: int, timeout: float = 60.0) -> list[Frame]:
    """The next ``n`` frames of ``type_``; AssertionError naming any ERROR/SEND_ERROR seen meanwhile."""
    import time

    got: list[Frame] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        frames, conn.frames = conn.frames, []
        for f in frames:
            if f.type == type_:
                got.append(f)
            elif f.type in (T.ERROR, T.SEND_ERROR):
                raise AssertionError(f"{T.Type.Name(f.type)}: {f.sub}")
            else:
                conn.frames.append(f)
        if len(got) >= n:
            break
        if conn.closed or time.monotonic() > deadline:
            raise AssertionError(f"{len(got)} of {n} {T.Type.Name(type_)} frames (closed={conn.closed})")
        conn._read(max(0.01, deadline - time.monotonic()))
    return got


def big_payload(i: int) -> bytes:
    """1 MiB, different for every ``i``, made on demand (the test never holds them all)."""
    return hashlib.sha256(str(i).encode()).digest() * (MiB // 32)


def digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


# -- memory: stored data lives on disk ---------------------------------------------------------------

LARGE = 140  # entries of 1 MiB
SMALL = 10_000  # entries of 1 KiB: ~150 MB stored in all
#: RSS the broker may gain, at its peak, while storing and reading back ~150 MB with an 8 MiB cache:
#: the cache, the index (~0.3 MiB), a frame or two being decoded or written, the allocator's slack
#: (~16 MiB measured). Holding the data in RAM costs more than 150 MiB, and so does writing a
#: reader's whole backlog into its connection's buffer at once (~215 MiB measured).
RSS_BUDGET_MIB = 32


def test_rss_stays_flat_while_150_mb_are_stored_and_read_back(tmp_path: Path) -> None:
    with broker_with_pid("--data-dir", str(tmp_path), "--cache-size-mb", "8") as (url, pid):
        client = make_client(url)
        try:
            # Warm up the code paths (first SEND, first dispatch of a large entry) before the baseline.
            warm = new_topic("warm")
            consumer = client.subscribe(warm, "w", initial_position=pulsar.InitialPosition.Earliest)
            client.create_producer(warm, batching_enabled=False).send(big_payload(-1))
            consumer.receive(10_000)
            baseline = vm_kib(pid)

            topic = new_topic("rss")
            prod = client.create_producer(
                topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=64
            )
            expected: Counter[bytes] = Counter()
            for i in range(LARGE):
                data = big_payload(i)
                expected[digest(data)] += 1
                prod.send_async(data, None)
            for i in range(SMALL):
                data = f"small-{i:06d}".encode().ljust(1024, b".")
                expected[digest(data)] += 1
                prod.send_async(data, None)
            prod.flush()
            after_store = vm_kib(pid)

            reader = client.subscribe(topic, "all", initial_position=pulsar.InitialPosition.Earliest)
            got: Counter[bytes] = Counter()
            for _ in range(LARGE + SMALL):
                msg = reader.receive(30_000)
                got[digest(msg.data())] += 1
                reader.acknowledge(msg)
            after_read = vm_kib(pid)
            peak = vm_kib(pid, "VmHWM")
        finally:
            client.close()
        assert got == expected
        growth = (max(after_store, after_read, peak) - baseline) / 1024
        assert growth < RSS_BUDGET_MIB, (
            f"broker RSS grew by {growth:.0f} MiB storing ~150 MB (baseline {baseline / 1024:.0f} MiB,"
            f" after storing {after_store / 1024:.0f}, after reading {after_read / 1024:.0f},"
            f" peak {peak / 1024:.0f})"
        )
        assert_bystander_served(url)


def test_the_index_costs_a_few_bytes_per_entry() -> None:
    assert INDEX_BYTES_PER_ENTRY <= 32


# -- open files: thousands of topics under a 1024 descriptor limit -------------------------------------

TOPICS = 5000


def _at_most_1024_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def test_5000_topics_under_a_1024_file_limit_leave_the_broker_serving(tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    names = [f"persistent://public/default/many-{run}-{i:04d}" for i in range(TOPICS)]
    with broker_with_pid("--data-dir", str(tmp_path), preexec_fn=_at_most_1024_files) as (url, pid):
        conn = connect(url)
        for i, name in enumerate(names):
            cmd, req = new_command(T.PRODUCER)
            req.topic = name
            req.producer_id = i
            req.request_id = i
            req.producer_name = f"p{i}"
            conn.send(cmd)
        expect_n(conn, T.PRODUCER_SUCCESS, TOPICS)
        for i in range(TOPICS):
            raw_send(conn, i, 0, f"first-{i}".encode(), f"p{i}")
        receipts = expect_n(conn, T.SEND_RECEIPT, TOPICS)
        assert sorted(f.sub.producer_id for f in receipts) == list(range(TOPICS))

        fds = open_fds(pid)
        assert fds <= DEFAULT_MAX_OPEN_LOGS + 40, f"{fds} descriptors open with {TOPICS} topics"
        ping(conn)
        assert_bystander_served(url)
        client = make_client(url)
        try:
            for i in (0, TOPICS - 1):
                consumer = client.subscribe(
                    names[i], "check", initial_position=pulsar.InitialPosition.Earliest
                )
                client.create_producer(names[i]).send(b"again")
                got = sorted(m.data() for m in receive_n(consumer, 2, ack=True, timeout_ms=10_000))
                assert got == [b"again", f"first-{i}".encode()]
        finally:
            client.close()
        assert open_fds(pid) <= DEFAULT_MAX_OPEN_LOGS + 40


def test_open_files_are_an_lru_shared_by_the_logs(tmp_path: Path) -> None:
    files = OpenFiles(max_open=2)
    logs = [TopicLog(f"t{i}", data_dir=tmp_path, files=files, cache=EntryCache(0)) for i in range(5)]
    for round_ in range(3):
        for i, log in enumerate(logs):
            md = metadata(round_)
            log.append(encode_payload_section(md, f"{i}-{round_}".encode()), md)
            assert len(files) <= 2
    for i, log in enumerate(logs):  # reads reopen what was closed, still within the cap
        assert [e.data for e in log.entries] == [
            encode_payload_section(metadata(r), f"{i}-{r}".encode()) for r in range(3)
        ]
        assert len(files) <= 2
    for log in logs:
        log.close()
    assert len(files) == 0


# -- topic names that do not fit in a file name -----------------------------------------------------------

LONG_NAMES = [
    "persistent://public/default/" + "l" * 300,  # 300 characters
    "persistent://public/default/" + "ü" * 100,  # short, but 600 bytes once percent-quoted
]


def _topics_of_namespace(url: str) -> list[str]:
    conn = connect(url)
    try:
        cmd, req = new_command(T.GET_TOPICS_OF_NAMESPACE)
        req.namespace = "public/default"
        req.request_id = 7
        return list(answer(conn, cmd, T.GET_TOPICS_OF_NAMESPACE_RESPONSE).sub.topics)
    finally:
        conn.close()


def test_topic_names_too_long_for_a_file_name_work_and_survive_a_restart(tmp_path: Path) -> None:
    with broker_url("--data-dir", str(tmp_path)) as url:
        client = make_client(url)
        try:
            for name in LONG_NAMES:
                consumer = client.subscribe(name, "sub", initial_position=pulsar.InitialPosition.Earliest)
                client.create_producer(name).send(name.encode()[-20:])
                assert receive_n(consumer, 1, ack=True)[0].data() == name.encode()[-20:]
        finally:
            client.close()
        assert_bystander_served(url)
    assert sorted(stored_topics(tmp_path)) == sorted(LONG_NAMES)
    assert all(len(p.name.encode()) <= 255 for p in (tmp_path / "topics").iterdir())
    with broker_url("--data-dir", str(tmp_path)) as url:
        assert set(LONG_NAMES) <= set(_topics_of_namespace(url))
        client = make_client(url)
        try:
            for name in LONG_NAMES:
                reader = client.create_reader(name, pulsar.MessageId.earliest)
                assert read_n(reader, 1)[0].data() == name.encode()[-20:]
        finally:
            client.close()


def test_a_topic_stored_in_the_layout_of_earlier_versions_still_loads(tmp_path: Path) -> None:
    """The directory is the percent-quoted name, the records as the storage docstring lays them out."""
    name = new_topic("old layout")
    md = metadata(0, "old-producer")
    entry = encode_payload_section(md, b"stored by an earlier version")
    body = struct.pack(">QQ", 3, 0) + entry
    directory = tmp_path / "topics" / quote(name, safe="")
    directory.mkdir(parents=True)
    (directory / "entries.log").write_bytes(struct.pack(">II", len(body), crc32c(body)) + body)
    (directory / "log.json").write_text(json.dumps({"ledger_id": 3, "trimmed": 0}))
    assert topic_dir(tmp_path, name) == directory
    with broker_url("--data-dir", str(tmp_path)) as url:
        assert name in _topics_of_namespace(url)
        client = make_client(url)
        try:
            reader = client.create_reader(name, pulsar.MessageId.earliest)
            msg = read_n(reader, 1)[0]
            assert msg.data() == b"stored by an earlier version"
            assert (msg.message_id().ledger_id(), msg.message_id().entry_id()) == (3, 0)
            assert client.create_producer(name).send(b"new").ledger_id() > 3
        finally:
            client.close()


def test_a_topic_whose_directory_cannot_be_made_gets_an_error_answer(tmp_path: Path) -> None:
    name = new_topic("blocked")
    blocked = topic_dir(tmp_path, name)
    blocked.parent.mkdir(parents=True)
    blocked.write_bytes(b"a file where the topic's directory would go")
    with broker_url("--data-dir", str(tmp_path)) as url:
        conn = connect(url)
        refused = producer(conn, name, producer_id=1)
        assert refused.type == T.ERROR
        assert refused.sub.error == E.PersistenceError
        assert str(blocked) in refused.sub.message
        ping(conn)  # the connection and its other producers stay up
        assert producer(conn, new_topic("fine"), producer_id=2).type == T.PRODUCER_SUCCESS
        assert_bystander_served(url)


# -- a data dir that refuses writes ------------------------------------------------------------------------

FILE_LIMIT = 64 * 1024


def _files_at_most_64_kib() -> None:
    # Python ignores SIGXFSZ, so a write past the limit fails with EFBIG instead of killing the broker.
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


def _send_and_answer(conn: RawConnection, producer_id: int, seq: int, payload: bytes, name: str) -> Frame:
    raw_send(conn, producer_id, seq, payload, name)
    return expect_either(conn, T.SEND_RECEIPT, T.SEND_ERROR)


def test_a_write_the_disk_refuses_fails_that_send_and_leaves_the_log_intact(tmp_path: Path) -> None:
    topic = new_topic("full")
    stored: list[bytes] = []
    with broker_url("--data-dir", str(tmp_path), preexec_fn=_files_at_most_64_kib) as url:
        conn = connect(url)
        assert producer(conn, topic, producer_id=1, name="big").type == T.PRODUCER_SUCCESS
        answers = []
        for seq in range(10):  # 10 KiB each: the seventh passes the 64 KiB file limit half-way
            payload = bytes([seq]) * 10_000
            answers.append(_send_and_answer(conn, 1, seq, payload, "big"))
            if answers[-1].type == T.SEND_RECEIPT:
                stored.append(payload)
            else:
                break
        refused = answers[-1]
        assert refused.type == T.SEND_ERROR, "the file limit was never reached"
        assert refused.sub.error == E.PersistenceError
        assert "entries.log" in refused.sub.message
        ping(conn)
        assert_bystander_served(url)
        # The partial record was cut off: a send that fits is stored whole after the good ones.
        assert producer(conn, topic, producer_id=2, name="small").type == T.PRODUCER_SUCCESS
        fits = _send_and_answer(conn, 2, 0, b"fits", "small")
        assert fits.type == T.SEND_RECEIPT
        stored.append(b"fits")
    with broker_url("--data-dir", str(tmp_path)) as url:
        client = make_client(url)
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert [m.data() for m in read_n(reader, len(stored))] == stored
            with pytest.raises(pulsar.Timeout):
                reader.read_next(300)
        finally:
            client.close()


@pytest.fixture
def disk_full(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, bool]]:
    """While ``state["full"]``, writes to an entries.log store half their bytes, then fail with ENOSPC
    (a disk filling up); while ``state["truncate_fails"]``, cutting one fails with EIO."""
    state = {"full": False, "truncate_fails": False}
    real_write, real_writev, real_ftruncate = os.write, os.writev, os.ftruncate

    def is_log(fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").endswith("entries.log")
        except OSError:
            return False

    def writev(fd: int, parts: list[bytes]) -> int:
        if state["full"] and is_log(fd):
            data = b"".join(parts)
            return real_write(fd, data[: len(data) // 2])
        return real_writev(fd, parts)

    def write(fd: int, data: bytes) -> int:
        if state["full"] and is_log(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def ftruncate(fd: int, size: int) -> None:
        if state["truncate_fails"] and is_log(fd):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_ftruncate(fd, size)

    monkeypatch.setattr(os, "writev", writev)
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "ftruncate", ftruncate)
    yield state


def _entry(i: int) -> tuple[bytes, pb.MessageMetadata]:
    md = metadata(i)
    return encode_payload_section(md, f"entry-{i}".encode() * 50), md


def test_a_failed_append_raises_storage_error_and_keeps_no_half_record(
    tmp_path: Path, disk_full: dict[str, bool]
) -> None:
    log = TopicLog("t", data_dir=tmp_path, entries_per_ledger=3)
    for i in range(4):
        log.append(*_entry(i))
    disk_full["full"] = True
    with pytest.raises(StorageError) as failed:
        log.append(*_entry(4))
    assert failed.value.path.endswith("entries.log")
    assert os.strerror(errno.ENOSPC) in failed.value.reason
    assert len(log) == 4
    disk_full["full"] = False
    after = log.append(*_entry(5))
    assert after.position == (2, 1)  # the failed append took no position
    log.close()
    reopened = TopicLog("t", data_dir=tmp_path, entries_per_ledger=3)
    assert [e.data for e in reopened.entries] == [_entry(i)[0] for i in (0, 1, 2, 3, 5)]
    assert [e.position for e in reopened.entries] == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]


def test_a_log_whose_failed_write_cannot_be_cut_refuses_appends_until_reopened(
    tmp_path: Path, disk_full: dict[str, bool]
) -> None:
    log = TopicLog("t", data_dir=tmp_path)
    log.append(*_entry(0))
    disk_full["full"] = disk_full["truncate_fails"] = True
    with pytest.raises(StorageError):
        log.append(*_entry(1))
    disk_full["full"] = disk_full["truncate_fails"] = False
    with pytest.raises(StorageError, match="unusable until reopened"):
        log.append(*_entry(2))
    log.close()
    reopened = TopicLog("t", data_dir=tmp_path)  # cuts the torn record
    assert [e.data for e in reopened.entries] == [_entry(0)[0]]
    reopened.append(*_entry(3))
    reopened.close()
    assert [e.data for e in TopicLog("t", data_dir=tmp_path).entries] == [_entry(0)[0], _entry(3)[0]]


def test_check_data_dir_names_the_path_and_the_reason(tmp_path: Path) -> None:
    good = tmp_path / "new" / "data"
    check_data_dir(good)
    assert good.is_dir() and not list(good.iterdir())
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for bad in (a_file, a_file / "below"):
        with pytest.raises(StorageError) as refused:
            check_data_dir(bad)
        assert refused.value.path == str(bad)
        assert refused.value.reason


# -- the index against a plain model --------------------------------------------------------------------


@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "disk"])
def test_index_lookups_match_a_list_of_positions_across_ledgers_trims_and_reopens(
    tmp_path: Path, on_disk: bool
) -> None:
    data_dir = tmp_path if on_disk else None
    log = TopicLog("t", data_dir=data_dir, entries_per_ledger=4, cache=EntryCache(2048))
    model: list[tuple[tuple[int, int], bytes, int]] = []  # position, data, publish time

    def add(n: int) -> None:
        for _ in range(n):
            i = len(model) + log.trimmed
            md = metadata(i, publish_time=1000 + (i * 7) % 23)
            if i % 3 == 0:
                md.num_messages_in_batch = 1 + i % 5
            md.partition_key = f"k{i % 4}"
            data = encode_payload_section(md, f"e{i}".encode())
            entry = log.append(data, md)
            model.append((entry.position, data, md.publish_time))

    def check() -> None:
        positions = [p for p, _d, _t in model]
        assert len(log) == len(model)
        assert [e.position for e in log.entries] == positions
        assert [e.data for e in log.entries] == [d for _p, d, _t in model]
        assert log.last_position == (positions[-1] if positions else (log.ledger_id, -1))
        probes = {(-1, -1), (0, 0), (2**63 - 1, 2**63 - 1)}
        for ledger, entry in positions:
            probes |= {
                (ledger, entry),
                (ledger, entry - 1),
                (ledger, entry + 1),
                (ledger + 1, -1),
                (ledger, 99),
            }
        for probe in probes:
            at_or_after = next((i for i, p in enumerate(positions) if p >= probe), len(positions))
            assert log.index_at_or_after(probe) == at_or_after, probe
            assert log.index_after(probe) == next(
                (i for i, p in enumerate(positions) if p > probe), len(positions)
            )
            assert log.index_of(probe) == (at_or_after if probe in positions else None)
        for t in range(995, 1030):
            expected = next((i for i, (_p, _d, pt) in enumerate(model) if pt >= t), len(model))
            assert log.index_by_publish_time(t) == expected

    add(10)
    check()
    log.trim_head(5)
    del model[:5]
    check()
    add(6)
    check()
    if on_disk:
        log.close()
        log = TopicLog("t", data_dir=data_dir, entries_per_ledger=4, cache=EntryCache(2048))
        check()
        add(3)  # a new ledger after the reopen
        assert model[-3][0][0] > model[-4][0][0]
        check()
    log.trim_head(len(model))
    model.clear()
    check()


def test_the_entry_cache_never_holds_more_than_its_size() -> None:
    cache = EntryCache(10_000)
    for i in range(200):
        cache.put((1, i), bytes(100 + i * 10))
        assert cache.size <= 10_000
    assert cache.get((1, 199)) is not None  # the newest stay
    assert cache.get((1, 0)) is None
    cache.put((2, 0), bytes(10_000 - CACHE_ITEM_OVERHEAD + 1))  # bigger than the whole cache
    assert cache.get((2, 0)) is None


def test_recovery_reads_records_piecewise_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    big = b"B" * (3 * READ_CHUNK)  # a record bigger than a read piece
    md_big = metadata(1)
    md_big.properties.add(key="p", value="v" * (2 * READ_CHUNK))  # metadata bigger than a read piece
    entries = [_entry(0), (encode_payload_section(metadata(1), big), metadata(1))]
    entries.append((encode_payload_section(md_big, b"x"), md_big))
    log = TopicLog("t", data_dir=tmp_path)
    for data, md in entries:
        log.append(data, md)
    log.close()
    path = topic_dir(tmp_path, "t") / "entries.log"
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(struct.pack(">II", 10_000, 0) + b"torn")
    reopened = TopicLog("t", data_dir=tmp_path)
    assert [e.data for e in reopened.entries] == [d for d, _md in entries]
    assert path.stat().st_size == size


def test_a_corrupt_record_length_is_not_an_allocation(tmp_path: Path) -> None:
    log = TopicLog("t", data_dir=tmp_path, cache=EntryCache(0))
    for i in range(40):
        md = metadata(i)
        log.append(encode_payload_section(md, bytes([i]) * MiB), md)
    log.close()
    path = topic_dir(tmp_path, "t") / "entries.log"
    with open(path, "r+b") as f:  # the first record now claims most of the file
        f.write(struct.pack(">I", path.stat().st_size - 100))
    tracemalloc.start()
    reopened = TopicLog("t", data_dir=tmp_path, cache=EntryCache(0))
    _now, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(reopened) == 0
    assert path.stat().st_size == 0
    assert peak < 6 * READ_CHUNK, f"recovery of a record claiming 40 MiB allocated {peak / MiB:.1f} MiB"
