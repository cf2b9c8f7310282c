"""Durable state of the group coordinator: committed offsets and group metadata, as a record log.

Kafka keeps both in the ``__consumer_offsets`` topic; we keep them in one append-only file,
``DATA_DIR/__groups/groups.log``. Each line is one record::

    CRC32 (8 hex digits) SPACE JSON NEWLINE

with the CRC (zlib's CRC-32) over the JSON text. Records:

- ``{"k": "o", "g": group, "t": topic, "p": partition, "o": offset, "e": leader_epoch,
  "m": metadata, "ts": commit_ms}`` — a committed offset (the latest one for a partition wins);
- ``{"k": "od", "g": group, "t": topic, "p": partition}`` — the offset was deleted;
- ``{"k": "g", "g": group, ...}`` — the group's metadata as :meth:`GroupRecord.to_json` writes it
  (generation, protocol, leader, members with their subscription and assignment, base64);
- ``{"k": "gd", "g": group}`` — the group and its offsets were deleted.

An append is one ``write`` of whole lines, flushed before the caller acknowledges (so an
acknowledged commit survives ``kill -9`` of the broker; ``fsync=True`` also survives a power
loss). Loading replays the log; a line whose CRC or JSON is bad ends the replay there (a torn
tail after a crash) and the file is cut back to the last good line. When dead records outnumber
live ones the log is rewritten (temporary file, fsync, rename).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DIR_NAME = "__groups"
LOG_NAME = "groups.log"
#: a rewrite happens only once the log holds at least this many records
COMPACT_MIN_RECORDS = 1000


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """What a restarted coordinator needs of a member of a stable group."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    group_id: str
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str | None
    members: tuple[MemberRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode("ascii")

        return {
            "k": "g",
            "g": self.group_id,
            "gen": self.generation,
            "pt": self.protocol_type,
            "pn": self.protocol_name,
            "l": self.leader,
            "ms": [
                {
                    "id": m.member_id,
                    "iid": m.instance_id,
                    "cid": m.client_id,
                    "host": m.client_host,
                    "st": m.session_timeout_ms,
                    "rt": m.rebalance_timeout_ms,
                    "ps": [[name, b64(meta)] for name, meta in m.protocols],
                    "a": b64(m.assignment),
                }
                for m in self.members
            ],
        }

    @classmethod
    def from_json(cls, rec: dict[str, Any]) -> GroupRecord:
        members = tuple(
            MemberRecord(
                member_id=str(m["id"]),
                instance_id=m["iid"],
                client_id=str(m["cid"]),
                client_host=str(m["host"]),
                session_timeout_ms=int(m["st"]),
                rebalance_timeout_ms=int(m["rt"]),
                protocols=tuple((str(name), base64.b64decode(meta)) for name, meta in m["ps"]),
                assignment=base64.b64decode(m["a"]),
            )
            for m in rec["ms"]
        )
        return cls(str(rec["g"]), int(rec["gen"]), rec["pt"], rec["pn"], rec["l"], members)


@dataclass
class StoredState:
    """What :meth:`GroupStore.load` found: each group's metadata (if any) and offsets."""

    groups: dict[str, GroupRecord] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)


def _line(record: dict[str, Any]) -> bytes:
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return b"%08x %s\n" % (zlib.crc32(text), text)


def _parse(line: bytes) -> dict[str, Any] | None:
    if len(line) < 10 or line[8:9] != b" " or not line.endswith(b"\n"):
        return None
    text = line[9:-1]
    try:
        if int(line[:8], 16) != zlib.crc32(text):
            return None
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


class GroupStore:
    """The coordinator's record log under ``data_dir`` (None: memory only, nothing persisted)."""

    def __init__(self, data_dir: Path | None, *, fsync: bool = False) -> None:
        self.path = None if data_dir is None else Path(data_dir) / DIR_NAME / LOG_NAME
        self.fsync = fsync
        self._fd: int | None = None
        self._records = 0
        self._live = 0

    def load(self) -> StoredState:
        """Replay the log; raises OSError when the directory cannot be read or created."""
        state = StoredState()
        if self.path is None:
            return state
        self.path.parent.mkdir(parents=True, exist_ok=True)
        good = 0
        records = 0
        if self.path.exists():
            with self.path.open("rb") as f:
                for line in f:
                    record = _parse(line)
                    if record is None or not self._apply(state, record):
                        log.warning(
                            "%s: a damaged record at byte %d ends the replay (a write cut by a crash);"
                            " the %d bytes after it are dropped",
                            self.path,
                            good,
                            self.path.stat().st_size - good,
                        )
                        break
                    good += len(line)
                    records += 1
            if good != self.path.stat().st_size:
                os.truncate(self.path, good)
        self._records = records
        self._live = len(state.groups) + sum(len(o) for o in state.offsets.values())
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if self._records >= COMPACT_MIN_RECORDS and self._records > 2 * self._live:
            self.rewrite(state)
        return state

    @staticmethod
    def _apply(state: StoredState, record: dict[str, Any]) -> bool:
        try:
            kind = record["k"]
            group = str(record["g"])
            if kind == "o":
                state.offsets.setdefault(group, {})[(str(record["t"]), int(record["p"]))] = CommittedOffset(
                    int(record["o"]), int(record["e"]), record["m"], int(record["ts"])
                )
            elif kind == "od":
                state.offsets.get(group, {}).pop((str(record["t"]), int(record["p"])), None)
            elif kind == "g":
                state.groups[group] = GroupRecord.from_json(record)
            elif kind == "gd":
                state.groups.pop(group, None)
                state.offsets.pop(group, None)
            else:
                return False
        except (KeyError, TypeError, ValueError):
            return False
        return True

    def append(self, records: Iterable[dict[str, Any]], *, live_delta: int = 0) -> None:
        """Write records as one append, flushed (and fsynced when asked) before returning.

        Raises OSError (disk full, read-only): the caller answers with an error, nothing is acked.
        """
        lines = [_line(r) for r in records]
        if not lines or self.path is None:
            return
        assert self._fd is not None, "load() first"
        data = b"".join(lines)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        if self.fsync:
            os.fsync(self._fd)
        self._records += len(lines)
        self._live = max(self._live + live_delta, 0)

    def should_rewrite(self) -> bool:
        return self._records >= COMPACT_MIN_RECORDS and self._records > 2 * max(self._live, 1)

    def rewrite(self, state: StoredState) -> None:
        """Replace the log by the live records of ``state`` (atomic: temp file, fsync, rename)."""
        if self.path is None:
            return
        records: list[dict[str, Any]] = [g.to_json() for g in state.groups.values()]
        for group, offsets in state.offsets.items():
            records.extend(offset_record(group, topic, partition, o) for (topic, partition), o in offsets.items())
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as f:
            f.write(b"".join(_line(r) for r in records))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._records = self._live = len(records)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def offset_record(group: str, topic: str, partition: int, o: CommittedOffset) -> dict[str, Any]:
    return {
        "k": "o",
        "g": group,
        "t": topic,
        "p": partition,
        "o": o.offset,
        "e": o.leader_epoch,
        "m": o.metadata,
        "ts": o.commit_ms,
    }


def offset_delete_record(group: str, topic: str, partition: int) -> dict[str, Any]:
    return {"k": "od", "g": group, "t": topic, "p": partition}


def group_delete_record(group: str) -> dict[str, Any]:
    return {"k": "gd", "g": group}
