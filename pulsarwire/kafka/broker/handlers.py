"""The broker core's request handlers: ApiVersions, Metadata, Produce, Fetch, ListOffsets,
CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, InitProducerId.

Each is ``async def handler(ctx, body) -> dict`` over the codec's dicts; :func:`handlers`
gives them to ``server.py``'s registry with the versions served (Produce from v3 and Fetch
from v4: the versions that carry record batches v2, which is what the broker stores).

Error codes are Kafka's, by name (``ERROR_CODES``). A few rules worth knowing:

- Produce validates each batch before anything is appended: exactly one v2 batch per
  partition (``INVALID_RECORD`` otherwise), CRC32C and structure checked by decoding it
  (``CORRUPT_MESSAGE``), no control batches from producers; idempotent producers' sequences
  are checked (``producers.py``). The broker writes the base offset into the stored batch.
- Fetch answers sessionless (``session_id`` 0), as a Kafka broker without fetch session slots
  does: every answer is a full one, which every client accepts. It returns whole batches,
  at most ``partition_max_bytes`` per partition and ``max_bytes`` in all, except that the first
  batch of the first partition with data always comes (KIP-74). Below ``min_bytes`` it waits up
  to ``max_wait_ms``, woken by appends to the partitions it asked for.
- Metadata creates a missing topic with ``num_partitions`` when the broker's
  ``auto_create_topics`` and the request's ``allow_auto_topic_creation`` both say so.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pulsarwire.errors import StorageError
from pulsarwire.kafka.broker.state import (
    DEFAULT_TOPIC_CONFIGS,
    BrokerState,
    Topic,
    TopicError,
    check_topic_name,
)
from pulsarwire.kafka.codec import API_KEYS
from pulsarwire.kafka.codec.records import CONTROL, LOG_OVERHEAD, MAGIC_AT, check_batch
from pulsarwire.kafka.errors import ERROR_CODES, ERROR_NAMES, KafkaProtocolError

if TYPE_CHECKING:
    from pulsarwire.kafka.broker.context import RequestContext
    from pulsarwire.kafka.broker.server import Handler

Body = dict[str, Any]
E = ERROR_CODES
logger = logging.getLogger("pulsarwire.kafka.broker")
NO_ID = bytes(16)

#: Kafka's topic config names (TopicConfig.java): CreateTopics refuses others with INVALID_CONFIG.
TOPIC_CONFIG_NAMES = frozenset(
    {
        "cleanup.policy", "compression.type", "delete.retention.ms", "file.delete.delay.ms",
        "flush.messages", "flush.ms", "follower.replication.throttled.replicas", "index.interval.bytes",
        "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
        "max.compaction.lag.ms", "max.message.bytes", "message.downconversion.enable",
        "message.format.version", "message.timestamp.after.max.ms", "message.timestamp.before.max.ms",
        "message.timestamp.difference.max.ms", "message.timestamp.type", "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms", "min.insync.replicas", "preallocate", "remote.storage.enable",
        "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms",
        "segment.ms", "unclean.leader.election.enable",
    }
)  # fmt: skip

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
READ_COMMITTED = 1


# -- ApiVersions -------------------------------------------------------------------------------


async def api_versions(ctx: RequestContext, body: Body) -> Body:
    from pulsarwire.kafka.broker.server import api_versions_body

    return api_versions_body()


# -- Metadata ----------------------------------------------------------------------------------


def _partitions_metadata(state: BrokerState, topic: Topic) -> list[Body]:
    node = [state.node_id]
    return [
        {
            "partition_index": p,
            "leader_id": state.node_id,
            "leader_epoch": 0,
            "replica_nodes": node,
            "isr_nodes": node,
        }
        for p in range(len(topic.partitions))
    ]


def _topic_metadata(state: BrokerState, topic: Topic) -> Body:
    return {"name": topic.name, "topic_id": topic.id, "partitions": _partitions_metadata(state, topic)}


async def metadata(ctx: RequestContext, body: Body) -> Body:
    state = ctx.broker
    wanted = body["topics"]
    answers: list[Body] = []
    if wanted is None or (ctx.api_version == 0 and not wanted):
        for each in list(state.topics.values()):
            if ctx.broker.authorize(ctx, "DESCRIBE", "TOPIC", each.name):
                answers.append(_topic_metadata(state, each))
    else:
        allow_create = state.config.auto_create_topics and body.get("allow_auto_topic_creation", True)
        for want in wanted:
            name = want.get("name")
            if name is None:
                found = state.topics_by_id.get(want.get("topic_id", NO_ID))
                if found is None:
                    answers.append(
                        {
                            "name": None,
                            "topic_id": want.get("topic_id", NO_ID),
                            "error_code": E["UNKNOWN_TOPIC_ID"],
                        }
                    )
                    continue
                name = found.name
            if not ctx.broker.authorize(ctx, "DESCRIBE", "TOPIC", name):
                answers.append({"name": name, "error_code": E["TOPIC_AUTHORIZATION_FAILED"]})
                continue
            topic: Topic | None = state.topics.get(name)
            if topic is None and allow_create:
                try:
                    check_topic_name(name)
                    if not ctx.broker.authorize(ctx, "CREATE", "TOPIC", name):
                        answers.append({"name": name, "error_code": E["TOPIC_AUTHORIZATION_FAILED"]})
                        continue
                    topic = state.create_topic(name, state.config.num_partitions)
                except TopicError as exc:
                    answers.append({"name": name, "error_code": exc.code})
                    continue
                except StorageError:
                    answers.append({"name": name, "error_code": E["KAFKA_STORAGE_ERROR"]})
                    continue
            if topic is None:
                answers.append({"name": name, "error_code": E["UNKNOWN_TOPIC_OR_PARTITION"]})
                continue
            answers.append(_topic_metadata(state, topic))
    return {
        "brokers": [{"node_id": state.node_id, "host": state.host, "port": state.port, "rack": None}],
        "cluster_id": state.cluster_id,
        "controller_id": state.node_id,
        "topics": answers,
    }


# -- Produce -----------------------------------------------------------------------------------


def _single_batch(records: bytes | None) -> int:
    """0 when ``records`` is exactly one v2 batch by its framing, else the error code."""
    if not records or len(records) <= MAGIC_AT:  # too short to say its magic
        return E["CORRUPT_MESSAGE"]
    _, length = LOG_OVERHEAD.unpack_from(records)
    if length + LOG_OVERHEAD.size != len(records):
        # several batches (or a length that does not fit): Kafka wants exactly one from v3 on
        return E["INVALID_RECORD"] if length + LOG_OVERHEAD.size < len(records) else E["CORRUPT_MESSAGE"]
    if records[MAGIC_AT] != 2:
        return E["UNSUPPORTED_FOR_MESSAGE_FORMAT"]
    return 0


def _produce_partition(
    ctx: RequestContext, acks: int, txn_id: str | None, name: str, index: int, records: bytes | None
) -> Body:
    state = ctx.broker
    answer: Body = {"index": index, "base_offset": -1, "log_start_offset": -1}
    if not ctx.broker.authorize(ctx, "WRITE", "TOPIC", name):
        answer["error_code"] = E["TOPIC_AUTHORIZATION_FAILED"]
        return answer
    log = state.partition(name, index)
    if log is None:
        answer["error_code"] = E["UNKNOWN_TOPIC_OR_PARTITION"]
        return answer
    answer["log_start_offset"] = log.log_start_offset
    topic = state.topics[name]
    if acks == -1 and int(topic.setting("min.insync.replicas")) > 1:
        answer["error_code"] = E["NOT_ENOUGH_REPLICAS"]  # one broker: one in-sync replica
        return answer
    limit = int(topic.setting("max.message.bytes"))
    if records is not None and len(records) > limit:
        answer["error_code"] = E["MESSAGE_TOO_LARGE"]
        answer["error_message"] = f"a batch of {len(records)} bytes; the topic's max.message.bytes is {limit}"
        return answer
    code = _single_batch(records)
    if code:
        answer["error_code"] = code
        answer["error_message"] = (
            "a Produce request (v3 and later) carries exactly one record batch v2 per partition"
        )
        return answer
    assert records is not None
    try:
        batch = check_batch(records, state.config.max_batch_bytes)  # CRC, structure, offset deltas
    except KafkaProtocolError as exc:
        answer["error_code"] = E["CORRUPT_MESSAGE"]
        answer["error_message"] = str(exc)
        return answer
    if batch.attributes & CONTROL:
        answer["error_code"] = E["INVALID_RECORD"]
        answer["error_message"] = "producers may not write control batches"
        return answer
    if batch.is_transactional:
        coordinator = state.extensions.get("transactions")
        code = E["INVALID_TXN_STATE"]
        if coordinator is not None:
            code = coordinator.check_produce(txn_id, batch.producer_id, batch.producer_epoch, name, index)
        if code:
            answer["error_code"] = code
            return answer
    code, duplicate_of = state.producers.check(
        name, index, batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_offset_delta + 1
    )
    if code:
        answer["error_code"] = code
        return answer
    if duplicate_of is not None:
        answer["base_offset"] = duplicate_of
        return answer
    append_time = (
        int(time.time() * 1000) if topic.setting("message.timestamp.type") == "LogAppendTime" else None
    )
    try:
        info = log.append(records, log_append_time=append_time)
    except StorageError as exc:
        logger.error("Produce to %s-%d refused: %s", name, index, exc)
        answer["error_code"] = E["KAFKA_STORAGE_ERROR"]
        answer["error_message"] = str(exc)
        return answer
    state.producers.record(name, index, info)
    state.appended(name, index)
    answer["base_offset"] = info.base_offset
    if append_time is not None:
        answer["log_append_time_ms"] = append_time
    return answer


def _refuse_all(body: Body, code: int) -> Body:
    """A Produce answer with ``code`` for every partition of the request."""
    return {
        "responses": [
            {
                "name": t["name"],
                "partition_responses": [{"index": p["index"], "error_code": code} for p in parts],
            }
            for t in body["topic_data"]
            for parts in [t["partition_data"]]
        ]
    }


async def produce(ctx: RequestContext, body: Body) -> Body:
    if body["acks"] not in (0, 1, -1):
        return _refuse_all(body, E["INVALID_REQUIRED_ACKS"])
    txn_id = body.get("transactional_id")
    if txn_id is not None and not ctx.broker.authorize(ctx, "WRITE", "TRANSACTIONAL_ID", txn_id):
        return _refuse_all(body, E["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"])
    responses = []
    for t in body["topic_data"]:
        parts = [
            _produce_partition(ctx, body["acks"], txn_id, t["name"], p["index"], p["records"])
            for p in t["partition_data"]
        ]
        responses.append({"name": t["name"], "partition_responses": parts})
    return {"responses": responses}


# -- Fetch -------------------------------------------------------------------------------------


def _fetch_once(ctx: RequestContext, body: Body) -> tuple[list[Body], int, bool]:
    """(responses, bytes, any error) for one pass over the requested partitions."""
    state = ctx.broker
    by_id = ctx.api_version >= 13
    budget = min(body.get("max_bytes", 0x7FFFFFFF), state.config.fetch_max_bytes)
    total = 0
    errors = False
    responses = []
    for t in body["topics"]:
        topic = state.topics_by_id.get(t["topic_id"]) if by_id else state.topics.get(t["topic"])
        name = topic.name if topic is not None else t.get("topic", "")
        parts = []
        for p in t["partitions"]:
            index = p["partition"]
            answer: Body = {"partition_index": index, "high_watermark": -1, "records": b""}
            parts.append(answer)
            if topic is None:
                answer["error_code"] = E["UNKNOWN_TOPIC_ID"] if by_id else E["UNKNOWN_TOPIC_OR_PARTITION"]
                errors = True
                continue
            if not ctx.broker.authorize(ctx, "READ", "TOPIC", name):
                answer["error_code"] = E["TOPIC_AUTHORIZATION_FAILED"]
                errors = True
                continue
            log = state.partition(name, index)
            if log is None:
                answer["error_code"] = E["UNKNOWN_TOPIC_OR_PARTITION"]
                errors = True
                continue
            hw, lso = log.high_watermark, log.last_stable_offset
            answer.update(high_watermark=hw, last_stable_offset=lso, log_start_offset=log.log_start_offset)
            offset = p["fetch_offset"]
            if offset < log.log_start_offset or offset > hw:
                answer["error_code"] = E["OFFSET_OUT_OF_RANGE"]
                errors = True
                continue
            committed = body.get("isolation_level", 0) == READ_COMMITTED
            if offset == hw or (committed and offset >= lso):
                continue
            limit = min(p["partition_max_bytes"], budget - total)
            data, end = log.read(offset, max(0, limit), min_one=total == 0, upto=lso if committed else None)
            answer["records"] = data
            if committed:
                aborted = log.aborted_between(offset, end)
                answer["aborted_transactions"] = [{"producer_id": a, "first_offset": f} for a, f in aborted]
            total += len(data)
        responses.append({"topic": name, "topic_id": t.get("topic_id", NO_ID), "partitions": parts})
    return responses, total, errors


async def fetch(ctx: RequestContext, body: Body) -> Body:
    if ctx.api_version >= 7:
        if body["session_id"] != 0:
            return {"error_code": E["FETCH_SESSION_ID_NOT_FOUND"], "session_id": 0, "responses": []}
        if body["session_epoch"] > 0:
            return {"error_code": E["INVALID_FETCH_SESSION_EPOCH"], "session_id": 0, "responses": []}
    deadline = time.monotonic() + max(0, body["max_wait_ms"]) / 1000
    keys: list[tuple[str, int]] = []
    for t in body["topics"]:
        topic = (
            ctx.broker.topics_by_id.get(t["topic_id"])
            if ctx.api_version >= 13
            else ctx.broker.topics.get(t["topic"])
        )
        if topic is not None:
            keys.extend((topic.name, p["partition"]) for p in t["partitions"])
    while True:
        responses, total, errors = _fetch_once(ctx, body)
        left = deadline - time.monotonic()
        if total >= body["min_bytes"] or errors or left <= 0 or not keys:
            return {"error_code": 0, "session_id": 0, "responses": responses}
        await ctx.broker.wait_for_append(keys, left)


# -- ListOffsets -------------------------------------------------------------------------------


def _list_offset(ctx: RequestContext, name: str, p: Body, committed: bool) -> Body:
    index = p["partition_index"]
    answer: Body = {"partition_index": index, "timestamp": -1, "offset": -1}
    if not ctx.broker.authorize(ctx, "DESCRIBE", "TOPIC", name):
        answer["error_code"] = E["TOPIC_AUTHORIZATION_FAILED"]
        return answer
    log = ctx.broker.partition(name, index)
    if log is None:
        answer["error_code"] = E["UNKNOWN_TOPIC_OR_PARTITION"]
        return answer
    answer["leader_epoch"] = 0
    ts = p["timestamp"]
    if ts == LATEST:
        answer["offset"] = log.last_stable_offset if committed else log.high_watermark
    elif ts in (EARLIEST, EARLIEST_LOCAL):
        answer["offset"] = log.log_start_offset
    elif ts == MAX_TIMESTAMP:
        found = log.max_timestamp()
        if found is not None:
            answer["offset"], answer["timestamp"] = found
    elif ts >= 0:
        found = log.offset_for_timestamp(ts)
        if found is not None:
            answer["offset"], answer["timestamp"] = found
    elif ts != LATEST_TIERED:
        answer["error_code"] = E["INVALID_REQUEST"]
    return answer


async def list_offsets(ctx: RequestContext, body: Body) -> Body:
    """One answer per partition asked; a partition asked more than once gets one INVALID_REQUEST,
    as Kafka answers (which of its timestamps would the offset be for?)."""
    committed = body.get("isolation_level", 0) == READ_COMMITTED
    counts = Counter((t["name"], p["partition_index"]) for t in body["topics"] for p in t["partitions"])
    topics: dict[str, list[Body]] = {}
    seen: set[tuple[str, int]] = set()
    for t in body["topics"]:
        for p in t["partitions"]:
            key = (t["name"], p["partition_index"])
            if key in seen:
                continue
            seen.add(key)
            if counts[key] > 1:
                answer = {
                    "partition_index": key[1],
                    "error_code": E["INVALID_REQUEST"],
                    "offset": -1,
                    "timestamp": -1,
                }
            else:
                answer = _list_offset(ctx, t["name"], p, committed)
            topics.setdefault(t["name"], []).append(answer)
    return {"topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


# -- CreateTopics / DeleteTopics / CreatePartitions ---------------------------------------------


def _create_one(ctx: RequestContext, t: Body, validate_only: bool, duplicate: bool) -> Body:
    state = ctx.broker
    name = t["name"]
    answer: Body = {"name": name, "error_message": None}

    def fail(code: str, message: str) -> Body:
        answer["error_code"] = E[code]
        answer["error_message"] = message
        answer["configs"] = None if ctx.api_version >= 5 else []
        return answer

    if duplicate:
        return fail("INVALID_REQUEST", f"topic {name!r} appears more than once in the request")
    if not ctx.broker.authorize(ctx, "CREATE", "TOPIC", name):
        return fail("TOPIC_AUTHORIZATION_FAILED", f"not allowed to create topic {name!r}")
    try:
        check_topic_name(name)
    except TopicError as exc:
        return fail("INVALID_TOPIC_EXCEPTION", exc.message)
    if name in state.topics:
        return fail("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
    assignments = t["assignments"]
    count, factor = t["num_partitions"], t["replication_factor"]
    if assignments:
        if count != -1 or factor != -1:
            return fail(
                "INVALID_REQUEST", "give either assignments or a partition count and replication factor"
            )
        if sorted(a["partition_index"] for a in assignments) != list(range(len(assignments))):
            return fail("INVALID_REPLICA_ASSIGNMENT", "partition indexes must run from 0 without gaps")
        if any(list(a["broker_ids"]) != [state.node_id] for a in assignments):
            return fail("INVALID_REPLICA_ASSIGNMENT", f"the only broker is {state.node_id}")
        count, factor = len(assignments), 1
    if count == -1:
        count = state.config.num_partitions
    if factor == -1:
        factor = 1
    if count < 1:
        return fail("INVALID_PARTITIONS", "Number of partitions must be larger than 0.")
    if factor < 1:
        return fail("INVALID_REPLICATION_FACTOR", "Replication factor must be larger than 0.")
    if factor > 1:
        return fail(
            "INVALID_REPLICATION_FACTOR", f"Replication factor: {factor} larger than available brokers: 1."
        )
    configs: dict[str, str] = {}
    for c in t["configs"]:
        if c["name"] not in TOPIC_CONFIG_NAMES:
            return fail("INVALID_CONFIG", f"Unknown topic config name: {c['name']}")
        problem = _config_problem(c["name"], c["value"])
        if problem:
            return fail("INVALID_CONFIG", problem)
        if c["value"] is not None:
            configs[c["name"]] = c["value"]
    if not validate_only:
        try:
            topic = state.create_topic(name, count, configs)
        except TopicError as exc:
            return fail(ERROR_NAMES[exc.code], exc.message)
        except StorageError as exc:
            return fail("KAFKA_STORAGE_ERROR", str(exc))
        answer["topic_id"] = topic.id
    answer.update(error_code=0, num_partitions=count, replication_factor=factor)
    answer["configs"] = _config_entries(configs, None, ctx.api_version >= 5, created=True)
    return answer


def _config_problem(key: str, value: str | None) -> str | None:
    """What is wrong with ``value`` for one of the configs the broker acts on (None: nothing)."""
    if value is None:
        return None
    if key == "message.timestamp.type" and value not in ("CreateTime", "LogAppendTime"):
        return (
            f"Invalid value {value} for configuration {key}: String must be one of: CreateTime, LogAppendTime"
        )
    if key in ("max.message.bytes", "min.insync.replicas"):
        least = 1 if key == "min.insync.replicas" else 0
        if not value.lstrip("-").isdigit() or int(value) < least:
            return f"Invalid value {value} for configuration {key}: Value must be at least {least}"
    return None


def _config_entries(
    own: Mapping[str, str], keys: list[str] | None, synonyms: bool, created: bool = False
) -> list[Body]:
    entries = []
    for key in sorted(set(DEFAULT_TOPIC_CONFIGS) | set(own)):
        if keys is not None and key not in keys:
            continue
        mine = key in own
        source = SOURCE_DYNAMIC_TOPIC if mine else SOURCE_DEFAULT
        value = own[key] if mine else DEFAULT_TOPIC_CONFIGS.get(key, "")
        entry: Body = {"name": key, "value": value, "read_only": False, "config_source": source}
        if not created:  # DescribeConfigs (CreateTopics' entries have neither field)
            entry["is_default"] = not mine
            if synonyms:
                entry["synonyms"] = [{"name": key, "value": value, "source": source}]
        entries.append(entry)
    return entries


async def create_topics(ctx: RequestContext, body: Body) -> Body:
    names = [t["name"] for t in body["topics"]]
    validate_only = bool(body.get("validate_only", False))
    return {
        "topics": [_create_one(ctx, t, validate_only, names.count(t["name"]) > 1) for t in body["topics"]]
    }


async def delete_topics(ctx: RequestContext, body: Body) -> Body:
    state = ctx.broker
    wanted: list[tuple[str | None, bytes]] = (
        [(t["name"], t["topic_id"]) for t in body["topics"]]
        if ctx.api_version >= 6
        else [(n, NO_ID) for n in body["topic_names"]]
    )
    responses = []
    for name, topic_id in wanted:
        answer: Body = {"name": name, "topic_id": topic_id, "error_message": None}
        responses.append(answer)
        if name is None:
            topic = state.topics_by_id.get(topic_id)
            if topic is None:
                answer["error_code"] = E["UNKNOWN_TOPIC_ID"]
                continue
            name = answer["name"] = topic.name
        if not ctx.broker.authorize(ctx, "DELETE", "TOPIC", name):
            answer["error_code"] = E["TOPIC_AUTHORIZATION_FAILED"]
            continue
        topic = state.topics.get(name)
        if topic is None:
            answer["error_code"] = E["UNKNOWN_TOPIC_OR_PARTITION"]
            answer["error_message"] = f"topic {name!r} does not exist"
            continue
        answer["topic_id"] = topic.id
        try:
            state.delete_topic(name)
            answer["error_code"] = 0
        except StorageError as exc:
            answer["error_code"] = E["KAFKA_STORAGE_ERROR"]
            answer["error_message"] = str(exc)
    return {"responses": responses}


async def create_partitions(ctx: RequestContext, body: Body) -> Body:
    state = ctx.broker
    names = [t["name"] for t in body["topics"]]
    results = []
    for t in body["topics"]:
        name = t["name"]
        result: Body = {"name": name, "error_code": 0, "error_message": None}
        results.append(result)
        topic = state.topics.get(name)
        if names.count(name) > 1:
            result.update(
                error_code=E["INVALID_REQUEST"], error_message=f"topic {name!r} appears more than once"
            )
        elif not ctx.broker.authorize(ctx, "ALTER", "TOPIC", name):
            result["error_code"] = E["TOPIC_AUTHORIZATION_FAILED"]
        elif topic is None:
            result.update(
                error_code=E["UNKNOWN_TOPIC_OR_PARTITION"], error_message=f"topic {name!r} does not exist"
            )
        elif t["count"] <= len(topic.partitions):
            have = len(topic.partitions)
            message = (
                f"Topic currently has {have} partitions, which is higher than the requested {t['count']}."
                if t["count"] < have
                else f"Topic already has {have} partitions."
            )
            result.update(error_code=E["INVALID_PARTITIONS"], error_message=message)
        elif t["assignments"] is not None and any(
            list(a["broker_ids"]) != [state.node_id] for a in t["assignments"]
        ):
            result.update(
                error_code=E["INVALID_REPLICA_ASSIGNMENT"],
                error_message=f"the only broker is {state.node_id}",
            )
        elif not body["validate_only"]:
            try:
                state.add_partitions(name, t["count"])
            except TopicError as exc:
                result.update(error_code=exc.code, error_message=exc.message)
            except StorageError as exc:
                result.update(error_code=E["KAFKA_STORAGE_ERROR"], error_message=str(exc))
    return {"results": results}


# -- DescribeConfigs ---------------------------------------------------------------------------


def _broker_configs(state: BrokerState) -> dict[str, str]:
    cfg = state.config
    return {
        "auto.create.topics.enable": str(cfg.auto_create_topics).lower(),
        "num.partitions": str(cfg.num_partitions),
        "socket.request.max.bytes": str(cfg.max_request_bytes),
        "broker.id": str(state.node_id),
    }


async def describe_configs(ctx: RequestContext, body: Body) -> Body:
    state = ctx.broker
    synonyms = bool(body.get("include_synonyms", False))
    results = []
    for r in body["resources"]:
        name, kind, keys = r["resource_name"], r["resource_type"], r["configuration_keys"]
        result: Body = {
            "resource_type": kind,
            "resource_name": name,
            "error_code": 0,
            "error_message": None,
            "configs": [],
        }
        results.append(result)
        if kind == RESOURCE_TOPIC:
            if not ctx.broker.authorize(ctx, "DESCRIBE_CONFIGS", "TOPIC", name):
                result.update(error_code=E["TOPIC_AUTHORIZATION_FAILED"], error_message=None)
                continue
            topic = state.topics.get(name)
            if topic is None:
                result.update(
                    error_code=E["UNKNOWN_TOPIC_OR_PARTITION"], error_message=f"Topic {name} does not exist"
                )
                continue
            result["configs"] = _config_entries(
                topic.configs, list(keys) if keys is not None else None, synonyms
            )
        elif kind == RESOURCE_BROKER:
            if name not in ("", str(state.node_id)):
                result.update(
                    error_code=E["INVALID_REQUEST"], error_message=f"broker {name} is not this broker"
                )
                continue
            result["configs"] = [
                {"name": k, "value": v, "read_only": True, "config_source": SOURCE_STATIC_BROKER}
                for k, v in sorted(_broker_configs(state).items())
                if keys is None or k in keys
            ]
        else:
            result.update(
                error_code=E["INVALID_REQUEST"], error_message=f"resource type {kind} is not described here"
            )
    return {"results": results}


# -- InitProducerId ----------------------------------------------------------------------------


async def init_producer_id(ctx: RequestContext, body: Body) -> Body:
    if body["transactional_id"] is not None:
        hook = ctx.broker.extensions.get("transactions")
        if hook is None:
            return {
                "error_code": E["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"],
                "producer_id": -1,
                "producer_epoch": -1,
            }
        result: Body = await hook.init_producer_id(ctx, body)
        return result
    if not ctx.broker.authorize(ctx, "IDEMPOTENT_WRITE", "CLUSTER", "kafka-cluster"):
        return {"error_code": E["CLUSTER_AUTHORIZATION_FAILED"], "producer_id": -1, "producer_epoch": -1}
    try:
        pid = ctx.broker.new_producer_id()
    except StorageError:
        return {"error_code": E["KAFKA_STORAGE_ERROR"], "producer_id": -1, "producer_epoch": -1}
    return {"error_code": 0, "producer_id": pid, "producer_epoch": 0}


def handlers() -> dict[int, Handler]:
    """The core's handlers by API key (versions: see :data:`VERSIONS_SERVED`)."""
    return {API_KEYS[name]: handler for name, handler in _HANDLERS.items()}


_HANDLERS: dict[str, Handler] = {
    "ApiVersions": api_versions,
    "Metadata": metadata,
    "Produce": produce,
    "Fetch": fetch,
    "ListOffsets": list_offsets,
    "CreateTopics": create_topics,
    "DeleteTopics": delete_topics,
    "CreatePartitions": create_partitions,
    "DescribeConfigs": describe_configs,
    "InitProducerId": init_producer_id,
}

#: narrower version ranges than the codec's, by API key: record batches v2 only (Produce 3+,
#: Fetch 4+), ListOffsets from v1 (v0's offset arrays are not served)
VERSIONS_SERVED: dict[int, tuple[int, int]] = {
    API_KEYS["Produce"]: (3, 32767),
    API_KEYS["Fetch"]: (4, 32767),
    API_KEYS["ListOffsets"]: (1, 32767),
}
