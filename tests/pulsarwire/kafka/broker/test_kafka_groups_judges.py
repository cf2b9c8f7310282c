"""Consumer groups judged by confluent-kafka, kafka-python and aiokafka, each member a process of
its own, against ``python -m pulsarwire.kafka.broker`` as a subprocess.

A group of the three clients shares the range and roundrobin assignors: members join one by one
and the partitions are split among them each time (the broker picked the protocol by the
members' votes, as DescribeGroups shows), one leaves and the rest take its partitions, offsets
committed along the way are read back by every client after the broker was killed (SIGKILL)
and restarted on the same data dir, and a new member resumes exactly where the group stopped.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from pulsarwire.testing.process import kafka_broker_subprocess
from tests.helpers.kafka_group_judge import Member, run, split_evenly, wait_until

PARTITIONS = 6
PER_PARTITION = 5
#: members' session timeouts are 6 s; the broker's floor and initial delay are lowered for them
BROKER_FLAGS = ("--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0")


def broker_args(data_dir: Path) -> tuple[str, ...]:
    return ("--port", "0", "--data-dir", str(data_dir), *BROKER_FLAGS)


def test_a_mixed_group_rebalances_commits_and_resumes_after_kill_9(tmp_path: Path) -> None:
    topic, group = "orders", "mixed"
    members: list[Member] = []
    try:
        with kafka_broker_subprocess(*broker_args(tmp_path)) as (bootstrap, proc):
            run(
                "confluent",
                "produce",
                bootstrap,
                topic=topic,
                partitions=PARTITIONS,
                count=PER_PARTITION,
                create=True,
            )
            # preferences: confluent and aiokafka put roundrobin first, kafka-python range
            a = Member("confluent", bootstrap, topic=topic, group=group, assignors=["roundrobin", "range"])
            members.append(a)
            wait_until([a], lambda: a.assigned == list(range(PARTITIONS)) and len(a.records) >= 30, "A alone")
            b = Member("kafkapython", bootstrap, topic=topic, group=group, assignors=["range", "roundrobin"])
            members.append(b)
            wait_until(members, lambda: split_evenly(members, PARTITIONS), "A and B split the partitions")
            c = Member("aiokafka", bootstrap, topic=topic, group=group, assignors=["roundrobin", "range"])
            members.append(c)
            wait_until(members, lambda: split_evenly(members, PARTITIONS), "A, B and C split the partitions")
            described = run("confluent", "describe", bootstrap, group=group)
            assert described["state"] == "STABLE" and described["members"] == 3
            assert described["protocol"] == "roundrobin"  # two votes to one
            assert described["assignments"] == list(range(PARTITIONS))

            b.leave()
            rest = [a, c]
            wait_until(rest, lambda: split_evenly(rest, PARTITIONS), "A and C take B's partitions")
            run("confluent", "produce", bootstrap, topic=topic, partitions=PARTITIONS, count=1)
            seen = lambda: {(r[0], r[1]) for m in members for r in m.records}  # noqa: E731
            wait_until(
                rest, lambda: {(p, PER_PARTITION) for p in range(PARTITIONS)} <= seen(), "the new records"
            )
            os.kill(proc.pid, signal.SIGKILL)  # the commits were acknowledged: nothing may be lost
            proc.wait()
            for m in rest:
                m.kill()
        # every record was consumed, none by two members of one generation's split
        assert {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION + 1)} <= seen()

        with kafka_broker_subprocess(*broker_args(tmp_path)) as (bootstrap, _proc):
            expected = {str(p): PER_PARTITION + 1 for p in range(PARTITIONS)}
            for client in ("confluent", "kafkapython", "aiokafka"):
                answer = run(client, "committed", bootstrap, topic=topic, group=group, partitions=PARTITIONS)
                assert answer["committed"] == expected, client
            d = Member("kafkapython", bootstrap, topic=topic, group=group, assignors=["range"])
            members.append(d)
            run("confluent", "produce", bootstrap, topic=topic, partitions=PARTITIONS, count=1)
            wait_until([d], lambda: len(d.records) >= PARTITIONS, "D reads the newest records")
            # resumed at the committed offsets: nothing before them again
            assert sorted((r[0], r[1]) for r in d.records) == [
                (p, PER_PARTITION + 1) for p in range(PARTITIONS)
            ]
            d.leave()
    finally:
        for m in members:
            m.kill()


@pytest.mark.parametrize("client", ["confluent", "kafkapython", "aiokafka"])
def test_two_members_of_one_client_split_and_rejoin(tmp_path: Path, client: str) -> None:
    topic, group = "t", f"two-{client}"
    members: list[Member] = []
    try:
        with kafka_broker_subprocess(*broker_args(tmp_path)) as (bootstrap, _proc):
            run("confluent", "produce", bootstrap, topic=topic, partitions=4, count=2, create=True)
            a = Member(client, bootstrap, topic=topic, group=group, assignors=["range"])
            members.append(a)
            wait_until([a], lambda: a.assigned == [0, 1, 2, 3], "one member has all")
            b = Member(client, bootstrap, topic=topic, group=group, assignors=["range"])
            members.append(b)
            wait_until(members, lambda: split_evenly(members, 4), "two members split")
            assert sorted(map(len, (a.assigned, b.assigned))) == [2, 2]  # range over 4 partitions
            a.leave()
            wait_until([b], lambda: b.assigned == [0, 1, 2, 3], "the other takes all")
            every = {(p, o) for p in range(4) for o in range(2)}

            def consumed() -> set[tuple[int, int]]:
                return {(r[0], r[1]) for m in members for r in m.records}

            # a partition b held only briefly may still be unread: it is b's now, b reads it
            wait_until([b], lambda: consumed() == every, "every record consumed once the other has all")
            b.leave()
            assert consumed() == every
    finally:
        for m in members:
            m.kill()


def test_a_static_member_comes_back_without_a_rebalance(tmp_path: Path) -> None:
    """confluent-kafka with group.instance.id: killed and restarted within its session timeout,
    it gets its partitions back and the group does not rebalance (the broker logs every
    rebalance it starts; none does after the first generation)."""
    topic, group = "static", "statics"
    members: list[Member] = []
    log = tmp_path / "broker.log"
    try:
        with log.open("w") as err, kafka_broker_subprocess(*broker_args(tmp_path), "--log-level", "info",
                                                         stderr=err) as (bootstrap, _proc):  # fmt: skip
            run("confluent", "produce", bootstrap, topic=topic, partitions=4, count=1, create=True)
            a = Member("confluent", bootstrap, topic=topic, group=group, assignors=["range"], instance="a")
            b = Member("confluent", bootstrap, topic=topic, group=group, assignors=["range"], instance="b")
            members += [a, b]
            wait_until(members, lambda: split_evenly(members, 4), "two static members split")
            wait_until(members, lambda: "group statics: generation" in log.read_text() and
                       log.read_text().count("is stable") >= 1, "a stable generation")  # fmt: skip
            before = list(a.assigned), list(b.assigned)
            rebalances = log.read_text().count("group statics: preparing to rebalance")
            a.kill()  # no LeaveGroup: a static member's session outlives it
            again = Member(
                "confluent", bootstrap, topic=topic, group=group, assignors=["range"], instance="a"
            )
            members.append(again)
            wait_until(
                [again, b], lambda: again.assigned == before[0], "the instance gets its partitions back"
            )
            assert b.assigned == before[1]
            described = run("confluent", "describe", bootstrap, group=group)
            assert (described["state"], described["members"]) == ("STABLE", 2)
            assert log.read_text().count("group statics: preparing to rebalance") == rebalances
            again.leave()
            b.leave()
    finally:
        for m in members:
            m.kill()


def test_the_admin_clients_manage_groups_and_their_offsets(tmp_path: Path) -> None:
    with kafka_broker_subprocess(*broker_args(tmp_path)) as (bootstrap, _proc):
        run("confluent", "produce", bootstrap, topic="adm", partitions=2, count=1, create=True)
        got = run("confluent", "groupadmin", bootstrap, topic="adm", group="by-confluent")
        assert got == {
            "altered": [True, True],
            "offsets": {"0": 3, "1": 4},
            "groups": [["by-confluent", "EMPTY"]],
            "deleted_again": "GROUP_ID_NOT_FOUND",
        }
        got = run("kafkapython", "groupadmin", bootstrap, topic="adm", group="by-kafkapython")
        assert got == {
            "altered": ["NoError", "NoError"],
            "removed": ["NoError"],
            "offsets": {"0": 5},
            "state": "Empty",
            "deleted": {"by-kafkapython": "OK"},
            "after": [],
        }
