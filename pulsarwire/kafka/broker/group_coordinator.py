"""The group coordinator: Kafka's classic group protocol and committed offsets, over plain dicts.

:class:`GroupCoordinator` holds every group's state machine (Kafka's ``ClassicGroup``)::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable --join / leave / expiry--> PreparingRebalance
    any --last member gone--> Empty;  Empty --DeleteGroups--> Dead (forgotten)

and follows Apache Kafka's ``GroupMetadataManager`` (group-coordinator module) rule by rule:
KIP-394 member ids (JoinGroup v4+ without a member id gets MEMBER_ID_REQUIRED and a new id),
protocol selection (candidates are the protocols every member supports; each member votes for
its first candidate; most votes wins), the leader's member list, static membership
(``group.instance.id``: a rejoining instance replaces its old member id, FENCED_INSTANCE_ID for
the old one), the initial rebalance delay (``group.initial.rebalance.delay.ms``), session
timeouts, the rebalance timeout for members that do not rejoin or do not sync, and offset commit
validation (simple consumers commit with generation -1 into an empty group).

Time never comes from the machine inside: ``clock`` (milliseconds) is passed in and
:meth:`GroupCoordinator.poll` expires what is due, so unit tests advance a fake clock; the
broker arms a :class:`DeadlineTimer` (one ``call_later`` at :meth:`next_deadline`, moved
earlier when a deadline moves). JoinGroup and SyncGroup park their callers on asyncio futures until the
rebalance step completes.

Committed offsets and the metadata of groups are written to :class:`GroupStore` before they are
acknowledged; a restarted coordinator loads them (members of a stable group get a fresh session
timeout to heartbeat again, as Kafka's coordinator does after loading ``__consumer_offsets``).

The request handlers (one per API, bodies as the codec's dicts) live in
``groups.py``; this module knows nothing of versions' encodings.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pulsarwire.errors import StorageError
from pulsarwire.kafka.broker.group_store import (
    CommittedOffset,
    GroupRecord,
    GroupStore,
    MemberRecord,
    StoredState,
    group_delete_record,
    offset_delete_record,
    offset_record,
)
from pulsarwire.kafka.errors import ERROR_CODES as E

log = logging.getLogger(__name__)

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
STATES = (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)

CONSUMER_PROTOCOL = "consumer"


class GroupError(Exception):
    """A request the coordinator refuses with a Kafka error code (``code``)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.code = E[name]


@dataclass(frozen=True)
class GroupConfig:
    """The coordinator's settings; defaults are Kafka's except where a bound keeps memory finite."""

    #: group.min.session.timeout.ms / group.max.session.timeout.ms
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    #: group.initial.rebalance.delay.ms
    initial_rebalance_delay_ms: int = 3000
    #: how long a new member's JoinGroup may wait for the rebalance (Kafka: 5 minutes)
    new_member_join_timeout_ms: int = 300_000
    #: group.max.size (Kafka: unlimited; here a bound on members per group)
    max_size: int = 1000
    #: offset.metadata.max.bytes (Kafka counts characters)
    offset_metadata_max_bytes: int = 4096
    #: groups the coordinator holds at most (a new group over it: COORDINATOR_NOT_AVAILABLE)
    max_groups: int = 100_000


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass(eq=False)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    deadline: float = 0.0
    is_new: bool = False
    join_waiter: asyncio.Future[dict[str, Any]] | None = None
    sync_waiter: asyncio.Future[dict[str, Any]] | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)

    def metadata(self, protocol: str | None) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def record(self) -> MemberRecord:
        return MemberRecord(
            self.member_id,
            self.instance_id,
            self.client_id,
            self.client_host,
            self.session_timeout_ms,
            self.rebalance_timeout_ms,
            tuple(self.protocols),
            self.assignment,
        )


@dataclass(eq=False)
class Group:
    group_id: str
    state: str = EMPTY
    previous_state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: KIP-394 member ids handed out and not joined yet, with their deadline
    pending: dict[str, float] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)
    pending_sync: set[str] = field(default_factory=set)
    join_deadline: float | None = None
    sync_deadline: float | None = None
    #: during the initial delayed rebalance: (delay, remaining) of the next step, and whether a
    #: member joined during the current step
    initial_delay: tuple[int, int] | None = None
    new_member_added: bool = False
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)

    def transition(self, state: str) -> None:
        self.previous_state, self.state = self.state, state

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def all_joined(self) -> bool:
        return self.awaiting_join_count() == len(self.members) and not self.pending

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supported_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for m in self.members.values():
            for name in {name for name, _ in m.protocols}:
                counts[name] = counts.get(name, 0) + 1
        return counts

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if self.state == EMPTY:
            return bool(protocol_type) and bool(protocols)
        counts = self.supported_counts()
        return self.protocol_type == protocol_type and any(
            counts.get(name, 0) == len(self.members) for name, _ in protocols
        )

    def select_protocol(self) -> str:
        counts = self.supported_counts()
        candidates = {name for name, n in counts.items() if n == len(self.members)}
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # most votes; a tie goes to the protocol voted for first (Kafka leaves ties to a hash map)
        return max(votes, key=lambda name: votes[name])

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.pending.pop(member.member_id, None)
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id

    def remove(self, member_id: str) -> None:
        self.pending.pop(member_id, None)
        member = self.members.pop(member_id, None)
        if member is None:
            return
        if member.instance_id is not None and self.static.get(member.instance_id) == member_id:
            del self.static[member.instance_id]
        self.pending_sync.discard(member_id)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)

    def elect_joined_leader(self) -> bool:
        if self.leader is None:
            return False
        if self.members[self.leader].awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader = m.member_id
                return True
        return False

    def validate_member(self, member_id: str, instance_id: str | None) -> Member:
        """Kafka's ``validateMember``: raises GroupError(FENCED_INSTANCE_ID / UNKNOWN_MEMBER_ID)."""
        if instance_id is not None:
            existing = self.static.get(instance_id)
            if existing is None:
                raise GroupError("UNKNOWN_MEMBER_ID")
            if existing != member_id:
                raise GroupError("FENCED_INSTANCE_ID")
        member = self.members.get(member_id)
        if member is None:
            raise GroupError("UNKNOWN_MEMBER_ID")
        return member

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol only; None when unknown)."""
        if self.protocol_type != CONSUMER_PROTOCOL:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_subscription(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        topics = self.subscribed_topics()
        return self.protocol_type == CONSUMER_PROTOCOL if topics is None else topic in topics

    def record(self) -> GroupRecord:
        return GroupRecord(
            self.group_id,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader,
            tuple(m.record() for m in self.members.values()),
        )


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def parse_subscription(data: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (its v0 prefix: version, topics); None if bad.

    Counts and lengths are checked against the bytes present before anything is read.
    """
    try:
        pos = 2  # version (int16): every version starts with the v0 layout
        (count,) = _I32.unpack_from(data, pos)
        pos += 4
        if count < 0 or count * 2 > len(data) - pos:
            return None
        topics = []
        for _ in range(count):
            (size,) = _I16.unpack_from(data, pos)
            pos += 2
            if size < 0 or size > len(data) - pos:
                return None
            topics.append(data[pos : pos + size].decode("utf-8"))
            pos += size
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def _join_error(member_id: str, name: str) -> dict[str, Any]:
    return {
        "error_code": E[name],
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


def _sync_answer(name: str, group: Group | None = None, assignment: bytes = b"") -> dict[str, Any]:
    ok = name == "NONE" and group is not None
    return {
        "error_code": E[name],
        "protocol_type": group.protocol_type if ok and group else None,
        "protocol_name": group.protocol_name if ok and group else None,
        "assignment": assignment,
    }


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """What a JoinGroup says about the member (besides its group and member id)."""

    instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True)
class OffsetCommitPart:
    """One partition of an OffsetCommit: what to store, or the error it gets."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_ms: int = -1


class GroupCoordinator:
    """Every group's state and committed offsets; see the module docstring."""

    def __init__(
        self,
        store: GroupStore | None = None,
        config: GroupConfig | None = None,
        *,
        clock: Callable[[], float] = monotonic_ms,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.store = store if store is not None else GroupStore(None)
        self.config = config or GroupConfig()
        self.clock = clock
        self.wall_clock_ms = wall_clock_ms
        self.groups: dict[str, Group] = {}
        #: called when a deadline may have moved earlier (the broker's timer wakes up)
        self.on_deadline: Callable[[], None] = lambda: None
        self._load(self.store.load())

    # -- loading and persisting -------------------------------------------------------------

    def _load(self, state: StoredState) -> None:
        now = self.clock()
        for group_id, record in state.groups.items():
            g = Group(group_id, generation=record.generation, protocol_type=record.protocol_type)
            if record.members:
                g.protocol_name = record.protocol_name
                for m in record.members:
                    g.add(
                        Member(
                            m.member_id,
                            m.instance_id,
                            m.client_id,
                            m.client_host,
                            m.session_timeout_ms,
                            m.rebalance_timeout_ms,
                            record.protocol_type or "",
                            list(m.protocols),
                            m.assignment,
                            deadline=now + m.session_timeout_ms,
                        )
                    )
                g.leader = record.leader if record.leader in g.members else g.leader
                g.state = STABLE
            self.groups[group_id] = g
        for group_id, offsets in state.offsets.items():
            g = self.groups.setdefault(group_id, Group(group_id))
            g.offsets.update(offsets)

    def _persist_group(self, g: Group) -> None:
        try:
            self.store.append([g.record().to_json()])
        except StorageError as exc:
            # Kafka too carries on when the metadata write fails (members rejoin after a restart)
            log.error("group %s: its metadata could not be written: %s", g.group_id, exc)

    def _stored_state(self) -> StoredState:
        state = StoredState()
        for g in self.groups.values():
            if g.state != EMPTY or g.generation or g.protocol_type:
                state.groups[g.group_id] = g.record()
            if g.offsets:
                state.offsets[g.group_id] = dict(g.offsets)
        return state

    def _maybe_compact(self) -> None:
        if self.store.should_rewrite():
            try:
                self.store.rewrite(self._stored_state())
            except StorageError as exc:
                log.error("the group log could not be compacted: %s", exc)

    def close(self) -> None:
        for g in self.groups.values():
            for m in g.members.values():
                for waiter in (m.join_waiter, m.sync_waiter):
                    if waiter is not None and not waiter.done():
                        waiter.cancel()
        self.store.close()

    # -- JoinGroup ------------------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        *,
        instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
        supports_skip_assignment: bool = False,
    ) -> dict[str, Any]:
        """JoinGroup; returns the response body (fields of the latest version)."""
        if not group_id:
            return _join_error(member_id, "INVALID_GROUP_ID")
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return _join_error(member_id, "INVALID_SESSION_TIMEOUT")
        unknown = member_id == ""
        g = self.groups.get(group_id)
        if g is None:
            if not unknown:
                return _join_error(member_id, "UNKNOWN_MEMBER_ID")
            if len(self.groups) >= cfg.max_groups:
                return _join_error(member_id, "COORDINATOR_NOT_AVAILABLE")
            g = self.groups[group_id] = Group(group_id)
        if not self._accept(g, member_id):
            g.remove(member_id)
            return _join_error("", "GROUP_MAX_SIZE_REACHED")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[dict[str, Any]] = loop.create_future()
        request = JoinRequest(
            instance_id,
            protocol_type,
            list(protocols),
            session_timeout_ms,
            rebalance_timeout_ms,
            client_id,
            client_host,
        )
        if unknown:
            answer = self._join_new(g, request, waiter, require_known_member_id, supports_skip_assignment)
        else:
            answer = self._join_existing(g, member_id, request, waiter)
        if answer is not None:
            return answer
        self.on_deadline()
        return await waiter

    def _accept(self, g: Group, member_id: str) -> bool:
        if g.state in (EMPTY, DEAD):
            return True
        member = g.members.get(member_id)
        if g.state == PREPARING_REBALANCE:
            return (
                member is not None and member.awaiting_join
            ) or g.awaiting_join_count() < self.config.max_size
        return member is not None or len(g.members) < self.config.max_size

    def _join_new(
        self,
        g: Group,
        request: JoinRequest,
        waiter: asyncio.Future[dict[str, Any]],
        require_known_member_id: bool,
        supports_skip_assignment: bool,
    ) -> dict[str, Any] | None:
        instance_id = request.instance_id
        if g.state == DEAD:
            return _join_error("", "COORDINATOR_NOT_AVAILABLE")
        if not g.supports(request.protocol_type, request.protocols):
            return _join_error("", "INCONSISTENT_GROUP_PROTOCOL")
        new_id = f"{instance_id if instance_id is not None else request.client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_id = g.static.get(instance_id)
            if old_id is not None:
                return self._replace_static(g, old_id, new_id, request, waiter, supports_skip_assignment)
        elif require_known_member_id:
            if len(g.pending) >= self.config.max_size:
                # ids handed out and never used would otherwise pile up for a session timeout each
                return _join_error("", "GROUP_MAX_SIZE_REACHED")
            g.pending[new_id] = self.clock() + request.session_timeout_ms
            self.on_deadline()
            return _join_error(new_id, "MEMBER_ID_REQUIRED")
        self._add_member(g, new_id, request, waiter)
        return None

    def _join_existing(
        self,
        g: Group,
        member_id: str,
        request: JoinRequest,
        waiter: asyncio.Future[dict[str, Any]],
    ) -> dict[str, Any] | None:
        instance_id, protocols = request.instance_id, request.protocols
        if g.state == DEAD:
            return _join_error(member_id, "COORDINATOR_NOT_AVAILABLE")
        if not g.supports(request.protocol_type, protocols):
            return _join_error(member_id, "INCONSISTENT_GROUP_PROTOCOL")
        if member_id in g.pending:
            if instance_id is not None:
                return _join_error(member_id, "UNKNOWN_MEMBER_ID")
            self._add_member(g, member_id, request, waiter)
            return None
        try:
            member = g.validate_member(member_id, instance_id)
        except GroupError as exc:
            return _join_error(member_id, ERRORS_BY_CODE[exc.code])
        if g.state == PREPARING_REBALANCE:
            self._update_member(g, member, request, waiter)
        elif g.state == COMPLETING_REBALANCE:
            if member.matches(protocols):
                return self._join_answer(g, member_id, leader_view=g.leader == member_id)
            self._update_member(g, member, request, waiter)
        elif g.state == STABLE:
            if g.leader == member_id or not member.matches(protocols):
                self._update_member(g, member, request, waiter)
            else:
                return self._join_answer(g, member_id, leader_view=False)
        else:
            return _join_error(member_id, "UNKNOWN_MEMBER_ID")
        return None

    def _join_answer(
        self, g: Group, member_id: str, *, leader_view: bool, skip: bool = False
    ) -> dict[str, Any]:
        members = (
            [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.instance_id,
                    "metadata": m.metadata(g.protocol_name),
                }
                for m in g.members.values()
            ]
            if leader_view
            else []
        )
        return {
            "error_code": 0,
            "generation_id": g.generation,
            "protocol_type": g.protocol_type,
            "protocol_name": g.protocol_name,
            "leader": g.leader or "",
            "skip_assignment": skip,
            "member_id": member_id,
            "members": members,
        }

    def _add_member(
        self,
        g: Group,
        member_id: str,
        request: JoinRequest,
        waiter: asyncio.Future[dict[str, Any]],
    ) -> None:
        member = Member(
            member_id,
            request.instance_id,
            request.client_id,
            request.client_host,
            request.session_timeout_ms,
            request.rebalance_timeout_ms,
            request.protocol_type,
            list(request.protocols),
            is_new=True,
            join_waiter=waiter,
            deadline=self.clock() + self.config.new_member_join_timeout_ms,
        )
        if g.state == PREPARING_REBALANCE and g.previous_state == EMPTY:
            g.new_member_added = True
        g.add(member)
        self._prepare_or_complete(g)

    def _update_member(
        self,
        g: Group,
        member: Member,
        request: JoinRequest,
        waiter: asyncio.Future[dict[str, Any]] | None,
    ) -> None:
        member.protocols = list(request.protocols)
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if member.join_waiter is not None and not member.join_waiter.done():
            # a second JoinGroup of the same member replaces the first (Kafka answers the old
            # one with UNKNOWN_MEMBER_ID only when it removes the member; here it is superseded)
            member.join_waiter.set_result(_join_error(member.member_id, "REBALANCE_IN_PROGRESS"))
        member.join_waiter = waiter
        self._prepare_or_complete(g)

    def _replace_static(
        self,
        g: Group,
        old_id: str,
        new_id: str,
        request: JoinRequest,
        waiter: asyncio.Future[dict[str, Any]],
        supports_skip_assignment: bool,
    ) -> dict[str, Any] | None:
        member = g.members.pop(old_id)
        for old_waiter in (member.join_waiter, member.sync_waiter):
            if old_waiter is not None and not old_waiter.done():
                old_waiter.set_result(_join_error(old_id, "FENCED_INSTANCE_ID"))
        member.join_waiter = member.sync_waiter = None
        member.member_id = new_id
        g.members[new_id] = member
        assert member.instance_id is not None
        g.static[member.instance_id] = new_id
        if g.leader == old_id:
            g.leader = new_id
        if old_id in g.pending_sync:
            g.pending_sync.discard(old_id)
            g.pending_sync.add(new_id)
        member.deadline = self.clock() + member.session_timeout_ms
        member.protocols = list(request.protocols)
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if g.state == STABLE:
            if g.protocol_name == g.select_protocol():
                self._persist_group(g)
                is_leader = g.leader == new_id
                if supports_skip_assignment:
                    return self._join_answer(g, new_id, leader_view=is_leader, skip=is_leader)
                return self._join_answer(g, new_id, leader_view=False)
            member.join_waiter = waiter
            self._prepare_or_complete(g)
            return None
        member.join_waiter = waiter
        if g.state == COMPLETING_REBALANCE:
            self._prepare_rebalance(g)
        else:
            self._maybe_complete_join(g)
        return None

    # -- rebalance steps ------------------------------------------------------------------------

    def _prepare_or_complete(self, g: Group) -> None:
        if g.state in (STABLE, COMPLETING_REBALANCE, EMPTY):
            self._prepare_rebalance(g)
        else:
            self._maybe_complete_join(g)

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state == PREPARING_REBALANCE and g.previous_state != EMPTY and g.all_joined():
            self._complete_join(g)

    def _prepare_rebalance(self, g: Group) -> None:
        if g.state == COMPLETING_REBALANCE:
            for m in g.members.values():
                m.assignment = b""
            self._propagate_assignment(g, "REBALANCE_IN_PROGRESS")
        g.pending_sync.clear()
        g.sync_deadline = None
        initial = g.state == EMPTY
        now = self.clock()
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            g.initial_delay = (delay, max(g.rebalance_timeout_ms() - delay, 0))
            g.new_member_added = False
            g.join_deadline = now + delay
        g.transition(PREPARING_REBALANCE)
        log.info("group %s: preparing to rebalance (generation %d)", g.group_id, g.generation)
        if not initial:
            if g.all_joined():
                self._complete_join(g)
            else:
                g.join_deadline = now + g.rebalance_timeout_ms()
        self.on_deadline()

    def _complete_join(self, g: Group) -> None:
        g.join_deadline = None
        g.initial_delay = None
        for m in [m for m in g.members.values() if not m.awaiting_join and m.instance_id is None]:
            g.remove(m.member_id)
        if g.state == DEAD:
            return
        if not g.elect_joined_leader() and g.members:
            g.join_deadline = self.clock() + g.rebalance_timeout_ms()
            return
        g.generation += 1
        now = self.clock()
        if not g.members:
            g.protocol_name = None
            g.transition(EMPTY)
            self._persist_group(g)
            return
        g.protocol_name = g.select_protocol()
        g.transition(COMPLETING_REBALANCE)
        log.info(
            "group %s: generation %d with %d members, protocol %s",
            g.group_id,
            g.generation,
            len(g.members),
            g.protocol_name,
        )
        for m in g.members.values():
            if m.join_waiter is not None:
                if not m.join_waiter.done():
                    m.join_waiter.set_result(
                        self._join_answer(g, m.member_id, leader_view=g.leader == m.member_id)
                    )
                m.join_waiter = None
            m.deadline = now + m.session_timeout_ms
            m.is_new = False
            g.pending_sync.add(m.member_id)
        g.sync_deadline = now + g.rebalance_timeout_ms()

    def _propagate_assignment(self, g: Group, error: str) -> None:
        now = self.clock()
        for m in g.members.values():
            if m.sync_waiter is not None:
                if not m.sync_waiter.done():
                    m.sync_waiter.set_result(_sync_answer(error, g, m.assignment))
                m.sync_waiter = None
                m.deadline = now + m.session_timeout_ms

    def _remove_member(self, g: Group, member: Member) -> None:
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(_join_error("", "UNKNOWN_MEMBER_ID"))
        member.join_waiter = None
        if member.sync_waiter is not None and not member.sync_waiter.done():
            member.sync_waiter.set_result(_sync_answer("UNKNOWN_MEMBER_ID"))
        member.sync_waiter = None
        g.remove(member.member_id)

    # -- timers ---------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The earliest clock value at which :meth:`poll` has something to do."""
        best: float | None = None
        for g in self.groups.values():
            for d in (
                g.join_deadline,
                g.sync_deadline,
                *g.pending.values(),
                *(m.deadline for m in g.members.values()),
            ):
                if d is not None and (best is None or d < best):
                    best = d
        return best

    def poll(self) -> None:
        """Expire sessions, pending member ids, rebalance and sync timeouts that are due; forget
        empty groups that hold no offsets (Kafka's group metadata clean-up)."""
        now = self.clock()
        for g in list(self.groups.values()):
            if g.state == EMPTY and not (g.members or g.pending or g.offsets):
                self._forget(g)
                continue
            for member_id, deadline in list(g.pending.items()):
                if deadline <= now:
                    g.pending.pop(member_id, None)
                    if g.state == PREPARING_REBALANCE and g.all_joined():
                        self._complete_join(g)
            for member in list(g.members.values()):
                if member.deadline > now or member.member_id not in g.members:
                    continue
                satisfied = not member.is_new and (member.awaiting_join or member.awaiting_sync)
                if satisfied:
                    member.deadline = now + member.session_timeout_ms
                    continue
                log.info("group %s: member %s's session expired", g.group_id, member.member_id)
                self._remove_member(g, member)
                if g.state in (STABLE, COMPLETING_REBALANCE):
                    self._prepare_or_complete(g)
                elif g.state == PREPARING_REBALANCE and g.all_joined():
                    self._complete_join(g)
            if g.join_deadline is not None and g.state != PREPARING_REBALANCE:
                g.join_deadline = None
            if g.join_deadline is not None and g.join_deadline <= now:
                if g.initial_delay is not None:
                    delay, remaining = g.initial_delay
                    if g.new_member_added and remaining:
                        g.new_member_added = False
                        step = min(self.config.initial_rebalance_delay_ms, remaining)
                        g.initial_delay = (step, max(remaining - delay, 0))
                        g.join_deadline = now + step
                        continue
                self._complete_join(g)
            if g.sync_deadline is not None and g.sync_deadline <= now:
                g.sync_deadline = None
                if g.state in (COMPLETING_REBALANCE, STABLE) and g.pending_sync:
                    for member_id in list(g.pending_sync):
                        late = g.members.get(member_id)
                        if late is not None:
                            log.info("group %s: member %s did not sync in time", g.group_id, member_id)
                            self._remove_member(g, late)
                    g.pending_sync.clear()
                    self._prepare_rebalance(g)

    # -- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------------

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        *,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Iterable[tuple[str, bytes]],
    ) -> dict[str, Any]:
        if not group_id:
            return _sync_answer("INVALID_GROUP_ID")
        g = self.groups.get(group_id)
        if g is None or g.state == EMPTY:
            return _sync_answer("UNKNOWN_MEMBER_ID")
        if g.state == DEAD:
            return _sync_answer("COORDINATOR_NOT_AVAILABLE")
        try:
            member = g.validate_member(member_id, instance_id)
        except GroupError as exc:
            return _sync_answer(ERRORS_BY_CODE[exc.code])
        if generation != g.generation:
            return _sync_answer("ILLEGAL_GENERATION")
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
            protocol_name is not None and protocol_name != g.protocol_name
        ):
            return _sync_answer("INCONSISTENT_GROUP_PROTOCOL")
        if g.state == PREPARING_REBALANCE:
            return _sync_answer("REBALANCE_IN_PROGRESS")
        if g.state == STABLE:
            g.pending_sync.discard(member_id)
            return _sync_answer("NONE", g, member.assignment)
        # CompletingRebalance
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        if member.sync_waiter is not None and not member.sync_waiter.done():
            member.sync_waiter.set_result(_sync_answer("REBALANCE_IN_PROGRESS"))
        member.sync_waiter = waiter
        g.pending_sync.discard(member_id)
        if g.leader == member_id:
            given = dict(assignments)
            for m in g.members.values():
                m.assignment = given.get(m.member_id, b"")
            self._persist_group(g)
            self._propagate_assignment(g, "NONE")
            g.transition(STABLE)
            log.info("group %s: generation %d is stable", g.group_id, g.generation)
        return await waiter

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> int:
        if not group_id:
            return E["INVALID_GROUP_ID"]
        g = self.groups.get(group_id)
        if g is None:
            return E["UNKNOWN_MEMBER_ID"]
        if g.state == DEAD:
            return E["COORDINATOR_NOT_AVAILABLE"]
        try:
            member = g.validate_member(member_id, instance_id)
        except GroupError as exc:
            return exc.code
        if generation != g.generation:
            return E["ILLEGAL_GENERATION"]
        if g.state == EMPTY:
            return E["UNKNOWN_MEMBER_ID"]
        member.deadline = self.clock() + member.session_timeout_ms
        if g.state == PREPARING_REBALANCE:
            return E["REBALANCE_IN_PROGRESS"]
        return 0

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """LeaveGroup: ``(error, [error per member])``; member ids may be "" with an instance id."""
        if not group_id:
            return E["INVALID_GROUP_ID"], []
        g = self.groups.get(group_id)
        if g is None:
            return E["UNKNOWN_MEMBER_ID"], []
        if g.state == DEAD:
            return E["COORDINATOR_NOT_AVAILABLE"], []
        errors: list[int] = []
        for member_id, instance_id in members:
            if member_id == "":
                existing = g.static.get(instance_id) if instance_id is not None else None
                if existing is None:
                    errors.append(E["UNKNOWN_MEMBER_ID"])
                    continue
                self._remove_member(g, g.members[existing])
            elif member_id in g.pending:
                g.pending.pop(member_id)
            else:
                try:
                    member = g.validate_member(member_id, instance_id)
                except GroupError as exc:
                    errors.append(exc.code)
                    continue
                self._remove_member(g, member)
            errors.append(0)
            log.info("group %s: member %s left", g.group_id, member_id or instance_id)
        if any(code == 0 for code in errors):
            if g.state in (STABLE, COMPLETING_REBALANCE):
                self._prepare_or_complete(g)
            elif g.state == PREPARING_REBALANCE:
                self._maybe_complete_join(g)
        return 0, errors

    # -- offsets --------------------------------------------------------------------------------

    def validate_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None, api_version: int
    ) -> Group:
        """Kafka's OffsetCommit checks; creates a simple group for generation -1.

        Raises GroupError (INVALID_GROUP_ID, GROUP_ID_NOT_FOUND, ILLEGAL_GENERATION,
        UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE).
        """
        if not group_id:
            raise GroupError("INVALID_GROUP_ID")
        g = self.groups.get(group_id)
        if g is None:
            if generation >= 0:
                raise GroupError("GROUP_ID_NOT_FOUND" if api_version >= 9 else "ILLEGAL_GENERATION")
            if len(self.groups) >= self.config.max_groups:
                raise GroupError("COORDINATOR_NOT_AVAILABLE")
            g = self.groups[group_id] = Group(group_id)
            return g
        if g.state == DEAD:
            raise GroupError("COORDINATOR_NOT_AVAILABLE")
        if generation < 0 and g.state == EMPTY:
            return g
        if generation >= 0 or member_id or instance_id is not None:
            g.validate_member(member_id, instance_id)
            if generation != g.generation:
                raise GroupError("ILLEGAL_GENERATION")
        elif g.state != EMPTY:
            raise GroupError("UNKNOWN_MEMBER_ID")
        if g.state == COMPLETING_REBALANCE:
            raise GroupError("REBALANCE_IN_PROGRESS")
        return g

    def metadata_too_large(self, metadata: str | None) -> bool:
        return metadata is not None and len(metadata) > self.config.offset_metadata_max_bytes

    def commit(self, g: Group, parts: list[OffsetCommitPart]) -> None:
        """Store offsets (one append, flushed before returning); raises StorageError if the write fails."""
        if not parts:
            return
        now_ms = self.wall_clock_ms()
        stored = {
            (p.topic, p.partition): CommittedOffset(
                p.offset, p.leader_epoch, p.metadata, p.commit_ms if p.commit_ms >= 0 else now_ms
            )
            for p in parts
        }
        fresh = sum(1 for key in stored if key not in g.offsets)
        self.store.append(
            (offset_record(g.group_id, t, p, o) for (t, p), o in stored.items()), live_delta=fresh
        )
        g.offsets.update(stored)
        self._maybe_compact()

    def commit_transactional(
        self, group_id: str, offsets: Mapping[tuple[str, int], tuple[int, int, str | None]]
    ) -> None:
        """Store the offsets of a committed transaction (TxnOffsetCommit checked them already).

        Raises StorageError when they cannot be written.
        """
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        parts = [OffsetCommitPart(t, p, o, e, m) for (t, p), (o, e, m) in offsets.items()]
        self.commit(g, parts)

    def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset] | None:
        """The group's committed offsets; None for a group that does not exist."""
        g = self.groups.get(group_id)
        return None if g is None else g.offsets

    def list_groups(self) -> list[Group]:
        return [g for g in self.groups.values() if g.state != DEAD]

    def _forget(self, g: Group) -> None:
        if g.generation or g.protocol_type:  # its metadata was written: write that it is gone
            try:
                self.store.append([group_delete_record(g.group_id)], live_delta=-1)
            except StorageError as exc:
                log.error("group %s: its removal could not be written: %s", g.group_id, exc)
                return
        g.transition(DEAD)
        del self.groups[g.group_id]

    def delete_group(self, group_id: str) -> int:
        if not group_id:
            return E["INVALID_GROUP_ID"]
        g = self.groups.get(group_id)
        if g is None or g.state == DEAD:
            return E["GROUP_ID_NOT_FOUND"]
        if g.state != EMPTY:
            return E["NON_EMPTY_GROUP"]
        try:
            self.store.append([group_delete_record(group_id)], live_delta=-(len(g.offsets) + 1))
        except StorageError as exc:
            log.error("group %s: its deletion could not be written: %s", group_id, exc)
            return E["COORDINATOR_NOT_AVAILABLE"]
        g.transition(DEAD)
        del self.groups[group_id]
        return 0

    def validate_offset_delete(self, group_id: str) -> Group:
        """Raises GroupError(INVALID_GROUP_ID, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP)."""
        if not group_id:
            raise GroupError("INVALID_GROUP_ID")
        g = self.groups.get(group_id)
        if g is None or g.state == DEAD:
            raise GroupError("GROUP_ID_NOT_FOUND")
        if g.state != EMPTY and g.protocol_type != CONSUMER_PROTOCOL:
            raise GroupError("NON_EMPTY_GROUP")
        return g

    def delete_offsets(self, g: Group, parts: list[tuple[str, int]]) -> None:
        """Forget the offsets of ``parts``; raises StorageError if the tombstones cannot be written."""
        present = [key for key in parts if key in g.offsets]
        self.store.append(
            (offset_delete_record(g.group_id, t, p) for t, p in present), live_delta=-len(present)
        )
        for key in present:
            g.offsets.pop(key, None)


ERRORS_BY_CODE: dict[int, str] = {code: name for name, code in E.items()}


class DeadlineTimer:
    """Runs :meth:`GroupCoordinator.poll` on the event loop when the next deadline comes.

    One ``loop.call_later`` handle at a time, moved earlier when the coordinator says a deadline
    moved (``on_deadline``) and re-armed after each poll; at most ``max_sleep_s`` between polls.
    :meth:`stop` cancels it at once (no task is left behind).
    """

    def __init__(self, coordinator: GroupCoordinator, *, max_sleep_s: float = 1.0) -> None:
        self.coordinator = coordinator
        self.max_sleep_s = max_sleep_s
        self._loop = asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = None
        self._at = 0.0
        self._stopped = False
        coordinator.on_deadline = self.arm
        self.arm()

    def arm(self) -> None:
        if self._stopped:
            return
        deadline = self.coordinator.next_deadline()
        delay = self.max_sleep_s
        if deadline is not None:
            delay = min(max((deadline - self.coordinator.clock()) / 1000.0, 0.0), self.max_sleep_s)
        at = self._loop.time() + delay
        if self._handle is not None:
            if self._at <= at:
                return  # already due no later
            self._handle.cancel()
        self._at = at
        self._handle = self._loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._handle = None
        try:
            self.coordinator.poll()
        except Exception:  # a bug must not stop the clock of every group
            log.exception("the group coordinator's timer failed")
        self.arm()

    def stop(self) -> None:
        self._stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
