"""The group APIs of the Kafka broker: request bodies in, response bodies out, per API version.

A plugin of ``server.py`` (see its docstring): :func:`handlers` serves FindCoordinator,
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
DescribeGroups, DeleteGroups and OffsetDelete at every version the codec defines;
:func:`attach` creates the broker's :class:`~pulsarwire.kafka.broker.group_coordinator.GroupCoordinator`
(its log under the data dir), starts its timer and hands it the offsets of committed
transactions; :func:`add_arguments` adds the ``--group-*`` flags.

The state machine is ``group_coordinator.py``; this module maps each version's fields onto it,
asks the broker's authorizer (``ctx.broker.authorize(ctx, operation, resource_type, name)``) what
Kafka's ``KafkaApis`` asks -- READ on the group for the membership APIs and OffsetCommit,
DESCRIBE on the group for FindCoordinator, OffsetFetch and DescribeGroups, DELETE for
DeleteGroups/OffsetDelete, READ (commit, delete) or DESCRIBE (fetch) on each topic, and
DESCRIBE on the cluster (else on each group) for ListGroups -- and answers a refusal with
GROUP_AUTHORIZATION_FAILED or TOPIC_AUTHORIZATION_FAILED where Kafka puts them.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pulsarwire.errors import StorageError
from pulsarwire.kafka.broker.group_coordinator import (
    DeadlineTimer,
    Group,
    GroupConfig,
    GroupCoordinator,
    GroupError,
    OffsetCommitPart,
)
from pulsarwire.kafka.broker.group_store import CommittedOffset, GroupStore
from pulsarwire.kafka.codec import API_KEYS
from pulsarwire.kafka.errors import ERROR_CODES as E

if TYPE_CHECKING:
    from pulsarwire.kafka.broker.context import RequestContext
    from pulsarwire.kafka.broker.server import Handler
    from pulsarwire.kafka.broker.state import BrokerState

log = logging.getLogger(__name__)

Body = dict[str, Any]
EXTENSION = "groups"

#: Kafka's AclOperation codes, for DescribeGroups' authorized_operations bit field
ACL_OPERATION_CODES = {"READ": 3, "DELETE": 6, "DESCRIBE": 8}


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    coordinator: GroupCoordinator = ctx.broker.extensions[EXTENSION]
    return coordinator


def _allowed(ctx: RequestContext, operation: str, resource_type: str, name: str) -> bool:
    return bool(ctx.broker.authorize(ctx, operation, resource_type, name))


def _client_host(ctx: RequestContext) -> str:
    peer = getattr(ctx.session, "peer", "")
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return f"/{host}"


# -- FindCoordinator ---------------------------------------------------------------------------


async def find_coordinator(ctx: RequestContext, body: Body) -> Body:
    """Every group and transactional id is coordinated by this (only) node."""
    version = ctx.api_version
    key_type = body.get("key_type", 0)
    keys = list(body["coordinator_keys"]) if version >= 4 else [body["key"]]
    broker = ctx.broker
    answers = []
    for key in keys:
        error = 0
        if key_type == 0:
            if not _allowed(ctx, "DESCRIBE", "GROUP", key):
                error = E["GROUP_AUTHORIZATION_FAILED"]
        elif key_type == 1:
            if not _allowed(ctx, "DESCRIBE", "TRANSACTIONAL_ID", key):
                error = E["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"]
        else:
            error = E["INVALID_REQUEST"]
        ok = error == 0
        answers.append(
            {
                "key": key,
                "node_id": broker.node_id if ok else -1,
                "host": broker.host if ok else "",
                "port": broker.port if ok else -1,
                "error_code": error,
                "error_message": None,
            }
        )
    if version >= 4:
        return {"throttle_time_ms": 0, "coordinators": answers}
    one = answers[0]
    return {
        "throttle_time_ms": 0,
        "error_code": one["error_code"],
        "error_message": None,
        "node_id": one["node_id"],
        "host": one["host"],
        "port": one["port"],
    }


# -- membership ---------------------------------------------------------------------------------


def _join_for_version(answer: Body, version: int) -> Body:
    if version < 7:  # protocol_name became nullable in v7
        answer["protocol_name"] = answer["protocol_name"] or ""
    return answer


async def join_group(ctx: RequestContext, body: Body) -> Body:
    version = ctx.api_version
    if not _allowed(ctx, "READ", "GROUP", body["group_id"]):
        return _join_for_version(
            {
                "error_code": E["GROUP_AUTHORIZATION_FAILED"],
                "generation_id": -1,
                "protocol_type": None,
                "protocol_name": None,
                "leader": "",
                "skip_assignment": False,
                "member_id": body["member_id"],
                "members": [],
            },
            version,
        )
    session_ms = body["session_timeout_ms"]
    answer = await _coordinator(ctx).join(
        body["group_id"],
        body["member_id"],
        instance_id=body.get("group_instance_id"),
        protocol_type=body["protocol_type"],
        protocols=[(p["name"], p["metadata"]) for p in body["protocols"]],
        session_timeout_ms=session_ms,
        # v0 has no rebalance timeout: Kafka uses the session timeout
        rebalance_timeout_ms=body["rebalance_timeout_ms"] if version >= 1 else session_ms,
        client_id=ctx.client_id or "",
        client_host=_client_host(ctx),
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )
    answer["throttle_time_ms"] = 0
    return _join_for_version(answer, version)


async def sync_group(ctx: RequestContext, body: Body) -> Body:
    if not _allowed(ctx, "READ", "GROUP", body["group_id"]):
        answer: Body = {"error_code": E["GROUP_AUTHORIZATION_FAILED"], "assignment": b""}
    else:
        answer = await _coordinator(ctx).sync(
            body["group_id"],
            body["generation_id"],
            body["member_id"],
            instance_id=body.get("group_instance_id"),
            protocol_type=body.get("protocol_type"),
            protocol_name=body.get("protocol_name"),
            assignments=[(a["member_id"], a["assignment"]) for a in body["assignments"]],
        )
    answer["throttle_time_ms"] = 0
    return answer


async def heartbeat(ctx: RequestContext, body: Body) -> Body:
    if not _allowed(ctx, "READ", "GROUP", body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": E["GROUP_AUTHORIZATION_FAILED"]}
    code = _coordinator(ctx).heartbeat(
        body["group_id"], body["generation_id"], body["member_id"], body.get("group_instance_id")
    )
    return {"throttle_time_ms": 0, "error_code": code}


async def leave_group(ctx: RequestContext, body: Body) -> Body:
    version = ctx.api_version
    if version >= 3:
        members = [(m["member_id"], m.get("group_instance_id")) for m in body["members"]]
    else:
        members = [(body["member_id"], None)]
    if not _allowed(ctx, "READ", "GROUP", body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": E["GROUP_AUTHORIZATION_FAILED"], "members": []}
    error, per_member = _coordinator(ctx).leave(body["group_id"], members)
    if version < 3:
        # one member: its error is the request's (Kafka's LeaveGroupResponse for v0-2)
        return {"throttle_time_ms": 0, "error_code": error or (per_member[0] if per_member else 0)}
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "error_code": code}
            for (member_id, instance_id), code in zip(members, per_member, strict=False)
        ],
    }


# -- offsets ------------------------------------------------------------------------------------


def _commit_answer(topics: Iterable[Body], error_of: Mapping[tuple[str, int], int], default: int) -> Body:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": error_of.get((t["name"], p["partition_index"]), default),
                    }
                    for p in t["partitions"]
                ],
            }
            for t in topics
        ],
    }


async def offset_commit(ctx: RequestContext, body: Body) -> Body:
    version = ctx.api_version
    group_id = body["group_id"]
    topics = body["topics"]
    if not _allowed(ctx, "READ", "GROUP", group_id):
        return _commit_answer(topics, {}, E["GROUP_AUTHORIZATION_FAILED"])
    gc = _coordinator(ctx)
    errors: dict[tuple[str, int], int] = {}
    parts: list[OffsetCommitPart] = []
    for t in topics:
        name = t["name"]
        topic_allowed = _allowed(ctx, "READ", "TOPIC", name)
        for p in t["partitions"]:
            key = (name, p["partition_index"])
            if not topic_allowed:
                errors[key] = E["TOPIC_AUTHORIZATION_FAILED"]
            elif not ctx.broker.partition_exists(*key):
                errors[key] = E["UNKNOWN_TOPIC_OR_PARTITION"]
            elif gc.metadata_too_large(p["committed_metadata"]):
                errors[key] = E["OFFSET_METADATA_TOO_LARGE"]
            else:
                parts.append(
                    OffsetCommitPart(
                        name,
                        key[1],
                        p["committed_offset"],
                        p.get("committed_leader_epoch", -1),
                        p["committed_metadata"],
                        p.get("commit_timestamp", -1) if version == 1 else -1,
                    )
                )
    if parts:
        try:
            group = gc.validate_commit(
                group_id,
                body.get("generation_id_or_member_epoch", -1),
                body.get("member_id", ""),
                body.get("group_instance_id"),
                version,
            )
        except GroupError as exc:
            return _commit_answer(topics, errors, exc.code)
        try:
            gc.commit(group, parts)
        except StorageError as exc:
            log.error("group %s: offsets not stored: %s", group_id, exc)
            return _commit_answer(topics, errors, E["COORDINATOR_NOT_AVAILABLE"])
    return _commit_answer(topics, errors, 0)


def _pending_transactional(ctx: RequestContext, group_id: str) -> set[tuple[str, int]]:
    """Partitions with offsets of the group waiting in an open transaction (TxnOffsetCommit)."""
    coordinator = ctx.broker.extensions.get("transactions")
    pending: set[tuple[str, int]] = set()
    for txn in getattr(coordinator, "transactions", {}).values():
        if txn.state == "Ongoing":
            pending.update(txn.offsets.get(group_id, {}))
    return pending


def _fetch_group(
    ctx: RequestContext, group_id: str, topics: list[Body] | None, *, require_stable: bool = False
) -> tuple[int, list[Body]]:
    """(group error, topic answers) of one group of an OffsetFetch.

    With ``require_stable`` (a ``read_committed`` consumer), a partition whose offset waits in an
    open transaction is UNSTABLE_OFFSET_COMMIT, which the client retries, as Kafka answers.
    """
    if not _allowed(ctx, "DESCRIBE", "GROUP", group_id):
        return E["GROUP_AUTHORIZATION_FAILED"], []
    committed = _coordinator(ctx).committed(group_id) or {}
    unstable = _pending_transactional(ctx, group_id) if require_stable else set()
    out: list[Body] = []

    def entry(index: int, o: CommittedOffset | None, error: int = 0) -> Body:
        return {
            "partition_index": index,
            "committed_offset": -1 if o is None else o.offset,
            "committed_leader_epoch": -1 if o is None else o.leader_epoch,
            "metadata": "" if o is None else o.metadata,
            "error_code": error,
        }

    if topics is None:
        by_topic: dict[str, list[Body]] = {}
        for (name, index), o in sorted(committed.items()):
            if _allowed(ctx, "DESCRIBE", "TOPIC", name):
                by_topic.setdefault(name, []).append(entry(index, o))
        out = [{"name": name, "partitions": parts} for name, parts in by_topic.items()]
    else:
        for t in topics:
            name = t["name"]
            if not _allowed(ctx, "DESCRIBE", "TOPIC", name):
                denied = E["TOPIC_AUTHORIZATION_FAILED"]
                parts = [entry(i, None, denied) for i in t["partition_indexes"]]
            else:
                parts = [
                    entry(i, None, E["UNSTABLE_OFFSET_COMMIT"])
                    if (name, i) in unstable
                    else entry(i, committed.get((name, i)))
                    for i in t["partition_indexes"]
                ]
            out.append({"name": name, "partitions": parts})
    return 0, out


async def offset_fetch(ctx: RequestContext, body: Body) -> Body:
    version = ctx.api_version
    if version >= 8:
        groups = []
        for g in body["groups"]:
            error, topics = _fetch_group(
                ctx, g["group_id"], g["topics"], require_stable=body["require_stable"]
            )
            groups.append({"group_id": g["group_id"], "topics": topics, "error_code": error})
        return {"throttle_time_ms": 0, "groups": groups}
    error, topics = _fetch_group(ctx, body["group_id"], body["topics"], require_stable=body["require_stable"])
    if error and version < 2:
        # no top-level error before v2: each requested partition carries it
        topics = [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": i, "committed_offset": -1, "metadata": "", "error_code": error}
                    for i in t["partition_indexes"]
                ],
            }
            for t in body["topics"] or []
        ]
    return {"throttle_time_ms": 0, "topics": topics, "error_code": error}


async def offset_delete(ctx: RequestContext, body: Body) -> Body:
    group_id = body["group_id"]
    if not _allowed(ctx, "DELETE", "GROUP", group_id):
        return {"error_code": E["GROUP_AUTHORIZATION_FAILED"], "throttle_time_ms": 0, "topics": []}
    gc = _coordinator(ctx)
    try:
        group = gc.validate_offset_delete(group_id)
    except GroupError as exc:
        return {"error_code": exc.code, "throttle_time_ms": 0, "topics": []}
    answers = []
    doomed: list[tuple[str, int]] = []
    for t in body["topics"]:
        name = t["name"]
        if not _allowed(ctx, "READ", "TOPIC", name):
            code = E["TOPIC_AUTHORIZATION_FAILED"]
        elif group.is_subscribed_to(name):
            code = E["GROUP_SUBSCRIBED_TO_TOPIC"]
        else:
            code = 0
        parts = []
        for p in t["partitions"]:
            index = p["partition_index"]
            this = code
            if this == 0 and not ctx.broker.partition_exists(name, index):
                this = E["UNKNOWN_TOPIC_OR_PARTITION"]
            if this == 0:
                doomed.append((name, index))
            parts.append({"partition_index": index, "error_code": this})
        answers.append({"name": name, "partitions": parts})
    try:
        gc.delete_offsets(group, doomed)
    except StorageError as exc:
        log.error("group %s: offsets not deleted: %s", group_id, exc)
        return {"error_code": E["COORDINATOR_NOT_AVAILABLE"], "throttle_time_ms": 0, "topics": []}
    return {"error_code": 0, "throttle_time_ms": 0, "topics": answers}


# -- listing, describing, deleting ---------------------------------------------------------------


async def list_groups(ctx: RequestContext, body: Body) -> Body:
    states = {s.lower() for s in body.get("states_filter") or ()}
    types = {t.lower() for t in body.get("types_filter") or ()}
    see_all = _allowed(ctx, "DESCRIBE", "CLUSTER", "kafka-cluster")
    groups = []
    for g in _coordinator(ctx).list_groups():
        if states and g.state.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        if not see_all and not _allowed(ctx, "DESCRIBE", "GROUP", g.group_id):
            continue
        groups.append(
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type or "",
                "group_state": g.state,
                "group_type": "classic",
            }
        )
    return {"throttle_time_ms": 0, "error_code": 0, "groups": groups}


def _authorized_operations(ctx: RequestContext, group_id: str) -> int:
    bits = 0
    for operation, code in ACL_OPERATION_CODES.items():
        if _allowed(ctx, operation, "GROUP", group_id):
            bits |= 1 << code
    return bits


def _describe(g: Group | None, group_id: str) -> Body:
    if g is None:
        return {
            "error_code": 0,
            "group_id": group_id,
            "group_state": "Dead",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }
    stable = g.state == "Stable"
    return {
        "error_code": 0,
        "group_id": group_id,
        "group_state": g.state,
        "protocol_type": g.protocol_type or "",
        "protocol_data": (g.protocol_name or "") if stable else "",
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata(g.protocol_name) if stable else b"",
                "member_assignment": m.assignment if stable else b"",
            }
            for m in g.members.values()
        ],
    }


async def describe_groups(ctx: RequestContext, body: Body) -> Body:
    gc = _coordinator(ctx)
    out = []
    for group_id in body["groups"]:
        if not _allowed(ctx, "DESCRIBE", "GROUP", group_id):
            described: Body = {
                "error_code": E["GROUP_AUTHORIZATION_FAILED"],
                "group_id": group_id,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
            }
        else:
            described = _describe(gc.groups.get(group_id), group_id)
            if body.get("include_authorized_operations"):
                described["authorized_operations"] = _authorized_operations(ctx, group_id)
        out.append(described)
    return {"throttle_time_ms": 0, "groups": out}


async def delete_groups(ctx: RequestContext, body: Body) -> Body:
    gc = _coordinator(ctx)
    results = []
    for group_id in body["groups_names"]:
        if not _allowed(ctx, "DELETE", "GROUP", group_id):
            code = E["GROUP_AUTHORIZATION_FAILED"]
        else:
            code = gc.delete_group(group_id)
        results.append({"group_id": group_id, "error_code": code})
    return {"throttle_time_ms": 0, "results": results}


# -- plugin hooks --------------------------------------------------------------------------------


def handlers() -> dict[int, Handler]:
    return {
        API_KEYS["FindCoordinator"]: find_coordinator,
        API_KEYS["JoinGroup"]: join_group,
        API_KEYS["SyncGroup"]: sync_group,
        API_KEYS["Heartbeat"]: heartbeat,
        API_KEYS["LeaveGroup"]: leave_group,
        API_KEYS["OffsetCommit"]: offset_commit,
        API_KEYS["OffsetFetch"]: offset_fetch,
        API_KEYS["OffsetDelete"]: offset_delete,
        API_KEYS["ListGroups"]: list_groups,
        API_KEYS["DescribeGroups"]: describe_groups,
        API_KEYS["DeleteGroups"]: delete_groups,
    }


#: flag dest -> GroupConfig field
FLAGS = {
    "group_min_session_timeout_ms": "min_session_timeout_ms",
    "group_max_session_timeout_ms": "max_session_timeout_ms",
    "group_initial_rebalance_delay_ms": "initial_rebalance_delay_ms",
    "group_max_size": "max_size",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = GroupConfig()
    group = parser.add_argument_group("consumer groups")
    group.add_argument(
        "--group-min-session-timeout-ms",
        type=int,
        default=defaults.min_session_timeout_ms,
        metavar="MS",
        help="group.min.session.timeout.ms: shortest session timeout a member may ask (default %(default)s)",
    )
    group.add_argument(
        "--group-max-session-timeout-ms",
        type=int,
        default=defaults.max_session_timeout_ms,
        metavar="MS",
        help="group.max.session.timeout.ms (default %(default)s)",
    )
    group.add_argument(
        "--group-initial-rebalance-delay-ms",
        type=int,
        default=defaults.initial_rebalance_delay_ms,
        metavar="MS",
        help="group.initial.rebalance.delay.ms: how long a new group waits for members (default %(default)s)",
    )
    group.add_argument(
        "--group-max-size",
        type=int,
        default=defaults.max_size,
        metavar="N",
        help="group.max.size: members per group (default %(default)s)",
    )


def group_config(extra: Mapping[str, Any]) -> GroupConfig:
    """The coordinator's settings from ``config.extra`` (flags or ``Broker(...)`` keywords)."""
    given = {field: int(extra[flag]) for flag, field in FLAGS.items() if extra.get(flag) is not None}
    return GroupConfig(**given)


def attach(state: BrokerState) -> None:
    """Create the coordinator (raises StorageError when its log cannot be read) and its timer."""
    cfg = state.config
    coordinator = GroupCoordinator(GroupStore(cfg.data_dir, fsync=cfg.fsync), group_config(cfg.extra))
    state.extensions[EXTENSION] = coordinator
    timer = DeadlineTimer(coordinator)

    def txn_offsets(group_id: str, offsets: Mapping[tuple[str, int], tuple[int, int, str | None]]) -> None:
        coordinator.commit_transactional(group_id, offsets)

    sinks = getattr(state, "txn_offset_sinks", None)
    if sinks is not None:
        sinks.append(txn_offsets)

    def close() -> None:
        timer.stop()
        coordinator.close()

    state.on_close.append(close)
