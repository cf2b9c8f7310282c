"""One Kafka broker connection on asyncio: framing, correlation, ApiVersions negotiation.

:class:`BrokerConnection` is an ``asyncio.Protocol`` around the codec's sans-IO pieces: a
:class:`~pulsarwire.kafka.codec.FrameSplitter` bounded by ``receive.message.max.bytes`` (a
declared size over it, or negative, closes the connection with a typed error before a byte is
buffered for it — hostile sizes never drive allocation) and a
:class:`~pulsarwire.kafka.codec.Correlator` that numbers requests and matches answers. Each
request waits on a future keyed by its correlation id; the connection's end (EOF, reset, a
protocol error, ``close()``) fails every waiting request with :class:`ConnectionLost`, which is
retriable (``_TRANSPORT``).

On open the connection sends ApiVersions (v3, falling back to v0 if the broker answers in v0
as Kafka does for a version it does not know) and keeps, per API, the highest version both the
broker and the codec support (capped where this client relies on an older shape: Fetch at 12,
the last version that names topics). :meth:`version` gives it; an API the broker lacks raises
``_UNSUPPORTED_FEATURE``.
"""

from __future__ import annotations

import asyncio
import struct

from pulsarwire.kafka.client.errors import LOCAL_CODES, KafkaError, KafkaException
from pulsarwire.kafka.codec import Correlator, FrameSplitter, decode_response, encode_request, join, versions
from pulsarwire.kafka.codec.messages import API_NAMES, Body, response_correlation_id
from pulsarwire.kafka.errors import KafkaProtocolError, KafkaWireError

API_VERSIONS = 18
# the highest version of each API this client's code handles (the codec may know later ones)
# Metadata at 8: later versions add nothing this client reads, and librdkafka's mock cluster
# (2.16) writes one byte more than the spec in its flexible (v9+) Metadata answers
CLIENT_MAX = {1: 12, 3: 8}
_CID = struct.Struct(">i")
NEGOTIATION_CID = 0x7FFFFFFF  # ApiVersions on open; the Correlator numbers from 0


class ConnectionLost(KafkaException):
    """The connection to a broker ended while a request waited (retriable: ``_TRANSPORT``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(KafkaError(LOCAL_CODES["_TRANSPORT"], reason))


class BrokerConnection(asyncio.Protocol):
    """A connection to one broker (``label`` is host:port or the broker's node id, for errors)."""

    def __init__(self, label: str, client_id: str, max_frame_size: int) -> None:
        self.label = label
        self._splitter = FrameSplitter(max_frame_size)
        self._correlator = Correlator(client_id)
        self._waiting: dict[int, asyncio.Future[Body]] = {}
        self._transport: asyncio.Transport | None = None
        self._closed: Exception | None = None
        self._client_id = client_id
        self.versions: dict[int, int] = {}

    @classmethod
    async def open(
        cls, host: str, port: int, *, client_id: str, max_frame_size: int, timeout: float
    ) -> BrokerConnection:
        """Connect to ``host:port`` and negotiate API versions; raises ConnectionLost."""
        loop = asyncio.get_running_loop()
        label = f"{host}:{port}"
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: cls(label, client_id, max_frame_size), host, port
                )
                await conn._negotiate()
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"{label}: cannot connect: {exc or 'timed out'}") from None
        return conn

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._splitter.feed(data)
            for payload in self._splitter.frames():
                self._answer(payload)
        except KafkaWireError as exc:
            self.abort(ConnectionLost(f"{self.label}: {exc}; connection closed"))

    def eof_received(self) -> bool | None:
        self._finish(ConnectionLost(f"{self.label}: the broker closed the connection"))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(ConnectionLost(f"{self.label}: connection lost{f': {exc}' if exc else ''}"))

    # requests
    @property
    def is_closed(self) -> bool:
        return self._closed is not None

    def version(self, api_key: int) -> int:
        """The version to use for ``api_key``; raises KafkaException if the broker lacks it."""
        try:
            return self.versions[api_key]
        except KeyError:
            name = API_NAMES.get(api_key, str(api_key))
            raise KafkaException(
                KafkaError(
                    LOCAL_CODES["_UNSUPPORTED_FEATURE"],
                    f"{self.label}: broker does not support {name} in any version this client speaks",
                )
            ) from None

    async def request(
        self, api_key: int, body: Body, *, version: int | None = None, timeout: float = 30.0
    ) -> Body:
        """Send a request and wait for its answer's body; raises ConnectionLost or KafkaException."""
        fut = self.send(api_key, body, version=version)
        async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow a cancel
            return await fut

    def send(self, api_key: int, body: Body, *, version: int | None = None) -> asyncio.Future[Body]:
        """Send a request now; the future completes with the answer's body."""
        if self._closed is not None or self._transport is None:
            raise ConnectionLost(f"{self.label}: connection is closed")
        v = self.version(api_key) if version is None else version
        data = self._correlator.request(api_key, v, body)
        cid = _CID.unpack_from(data, 8)[0]
        fut: asyncio.Future[Body] = asyncio.get_running_loop().create_future()
        self._waiting[cid] = fut
        self._transport.write(data)
        return fut

    def close(self) -> None:
        self.abort(ConnectionLost(f"{self.label}: connection closed by the client"))

    def abort(self, exc: Exception) -> None:
        self._finish(exc)
        if self._transport is not None:
            self._transport.abort()

    # internals
    async def _negotiate(self) -> None:
        body: Body = {"client_software_name": "pulsarwire", "client_software_version": "1"}
        answer = await self._api_versions(3, body)
        if answer.get("error_code", 0) == 35:  # UNSUPPORTED_VERSION: the broker answered in v0
            answer = await self._api_versions(0, {})
        if answer.get("error_code", 0):
            raise KafkaException(KafkaError(answer["error_code"], f"{self.label}: ApiVersions refused"))
        for item in answer["api_keys"]:
            key = item["api_key"]
            try:
                lo, hi = versions(key)
            except KafkaWireError:
                continue
            hi = min(hi, CLIENT_MAX.get(key, hi), item["max_version"])
            if hi >= max(lo, item["min_version"]):
                self.versions[key] = hi

    async def _api_versions(self, version: int, body: Body) -> Body:
        """ApiVersions outside the Correlator: its answer may come in v0 whatever we asked."""
        if self._transport is None or self._closed is not None:
            raise ConnectionLost(f"{self.label}: connection is closed")
        fut: asyncio.Future[Body] = asyncio.get_running_loop().create_future()
        self._waiting[NEGOTIATION_CID] = fut
        self._transport.write(
            join(encode_request(API_VERSIONS, version, NEGOTIATION_CID, self._client_id, body))
        )
        return await fut

    def _answer(self, payload: bytes) -> None:
        cid = response_correlation_id(payload)
        if cid == NEGOTIATION_CID and NEGOTIATION_CID in self._waiting:
            body = _decode_api_versions(payload)
        else:
            body = self._correlator.response(payload).body
        fut = self._waiting.pop(cid, None)
        if fut is not None and not fut.done():
            fut.set_result(body)

    def _finish(self, exc: Exception) -> None:
        if self._closed is not None:
            return
        self._closed = exc
        waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(exc)


def _decode_api_versions(payload: bytes) -> Body:
    """An ApiVersions answer to our v3 (or v0) request. A broker that does not know v3 answers
    UNSUPPORTED_VERSION in a shape of its own (Kafka: v0; librdkafka's mock: neither): then only
    the error code, right after the correlation id, is read, and we ask again in v0."""
    for version in (3, 0):
        try:
            return decode_response(API_VERSIONS, version, payload)[1]
        except KafkaProtocolError:
            continue
    if len(payload) >= 6 and struct.unpack_from(">h", payload, 4)[0] == 35:
        return {"error_code": 35, "api_keys": []}
    raise KafkaProtocolError("ApiVersions answer is neither v3 nor v0")
