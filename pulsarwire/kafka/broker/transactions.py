"""The transaction coordinator: transactional ids, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn with COMMIT/ABORT markers, epoch fencing, timeouts.

One :class:`TransactionCoordinator` per broker (``state.extensions["transactions"]``, set by
:func:`attach`). A transactional id maps to a producer id and epoch (``InitProducerId`` with
the id: a new id gets a new producer id at epoch 0; a known one has its open transaction
aborted and its epoch bumped, which fences the previous producer). A transaction is Empty or
Ongoing; ``AddPartitionsToTxn`` / ``AddOffsetsToTxn`` make it Ongoing, ``EndTxn`` writes a
control batch to every partition it touched -- a COMMIT or ABORT marker, which is what moves the
partitions' last stable offset (``log.py``) -- and makes it Empty again, remembering how it
ended so a retried ``EndTxn`` gets the same answer. Only batches of an Ongoing transaction's
producer id and epoch, to partitions added to it, are accepted by Produce.

Offsets sent with ``TxnOffsetCommit`` wait in the transaction; on commit each group's offsets
go to the callables in ``state.txn_offset_sinks`` (``sink(group_id, offsets)``, offsets keyed
by (topic, partition) -> (offset, leader epoch, metadata)): the group coordinator registers its
offset store there. Without a sink, a transaction that carries offsets cannot commit
(``COORDINATOR_NOT_AVAILABLE`` from AddOffsetsToTxn).

Durability: the coordinator's state is ``DATA_DIR/transactions.json`` (written atomically at
every change, before the answer). A transaction still Ongoing when the broker starts is aborted
then (markers written, epoch bumped), and one open longer than its timeout is aborted the same
way by a check every second, as Kafka's coordinator does.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pulsarwire.broker.net import BrokerStartError
from pulsarwire.errors import StorageError
from pulsarwire.kafka.broker.state import unreadable
from pulsarwire.kafka.codec import API_KEYS
from pulsarwire.kafka.codec.records import control_batch, encode_batch
from pulsarwire.kafka.errors import ERROR_CODES as E

if TYPE_CHECKING:
    from pulsarwire.kafka.broker.context import RequestContext
    from pulsarwire.kafka.broker.server import Handler
    from pulsarwire.kafka.broker.state import BrokerState

Body = dict[str, Any]
STATE_FILE = "transactions.json"
MAX_TIMEOUT_MS = 15 * 60 * 1000  # transaction.max.timeout.ms
MAX_EPOCH = 32767
EMPTY, ONGOING = "Empty", "Ongoing"


@dataclass
class Transaction:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: str = EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    #: group -> (topic, partition) -> (offset, leader epoch, metadata)
    offsets: dict[str, dict[tuple[str, int], tuple[int, int, str | None]]] = field(default_factory=dict)
    started: float = 0.0
    #: how the last transaction ended (True commit, False abort), for a retried EndTxn
    last_result: bool | None = None

    def stored(self) -> dict[str, Any]:
        return {
            "producer_id": self.producer_id,
            "epoch": self.epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state,
            "partitions": sorted(self.partitions),
            "last_result": self.last_result,
        }


class TransactionCoordinator:
    """See the module docstring."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state
        self.transactions: dict[str, Transaction] = {}
        self._task: asyncio.Task[None] | None = None
        self._load()

    # -- persistence -------------------------------------------------------------------------
    def _path(self) -> Any:
        return self.state.config.data_dir / STATE_FILE if self.state.config.data_dir is not None else None

    def _load(self) -> None:
        path = self._path()
        if path is None or not path.exists():
            return
        try:
            stored = json.loads(path.read_text())
            for txn_id, info in stored.items():
                txn = Transaction(
                    txn_id, int(info["producer_id"]), int(info["epoch"]), int(info["timeout_ms"])
                )
                txn.state = str(info["state"])
                txn.partitions = {(str(t), int(p)) for t, p in info["partitions"]}
                txn.last_result = info.get("last_result")
                self.transactions[txn_id] = txn
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise unreadable(path, "the transactions", exc) from None
        try:
            for txn in self.transactions.values():
                if txn.state == ONGOING:  # the broker stopped in the middle of it: abort, fence
                    self._finish(txn, commit=False)
                    self._bump(txn)
            self._save()
        except StorageError as exc:
            raise BrokerStartError(
                f"cannot keep data in {exc.path}: {exc.reason} (choose a writable --data-dir)"
            ) from None

    def _save(self) -> None:
        path = self._path()
        if path is None:
            return
        tmp = path.with_name(STATE_FILE + ".tmp")
        try:
            tmp.write_text(json.dumps({k: t.stored() for k, t in self.transactions.items()}))
            os.replace(tmp, path)
        except OSError as exc:
            raise StorageError(path, f"cannot write: {exc.strerror or exc}") from None

    # -- timeouts ----------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._expire())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _expire(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            expired = [
                t
                for t in self.transactions.values()
                if t.state == ONGOING and now - t.started > t.timeout_ms / 1000
            ]
            for txn in expired:
                try:
                    self._finish(txn, commit=False)
                    self._bump(txn)
                    self._save()
                except StorageError:
                    pass  # tried again at the next check

    # -- the steps ---------------------------------------------------------------------------
    def _bump(self, txn: Transaction) -> None:
        if txn.epoch >= MAX_EPOCH - 1:
            txn.producer_id, txn.epoch = self.state.new_producer_id(), 0
        else:
            txn.epoch += 1

    def _finish(self, txn: Transaction, *, commit: bool) -> None:
        """Write the markers, hand committed offsets to the sinks, make the transaction Empty."""
        now = int(time.time() * 1000)
        for topic, partition in sorted(txn.partitions):
            log = self.state.partition(topic, partition)
            if log is None:
                continue  # deleted meanwhile
            marker = control_batch(
                0, commit=commit, coordinator_epoch=0, producer_id=txn.producer_id,
                producer_epoch=txn.epoch, timestamp=now,
            )  # fmt: skip
            info = log.append(encode_batch(marker), commit=commit)
            self.state.producers.record(topic, partition, info)
            self.state.appended(topic, partition)
        if commit:
            for group, offsets in txn.offsets.items():
                for sink in self.state.txn_offset_sinks:
                    sink(group, offsets)
        txn.state = EMPTY
        txn.partitions = set()
        txn.groups = set()
        txn.offsets = {}
        txn.last_result = commit

    def _check(self, txn_id: str, producer_id: int, epoch: int) -> tuple[int, Transaction | None]:
        txn = self.transactions.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            return E["INVALID_PRODUCER_ID_MAPPING"], None
        if txn.epoch != epoch:
            return E["PRODUCER_FENCED"] if epoch < txn.epoch else E["INVALID_PRODUCER_EPOCH"], None
        return 0, txn

    def check_produce(
        self, txn_id: str | None, producer_id: int, epoch: int, topic: str, partition: int
    ) -> int:
        """The error code for a transactional batch to ``topic``/``partition`` (0: accept)."""
        if txn_id is None:
            return E["INVALID_TXN_STATE"]
        code, txn = self._check(txn_id, producer_id, epoch)
        if txn is None:
            # a batch of another epoch: Produce says INVALID_PRODUCER_EPOCH where the transaction
            # APIs say PRODUCER_FENCED, as Kafka's partitions and coordinator answer
            return E["INVALID_PRODUCER_EPOCH"] if code == E["PRODUCER_FENCED"] else code
        if txn.state != ONGOING or (topic, partition) not in txn.partitions:
            return E["INVALID_TXN_STATE"]
        return 0

    async def init_producer_id(self, ctx: RequestContext, body: Body) -> Body:
        txn_id = body["transactional_id"]
        fail: Body = {"producer_id": -1, "producer_epoch": -1}
        if not ctx.broker.authorize(ctx, "WRITE", "TRANSACTIONAL_ID", txn_id):
            return {**fail, "error_code": E["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"]}
        timeout = body["transaction_timeout_ms"]
        if not 0 < timeout <= MAX_TIMEOUT_MS:
            return {**fail, "error_code": E["INVALID_TRANSACTION_TIMEOUT"]}
        txn = self.transactions.get(txn_id)
        try:
            if txn is None:
                txn = Transaction(txn_id, ctx.broker.new_producer_id(), 0, timeout)
                self.transactions[txn_id] = txn
            else:
                given = (body.get("producer_id", -1), body.get("producer_epoch", -1))
                if given[0] != -1 and given != (txn.producer_id, txn.epoch):
                    return {**fail, "error_code": E["PRODUCER_FENCED"]}
                if txn.state == ONGOING:
                    self._bump(txn)  # the markers carry the new epoch: the old producer is fenced
                    self._finish(txn, commit=False)
                else:
                    self._bump(txn)
                txn.timeout_ms = timeout
            self._save()
        except StorageError:
            return {**fail, "error_code": E["KAFKA_STORAGE_ERROR"]}
        return {"error_code": 0, "producer_id": txn.producer_id, "producer_epoch": txn.epoch}

    async def add_partitions(self, ctx: RequestContext, body: Body) -> Body:
        txn_id = body["v3_and_below_transactional_id"]
        topics = body["v3_and_below_topics"]
        wanted = [(t["name"], p) for t in topics for p in t["partitions"]]

        def answer(codes: dict[tuple[str, int], int]) -> Body:
            by_topic: dict[str, list[Body]] = {}
            for (name, p), code in codes.items():
                by_topic.setdefault(name, []).append({"partition_index": p, "partition_error_code": code})
            return {
                "results_by_topic_v3_and_below": [
                    {"name": n, "results_by_partition": r} for n, r in by_topic.items()
                ]
            }

        if not ctx.broker.authorize(ctx, "WRITE", "TRANSACTIONAL_ID", txn_id):
            return answer({k: E["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"] for k in wanted})
        code, txn = self._check(txn_id, body["v3_and_below_producer_id"], body["v3_and_below_producer_epoch"])
        if txn is None:
            return answer({k: code for k in wanted})
        codes: dict[tuple[str, int], int] = {}
        for name, p in wanted:
            if not ctx.broker.authorize(ctx, "WRITE", "TOPIC", name):
                codes[(name, p)] = E["TOPIC_AUTHORIZATION_FAILED"]
            elif not ctx.broker.partition_exists(name, p):
                codes[(name, p)] = E["UNKNOWN_TOPIC_OR_PARTITION"]
        if codes:  # all or nothing, as Kafka: the others were not attempted
            return answer({k: codes.get(k, E["OPERATION_NOT_ATTEMPTED"]) for k in wanted})
        self._begin(txn)
        txn.partitions.update(wanted)
        try:
            self._save()
        except StorageError:
            return answer({k: E["KAFKA_STORAGE_ERROR"] for k in wanted})
        return answer({k: 0 for k in wanted})

    def _begin(self, txn: Transaction) -> None:
        if txn.state != ONGOING:
            txn.state = ONGOING
            txn.started = time.monotonic()

    async def add_offsets(self, ctx: RequestContext, body: Body) -> Body:
        txn_id = body["transactional_id"]
        if not ctx.broker.authorize(ctx, "WRITE", "TRANSACTIONAL_ID", txn_id):
            return {"error_code": E["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"]}
        if not ctx.broker.authorize(ctx, "READ", "GROUP", body["group_id"]):
            return {"error_code": E["GROUP_AUTHORIZATION_FAILED"]}
        if not ctx.broker.txn_offset_sinks:
            return {"error_code": E["COORDINATOR_NOT_AVAILABLE"]}
        code, txn = self._check(txn_id, body["producer_id"], body["producer_epoch"])
        if txn is None:
            return {"error_code": code}
        self._begin(txn)
        txn.groups.add(body["group_id"])
        try:
            self._save()
        except StorageError:
            return {"error_code": E["KAFKA_STORAGE_ERROR"]}
        return {"error_code": 0}

    async def txn_offset_commit(self, ctx: RequestContext, body: Body) -> Body:
        group = body["group_id"]
        code, txn = self._check(body["transactional_id"], body["producer_id"], body["producer_epoch"])
        if txn is not None and group not in txn.groups:
            code, txn = E["INVALID_TXN_STATE"], None
        if txn is not None and not ctx.broker.authorize(ctx, "READ", "GROUP", group):
            code, txn = E["GROUP_AUTHORIZATION_FAILED"], None
        topics = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                part_code = code
                if txn is not None:
                    if not ctx.broker.partition_exists(t["name"], p["partition_index"]):
                        part_code = E["UNKNOWN_TOPIC_OR_PARTITION"]
                    else:
                        offset = (p["committed_offset"], p["committed_leader_epoch"], p["committed_metadata"])
                        txn.offsets.setdefault(group, {})[(t["name"], p["partition_index"])] = offset
                parts.append({"partition_index": p["partition_index"], "error_code": part_code})
            topics.append({"name": t["name"], "partitions": parts})
        return {"topics": topics}

    async def end_txn(self, ctx: RequestContext, body: Body) -> Body:
        txn_id, commit = body["transactional_id"], bool(body["committed"])
        if not ctx.broker.authorize(ctx, "WRITE", "TRANSACTIONAL_ID", txn_id):
            return {"error_code": E["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"]}
        code, txn = self._check(txn_id, body["producer_id"], body["producer_epoch"])
        if txn is None:
            return {"error_code": code}
        if txn.state != ONGOING:
            # a retry of the end just made, or ending an empty transaction: as Kafka, fine when
            # it asks the same; a commit after an abort (or the reverse) is a state error
            same = txn.last_result is None or txn.last_result == commit
            return {"error_code": 0 if same else E["INVALID_TXN_STATE"]}
        try:
            self._finish(txn, commit=commit)
            self._save()
        except StorageError:
            return {"error_code": E["KAFKA_STORAGE_ERROR"]}
        return {"error_code": 0, "producer_id": txn.producer_id, "producer_epoch": txn.epoch}


def attach(state: BrokerState) -> None:
    coordinator = TransactionCoordinator(state)
    state.extensions["transactions"] = coordinator
    coordinator.start()
    state.on_close.append(coordinator.close)


def _coordinator(ctx: RequestContext) -> TransactionCoordinator:
    coordinator: TransactionCoordinator = ctx.broker.extensions["transactions"]
    return coordinator


async def add_partitions_to_txn(ctx: RequestContext, body: Body) -> Body:
    return await _coordinator(ctx).add_partitions(ctx, body)


async def add_offsets_to_txn(ctx: RequestContext, body: Body) -> Body:
    return await _coordinator(ctx).add_offsets(ctx, body)


async def txn_offset_commit(ctx: RequestContext, body: Body) -> Body:
    return await _coordinator(ctx).txn_offset_commit(ctx, body)


async def end_txn(ctx: RequestContext, body: Body) -> Body:
    return await _coordinator(ctx).end_txn(ctx, body)


def handlers() -> dict[int, Handler]:
    return {
        API_KEYS["AddPartitionsToTxn"]: add_partitions_to_txn,
        API_KEYS["AddOffsetsToTxn"]: add_offsets_to_txn,
        API_KEYS["TxnOffsetCommit"]: txn_offset_commit,
        API_KEYS["EndTxn"]: end_txn,
    }


#: AddPartitionsToTxn v4+ is the brokers' batched form (KIP-890); clients use v0-v3
VERSIONS_SERVED: dict[int, tuple[int, int]] = {API_KEYS["AddPartitionsToTxn"]: (0, 3)}
