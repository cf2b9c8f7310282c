"""The Kafka admin client: confluent-kafka's ``AdminClient`` for topics.

``create_topics``, ``delete_topics`` and ``create_partitions`` send one request to the
controller (from Metadata) and return at once a dict of ``concurrent.futures.Future`` per topic,
as confluent-kafka does: ``result()`` is None on success and raises
:class:`~pulsarwire.kafka.client.errors.KafkaException` with Kafka's error code (and the broker's
message) otherwise. An ``operation_timeout`` of 0 (confluent-kafka's default) sends
``request.timeout.ms`` as the broker-side timeout (Kafka answers REQUEST_TIMED_OUT to 0).
``list_topics`` is the shared one (``ClusterMetadata``). A request that
cannot be sent at all (no broker, the broker lacks the API) fails every future with that error.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from typing import Any

from pulsarwire.kafka.client.base import ClientBase
from pulsarwire.kafka.client.errors import KafkaError, KafkaException
from pulsarwire.kafka.codec.messages import Body

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
Futures = dict[str, "concurrent.futures.Future[None]"]


class NewTopic:
    """A topic to create (confluent-kafka's ``NewTopic``); -1 counts take the broker's defaults."""

    def __init__(
        self,
        topic: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        replica_assignment: list[list[int]] | None = None,
        config: Mapping[str, str] | None = None,
    ) -> None:
        self.topic = topic
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignment = replica_assignment or []
        self.config = dict(config or {})


class NewPartitions:
    """A new total partition count for a topic (confluent-kafka's ``NewPartitions``)."""

    def __init__(
        self, topic: str, new_total_count: int, replica_assignment: list[list[int]] | None = None
    ) -> None:
        self.topic = topic
        self.new_total_count = new_total_count
        self.replica_assignment = replica_assignment


class AdminClient(ClientBase):
    """confluent-kafka's ``AdminClient``: topics and metadata."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        super().__init__(conf, "admin")

    def _controller_call(
        self, api_key: int, body: Body, names: list[str], results_key: str, timeout: float | None
    ) -> Futures:
        futures: Futures = {name: concurrent.futures.Future() for name in names}

        async def call() -> Body:
            if self._cluster.controller_id < 0:
                await self._cluster.refresh([])
            node = self._cluster.controller_id
            if node in self._cluster.brokers:
                return await self._cluster.request(node, api_key, body)
            return await self._cluster.any_request(api_key, body)

        try:
            answer = self._run(call(), timeout)
        except KafkaException as exc:
            for fut in futures.values():
                fut.set_exception(KafkaException(exc.error))
            return futures
        for item in answer[results_key]:
            found = futures.get(item["name"])
            if found is None or found.done():
                continue
            code = item["error_code"]
            if code:
                text = item.get("error_message") or KafkaError(code).str()
                found.set_exception(KafkaException(KafkaError(code, f"{item['name']}: {text}")))
            else:
                found.set_result(None)
        for name, fut in futures.items():
            if not fut.done():
                fut.set_exception(
                    KafkaException(KafkaError(-1, f"{name}: the broker's answer does not mention it"))
                )
        return futures

    def _op_timeout(self, operation_timeout: float) -> int:
        if operation_timeout > 0:
            return int(operation_timeout * 1000)
        return self._config.get_int("request.timeout.ms")

    def create_topics(
        self,
        new_topics: list[NewTopic],
        operation_timeout: float = 0,
        request_timeout: float | None = None,
        validate_only: bool = False,
    ) -> Futures:
        topics = [
            {
                "name": t.topic,
                "num_partitions": t.num_partitions,
                "replication_factor": t.replication_factor,
                "assignments": [
                    {"partition_index": i, "broker_ids": ids} for i, ids in enumerate(t.replica_assignment)
                ],
                "configs": [{"name": k, "value": v} for k, v in t.config.items()],
            }
            for t in new_topics
        ]
        body = {
            "topics": topics,
            "timeout_ms": self._op_timeout(operation_timeout),
            "validate_only": validate_only,
        }
        return self._controller_call(
            CREATE_TOPICS, body, [t.topic for t in new_topics], "topics", request_timeout
        )

    def delete_topics(
        self, topics: list[str], operation_timeout: float = 0, request_timeout: float | None = None
    ) -> Futures:
        body = {
            "topics": [{"name": t} for t in topics],
            "topic_names": list(topics),
            "timeout_ms": self._op_timeout(operation_timeout),
        }
        return self._controller_call(DELETE_TOPICS, body, list(topics), "responses", request_timeout)

    def create_partitions(
        self,
        new_partitions: list[NewPartitions],
        operation_timeout: float = 0,
        request_timeout: float | None = None,
        validate_only: bool = False,
    ) -> Futures:
        topics = [
            {
                "name": p.topic,
                "count": p.new_total_count,
                "assignments": None
                if p.replica_assignment is None
                else [{"broker_ids": ids} for ids in p.replica_assignment],
            }
            for p in new_partitions
        ]
        body = {
            "topics": topics,
            "timeout_ms": self._op_timeout(operation_timeout),
            "validate_only": validate_only,
        }
        return self._controller_call(
            CREATE_PARTITIONS, body, [p.topic for p in new_partitions], "results", request_timeout
        )

    def close(self) -> None:
        self._close_loop()
