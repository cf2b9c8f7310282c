"""The group coordinator's state machine driven directly (no sockets), time from a fake clock.

Each rule is Apache Kafka's (GroupMetadataManager / ClassicGroup in the group-coordinator
module); the tests name the rule they check.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from pulsarwire.kafka.broker.group_coordinator import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupConfig,
    GroupCoordinator,
    GroupError,
    OffsetCommitPart,
    parse_subscription,
)
from pulsarwire.kafka.broker.group_store import GroupStore
from pulsarwire.kafka.errors import ERROR_CODES as E


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


RANGE = [("range", subscription("orders"))]


def coordinator(clock: Clock, data_dir: Path | None = None, **config: Any) -> GroupCoordinator:
    cfg = GroupConfig(**{"initial_rebalance_delay_ms": 0, "min_session_timeout_ms": 100, **config})
    return GroupCoordinator(GroupStore(data_dir), cfg, clock=clock)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def join(
    gc: GroupCoordinator,
    member_id: str = "",
    *,
    group: str = "g",
    protocols: list[tuple[str, bytes]] | None = None,
    session: int = 1000,
    rebalance: int = 2000,
    instance: str | None = None,
    v4: bool = True,
) -> Awaitable[dict[str, Any]]:
    return gc.join(
        group,
        member_id,
        instance_id=instance,
        protocol_type="consumer",
        protocols=RANGE if protocols is None else protocols,
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        client_id="cli",
        client_host="/127.0.0.1",
        require_known_member_id=v4,
    )


def sync(
    gc: GroupCoordinator,
    generation: int,
    member: str,
    assignments: list[tuple[str, bytes]] | None = None,
    *,
    instance: str | None = None,
    names: tuple[str | None, str | None] = (None, None),
) -> Awaitable[dict[str, Any]]:
    return gc.sync(
        "g",
        generation,
        member,
        instance_id=instance,
        protocol_type=names[0],
        protocol_name=names[1],
        assignments=assignments or [],
    )


async def new_member(gc: GroupCoordinator, clock: Clock, **kw: Any) -> asyncio.Task[dict[str, Any]]:
    """KIP-394: the first JoinGroup gets MEMBER_ID_REQUIRED and an id; the second joins."""
    first = await join(gc, **kw)
    assert first["error_code"] == E["MEMBER_ID_REQUIRED"] and first["member_id"].startswith("cli-")
    task = asyncio.ensure_future(join(gc, first["member_id"], **kw))
    await settle()
    return task


def test_one_member_joins_syncs_and_heartbeats() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        task = await new_member(gc, clock)
        gc.poll()  # the initial rebalance delay (0 here) is a timer, as in Kafka
        answer = await task
        assert answer["error_code"] == 0 and answer["generation_id"] == 1
        assert answer["leader"] == answer["member_id"] and answer["protocol_name"] == "range"
        assert [m["member_id"] for m in answer["members"]] == [answer["member_id"]]
        assert answer["members"][0]["metadata"] == RANGE[0][1]
        me = answer["member_id"]
        assert gc.groups["g"].state == COMPLETING_REBALANCE
        assert gc.heartbeat("g", 1, me, None) == 0  # heartbeats are fine while completing
        answer = await gc.sync(
            "g",
            1,
            me,
            instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[(me, b"plan")],
        )
        assert answer == {
            "error_code": 0,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignment": b"plan",
        }
        assert gc.groups["g"].state == STABLE
        assert gc.heartbeat("g", 1, me, None) == 0
        assert gc.heartbeat("g", 0, me, None) == E["ILLEGAL_GENERATION"]
        assert gc.heartbeat("g", 1, "nobody", None) == E["UNKNOWN_MEMBER_ID"]
        assert gc.heartbeat("nope", 1, me, None) == E["UNKNOWN_MEMBER_ID"]
        assert gc.heartbeat("", 1, me, None) == E["INVALID_GROUP_ID"]

    run(main)


def test_join_validation_errors() -> None:
    async def main() -> None:
        gc = coordinator(Clock())
        assert (await join(gc, group=""))["error_code"] == E["INVALID_GROUP_ID"]
        assert (await join(gc, session=50))["error_code"] == E["INVALID_SESSION_TIMEOUT"]
        assert (await join(gc, "someone"))["error_code"] == E["UNKNOWN_MEMBER_ID"]
        assert (await join(gc, protocols=[]))["error_code"] == E["INCONSISTENT_GROUP_PROTOCOL"]

    run(main)


async def stable_group(
    gc: GroupCoordinator, clock: Clock, n: int, protocols: list[list[tuple[str, bytes]]] | None = None
) -> list[str]:
    tasks = []
    for i in range(n):
        tasks.append(await new_member(gc, clock, protocols=None if protocols is None else protocols[i]))
    gc.poll()
    gc.poll()  # members joined during the initial delay extend it by one more (zero) step
    answers = await asyncio.gather(*tasks)
    leader = answers[0]["leader"]
    ids = [a["member_id"] for a in answers]
    generation = answers[0]["generation_id"]
    followers = [asyncio.ensure_future(sync(gc, generation, m)) for m in ids if m != leader]
    await settle()
    await sync(gc, generation, leader, [(m, m.encode()) for m in ids])
    for f in followers:
        assert (await f)["error_code"] == 0
    assert gc.groups["g"].state == STABLE
    return ids


def test_protocol_selection_by_votes_among_common_protocols() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        rr, rng, sticky = ("roundrobin", b"r"), ("range", b"a"), ("sticky", b"s")
        await stable_group(gc, clock, 3, [[sticky, rr, rng], [rr, rng], [rng, rr]])
        # candidates: roundrobin, range (sticky is not shared); votes: rr, rr, range -> roundrobin
        assert gc.groups["g"].protocol_name == "roundrobin"
        # a member sharing no protocol with the group is refused
        bad = await join(gc, protocols=[sticky])
        assert bad["error_code"] == E["INCONSISTENT_GROUP_PROTOCOL"]

    run(main)


def test_followers_wait_for_the_leaders_assignment() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        a, b = await new_member(gc, clock), await new_member(gc, clock)
        gc.poll()
        gc.poll()
        ja, jb = await a, await b
        assert ja["leader"] == jb["leader"] == ja["member_id"]
        assert len(ja["members"]) == 2 and jb["members"] == []
        follower = asyncio.ensure_future(sync(gc, 1, jb["member_id"]))
        await settle()
        assert not follower.done()
        await sync(gc, 1, ja["member_id"], [(jb["member_id"], b"for-b")])
        assert (await follower)["assignment"] == b"for-b"
        assert gc.groups["g"].members[ja["member_id"]].assignment == b""  # missing: empty, as Kafka

    run(main)


def test_a_joining_member_triggers_a_rebalance_and_heartbeats_say_so() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        [first] = await stable_group(gc, clock, 1)
        newcomer = await new_member(gc, clock)
        assert gc.groups["g"].state == PREPARING_REBALANCE
        assert gc.heartbeat("g", 1, first, None) == E["REBALANCE_IN_PROGRESS"]
        answer = await gc.sync(
            "g", 1, first, instance_id=None, protocol_type=None, protocol_name=None, assignments=[]
        )
        assert answer["error_code"] == E["REBALANCE_IN_PROGRESS"]
        rejoin = asyncio.ensure_future(join(gc, first))
        await settle()
        a, b = await rejoin, await newcomer  # all members joined: the join completes at once
        assert a["generation_id"] == b["generation_id"] == 2 and a["leader"] == first

    run(main)


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        first, second = await stable_group(gc, clock, 2)
        rejoin = asyncio.ensure_future(join(gc, first, rebalance=2000))  # leader rejoins: rebalance
        await settle()
        assert gc.groups["g"].state == PREPARING_REBALANCE and not rejoin.done()
        gc.heartbeat("g", 1, second, None)
        clock.now += 2001
        gc.heartbeat("g", 1, second, None)
        gc.poll()
        answer = await rejoin
        assert answer["generation_id"] == 2 and [m["member_id"] for m in answer["members"]] == [first]
        assert gc.heartbeat("g", 2, second, None) == E["UNKNOWN_MEMBER_ID"]

    run(main)


def test_session_expiry_removes_a_silent_member_and_empties_the_group() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        [me] = await stable_group(gc, clock, 1)
        clock.now += 999
        gc.poll()
        assert gc.heartbeat("g", 1, me, None) == 0
        clock.now += 1001
        assert gc.next_deadline() is not None and gc.next_deadline() <= clock.now  # type: ignore[operator]
        gc.poll()
        g = gc.groups["g"]
        assert g.members == {} and g.state == EMPTY and g.generation == 2

    run(main)


def test_kip394_member_id_expires_when_the_member_never_comes_back() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        first = await join(gc)
        assert first["error_code"] == E["MEMBER_ID_REQUIRED"]
        assert first["member_id"] in gc.groups["g"].pending
        clock.now += 1001
        gc.poll()
        assert gc.groups["g"].pending == {}
        late = await join(gc, first["member_id"])
        assert late["error_code"] == E["UNKNOWN_MEMBER_ID"]

    run(main)


def test_join_v3_gets_its_member_id_in_the_answer() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        task = asyncio.ensure_future(join(gc, v4=False))
        await settle()
        gc.poll()
        answer = await task
        assert answer["error_code"] == 0 and answer["member_id"].startswith("cli-")

    run(main)


def test_leave_group_batch_and_errors() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        first, second = await stable_group(gc, clock, 2)
        error, per_member = gc.leave("g", [(second, None), ("ghost", None), ("", "no-such-instance")])
        assert error == 0 and per_member == [0, E["UNKNOWN_MEMBER_ID"], E["UNKNOWN_MEMBER_ID"]]
        assert gc.groups["g"].state == PREPARING_REBALANCE
        assert gc.leave("nope", [(first, None)]) == (E["UNKNOWN_MEMBER_ID"], [])
        assert gc.leave("g", [(first, None)]) == (0, [0])
        assert gc.groups["g"].state == EMPTY  # the last member left: the join completed empty

    run(main)


def test_static_member_rejoining_keeps_its_assignment_and_fences_the_old_id() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        task = asyncio.ensure_future(join(gc, instance="host-1"))  # static members skip KIP-394
        await settle()
        gc.poll()
        old = (await task)["member_id"]
        assert old.startswith("host-1-")
        await sync(gc, 1, old, [(old, b"mine")], instance="host-1")
        again = await join(gc, instance="host-1")  # a restarted instance: no rebalance
        new = again["member_id"]
        assert again["error_code"] == 0 and again["generation_id"] == 1 and new != old
        assert gc.groups["g"].state == STABLE
        assert gc.heartbeat("g", 1, old, "host-1") == E["FENCED_INSTANCE_ID"]
        answer = await gc.sync(
            "g", 1, new, instance_id="host-1", protocol_type=None, protocol_name=None, assignments=[]
        )
        assert answer["assignment"] == b"mine"
        assert gc.leave("g", [("", "host-1")]) == (0, [0])

    run(main)


def test_offset_commit_rules() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        # simple consumer (assign()): generation -1 creates an empty group
        g = gc.validate_commit("simple", -1, "", None, 8)
        gc.commit(g, [OffsetCommitPart("orders", 0, 42, metadata="m")])
        assert gc.committed("simple")[("orders", 0)].offset == 42  # type: ignore[index]
        with pytest.raises(GroupError) as err:
            gc.validate_commit("absent", 3, "x", None, 8)
        assert err.value.code == E["ILLEGAL_GENERATION"]
        with pytest.raises(GroupError) as err:
            gc.validate_commit("absent", 3, "x", None, 9)
        assert err.value.code == E["GROUP_ID_NOT_FOUND"]
        [me] = await stable_group(gc, clock, 1)
        for args, name in [
            ((-1, "", None), "UNKNOWN_MEMBER_ID"),  # v0-style commit into a live group
            ((1, "other", None), "UNKNOWN_MEMBER_ID"),
            ((7, me, None), "ILLEGAL_GENERATION"),
        ]:
            with pytest.raises(GroupError) as err:
                gc.validate_commit("g", *args, 8)  # type: ignore[arg-type]
            assert err.value.code == E[name], args
        assert gc.validate_commit("g", 1, me, None, 8) is gc.groups["g"]
        assert gc.metadata_too_large("x" * 4097) and not gc.metadata_too_large(None)

    run(main)


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        task = await new_member(gc, clock)
        gc.poll()
        me = (await task)["member_id"]
        with pytest.raises(GroupError) as err:
            gc.validate_commit("g", 1, me, None, 8)
        assert err.value.code == E["REBALANCE_IN_PROGRESS"]

    run(main)


def test_offsets_and_stable_groups_survive_a_restart(tmp_path: Path) -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock, tmp_path)
        [me] = await stable_group(gc, clock, 1)
        gc.commit(
            gc.groups["g"], [OffsetCommitPart("orders", 0, 7), OffsetCommitPart("orders", 1, 9, 3, None)]
        )
        gc.commit(gc.groups["g"], [OffsetCommitPart("orders", 0, 8)])
        gc.close()
        again = coordinator(clock, tmp_path)
        g = again.groups["g"]
        assert g.state == STABLE and g.generation == 1 and list(g.members) == [me]
        assert g.members[me].assignment == me.encode()
        assert {k: (o.offset, o.leader_epoch, o.metadata) for k, o in g.offsets.items()} == {
            ("orders", 0): (8, -1, ""),
            ("orders", 1): (9, 3, None),
        }
        assert again.heartbeat("g", 1, me, None) == 0  # the member carries on after the restart
        clock.now += 5000
        again.poll()  # ... or expires like any silent member
        assert again.groups["g"].state == EMPTY
        again.close()

    run(main)


def test_a_torn_tail_is_cut_and_the_rest_loads(tmp_path: Path) -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock, tmp_path)
        g = gc.validate_commit("s", -1, "", None, 8)
        gc.commit(g, [OffsetCommitPart("t", 0, 1)])
        gc.commit(g, [OffsetCommitPart("t", 0, 2)])
        gc.close()
        log = tmp_path / "__groups" / "groups.log"
        data = log.read_bytes()
        log.write_bytes(data[:-3])  # the second commit was cut by a crash (never acknowledged)
        again = coordinator(clock, tmp_path)
        assert again.committed("s")[("t", 0)].offset == 1  # type: ignore[index]
        g = again.groups["s"]
        again.commit(g, [OffsetCommitPart("t", 0, 3)])
        again.close()
        assert coordinator(clock, tmp_path).committed("s")[("t", 0)].offset == 3  # type: ignore[index]

    run(main)


def test_the_log_is_compacted_when_mostly_dead(tmp_path: Path) -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock, tmp_path)
        g = gc.validate_commit("s", -1, "", None, 8)
        for i in range(2500):
            gc.commit(g, [OffsetCommitPart("t", 0, i)])
        gc.close()
        log = tmp_path / "__groups" / "groups.log"
        assert log.stat().st_size < 200 * 1000  # rewritten along the way, not 2500 records
        assert coordinator(clock, tmp_path).committed("s")[("t", 0)].offset == 2499  # type: ignore[index]

    run(main)


def test_delete_group_and_offset_delete_rules() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock)
        [me] = await stable_group(gc, clock, 1)
        gc.commit(gc.groups["g"], [OffsetCommitPart("orders", 0, 1), OffsetCommitPart("other", 0, 1)])
        assert gc.delete_group("g") == E["NON_EMPTY_GROUP"]
        assert gc.delete_group("nope") == E["GROUP_ID_NOT_FOUND"]
        g = gc.validate_offset_delete("g")  # consumer protocol: allowed while members are there
        assert g.is_subscribed_to("orders") and not g.is_subscribed_to("other")
        gc.delete_offsets(g, [("other", 0)])
        assert set(g.offsets) == {("orders", 0)}
        gc.leave("g", [(me, None)])
        assert gc.delete_group("g") == 0 and "g" not in gc.groups

    run(main)


def test_subscription_parsing_is_bounded() -> None:
    assert parse_subscription(subscription("a", "bb")) == ["a", "bb"]
    assert parse_subscription(struct.pack(">hi", 0, 2_000_000_000)) is None  # count past the bytes
    assert parse_subscription(struct.pack(">hih", 0, 1, 30000) + b"x") is None
    assert parse_subscription(b"\x00") is None


def test_group_max_size() -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock, max_size=1)
        await stable_group(gc, clock, 1)
        refused = await join(gc)  # checked before a member id is handed out, as Kafka
        assert refused["error_code"] == E["GROUP_MAX_SIZE_REACHED"] and refused["member_id"] == ""

    run(main)


def test_unused_member_ids_and_empty_groups_are_bounded(tmp_path: Path) -> None:
    async def main() -> None:
        clock = Clock()
        gc = coordinator(clock, tmp_path, max_size=3)
        answers = [await join(gc) for _ in range(4)]  # ids handed out, never used
        assert [a["error_code"] for a in answers] == [E["MEMBER_ID_REQUIRED"]] * 3 + [
            E["GROUP_MAX_SIZE_REACHED"]
        ]
        for i in range(50):  # garbage groups: refused joins leave nothing behind
            await join(gc, group=f"junk-{i}", protocols=[])
        clock.now += 1001  # the unused ids expire
        gc.poll()
        assert gc.groups["g"].pending == {}
        [me] = await stable_group(gc, clock, 1)
        gc.leave("g", [(me, None)])
        gc.poll()
        assert gc.groups == {}  # empty, no offsets: forgotten, as Kafka's clean-up does
        gc.close()
        assert coordinator(clock, tmp_path).groups == {}  # and not brought back by a restart

    run(main)
