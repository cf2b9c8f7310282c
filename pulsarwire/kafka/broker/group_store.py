"""Durable state of the group coordinator: committed offsets and group metadata, as a record log.

Kafka keeps both in the ``__consumer_offsets`` topic; we keep them in one append-only
:class:`~pulsarwire._log.RecordFile` (the brokers' shared checksummed log: length, CRC32C,
payload), ``DATA_DIR/__groups/groups.log``. Each record's payload is a JSON list of entries
written together (one OffsetCommit is one record, so it is all there after a crash or not at all):

- ``{"k": "o", "g": group, "t": topic, "p": partition, "o": offset, "e": leader_epoch,
  "m": metadata, "ts": commit_ms}`` -- a committed offset (the latest one for a partition wins);
- ``{"k": "od", "g": group, "t": topic, "p": partition}`` -- the offset was deleted;
- ``{"k": "g", "g": group, ...}`` -- the group's metadata as :meth:`GroupRecord.to_json` writes it
  (generation, protocol, leader, members with their subscription and assignment, base64);
- ``{"k": "gd", "g": group}`` -- the group and its offsets were deleted.

An append reaches the OS before the caller acknowledges (an acknowledged commit survives
``kill -9`` of the broker; ``fsync=True`` also survives a power loss). Loading replays the log;
the record file cuts a torn or corrupt tail, and a record whose JSON we cannot read ends the
replay there too. When dead entries outnumber live ones the log is rewritten (a new file,
fsync, rename).
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsarwire._log import EntryCache, OpenFiles, RecordFile
from pulsarwire.errors import StorageError

log = logging.getLogger(__name__)

DIR_NAME = "__groups"
LOG_NAME = "groups.log"
#: a rewrite happens only once the log holds at least this many entries
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


def _payload(records: Iterable[dict[str, Any]]) -> bytes:
    return json.dumps(list(records), separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class GroupStore:
    """The coordinator's record log under ``data_dir`` (None: memory only, nothing persisted)."""

    def __init__(self, data_dir: Path | None, *, fsync: bool = False) -> None:
        self.path = None if data_dir is None else Path(data_dir) / DIR_NAME / LOG_NAME
        self.fsync = fsync
        self._file: RecordFile | None = None
        self._files = OpenFiles(1)
        self._entries = 0
        self._live = 0

    def _open(self, path: Path) -> RecordFile:
        return RecordFile(path, cache=EntryCache(0), files=self._files, fsync=self.fsync)

    def load(self) -> StoredState:
        """Replay the log; raises StorageError when it cannot be read (or its directory made)."""
        state = StoredState()
        if self.path is None:
            return state
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                self.path.parent, f"cannot create the groups directory: {exc.strerror}"
            ) from None
        entries = 0

        def accept(offset: int, length: int, head: bytes, fd: int) -> bool:
            nonlocal entries
            data = (
                head if len(head) == length else head + os.pread(fd, length - len(head), offset + len(head))
            )
            try:
                records = json.loads(data)
            except ValueError:
                records = None
            if not isinstance(records, list) or not all(
                isinstance(r, dict) and self._apply(state, r) for r in records
            ):
                log.warning(
                    "%s: an unreadable record at byte %d ends the replay; the rest is dropped",
                    self.path,
                    offset,
                )
                return False
            entries += len(records)
            return True

        self._file = self._open(self.path)
        self._file.recover(accept)
        self._entries = entries
        self._live = len(state.groups) + sum(len(o) for o in state.offsets.values())
        if self.should_rewrite():
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
        """Write ``records`` as one record of the log, in the OS (fsynced when asked) on return.

        Raises StorageError (disk full, read-only...): the caller answers with an error, nothing
        is acknowledged, and the log is as before.
        """
        batch = list(records)
        if not batch or self._file is None:
            return
        self._file.append([_payload(batch)])
        self._entries += len(batch)
        self._live = max(self._live + live_delta, 0)

    def should_rewrite(self) -> bool:
        return self._entries >= COMPACT_MIN_RECORDS and self._entries > 2 * max(self._live, 1)

    def rewrite(self, state: StoredState) -> None:
        """Replace the log by the live entries of ``state`` (a new file, fsync, rename).

        Raises StorageError; the old log is then still in place.
        """
        if self.path is None:
            return
        records: list[dict[str, Any]] = [g.to_json() for g in state.groups.values()]
        for group, offsets in state.offsets.items():
            records.extend(
                offset_record(group, topic, partition, o) for (topic, partition), o in offsets.items()
            )
        tmp = self.path.with_suffix(".rewrite")
        tmp.unlink(missing_ok=True)
        new = RecordFile(tmp, cache=EntryCache(0), files=OpenFiles(1), fsync=True)
        try:
            for i in range(0, len(records), 1000):
                new.append([_payload(records[i : i + 1000])])
            new.close()
            os.replace(tmp, self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise StorageError(self.path, f"cannot rewrite the group log: {exc.strerror}") from None
        if self._file is not None:
            self._file.close()
        self._file = self._open(self.path)
        self._file.end = os.stat(self.path).st_size
        self._entries = self._live = len(records)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


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
