"""A TCP proxy between clients and a broker that understands Pulsar frames, for fault tests.

``FaultProxy(upstream)`` listens on a free loopback port and forwards every connection to
``upstream`` (a ``pulsar://host:port`` URL), frame by frame. Rules act on chosen frames:

* ``drop(command, direction, count)`` — swallow the next ``count`` frames of that type;
* ``delay(command, direction, seconds, count)`` — hold them back (frames behind them wait too:
  a TCP stream never reorders);
* ``corrupt(command, direction, count)`` — flip a byte of the payload (a CRC32C mismatch);
* ``cut_after(command, direction, count)`` — close both sides right after forwarding the
  ``count``-th such frame (a connection lost in the middle of a batch).

``cut()`` closes every connection now. ``half_open(seconds)`` closes the client sides but keeps
the broker sides open for ``seconds`` — the broker keeps believing the client is there (as
after a network partition), so a reconnecting Exclusive consumer meets ConsumerBusy.

Directions are ``"to_broker"`` and ``"to_client"``; commands are BaseCommand type names
(``"SEND"``, ``"MESSAGE"``, ``"SEND_RECEIPT"``, ...). ``seen`` counts forwarded frames by
(direction, command). Like a Pulsar proxy, it sets ``proxy_through_service_url`` in lookup
answers, so clients keep reaching their topics through it.
The proxy runs its own event loop in a thread; every method is thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pulsarwire.codec.frames import decode_command, encode_command, split_frame
from pulsarwire.proto import pb

DIRECTIONS = ("to_broker", "to_client")


@dataclass
class Rule:
    action: str  # drop | delay | corrupt | cut_after
    command: str
    direction: str
    count: int
    seconds: float = 0.0

    def matches(self, direction: str, command: str) -> bool:
        return self.count > 0 and self.direction == direction and self.command == command


class _Pair:
    """One client connection and its broker connection."""

    def __init__(self, client_w: asyncio.StreamWriter, broker_w: asyncio.StreamWriter) -> None:
        self.writers = {"to_broker": broker_w, "to_client": client_w}
        self.tasks: list[asyncio.Task[None]] = []
        self.holding = False  # half-open: the broker side stays up after the client side went

    def close(self, direction: str | None = None) -> None:
        for d, w in self.writers.items():
            if direction is None or d == direction:
                with contextlib.suppress(Exception):
                    w.transport.abort()


class FaultProxy:
    """See the module docstring. Use as a context manager or call start()/stop()."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0) -> None:
        hostport = upstream.split("://", 1)[-1].rstrip("/")
        self.upstream_host, _, up_port = hostport.rpartition(":")
        self.upstream_port = int(up_port)
        self.host = host
        self.port = port
        self.seen: Counter[tuple[str, str]] = Counter()
        self.rules: list[Rule] = []
        self.connections = 0
        self._pairs: set[_Pair] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread.start()
        self._server = self._call(self._listen())
        return self

    def stop(self) -> None:
        if self._server is None:
            return

        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for pair in list(self._pairs):
                pair.close()
            await asyncio.sleep(0)

        self._call(shutdown())
        self._server = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.host}:{self.port}"

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _listen(self) -> asyncio.base_events.Server:
        server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = server.sockets[0].getsockname()[1]
        return server

    # -- rules -----------------------------------------------------------------------
    def _add(self, rule: Rule) -> None:
        if rule.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {rule.direction!r}")
        pb.BaseCommand.Type.Value(rule.command)  # raises ValueError for an unknown command
        with self._lock:
            self.rules.append(rule)

    def drop(self, command: str, direction: str = "to_client", count: int = 1) -> None:
        self._add(Rule("drop", command, direction, count))

    def delay(self, command: str, direction: str = "to_client", seconds: float = 1.0, count: int = 1) -> None:
        self._add(Rule("delay", command, direction, count, seconds))

    def corrupt(self, command: str = "MESSAGE", direction: str = "to_client", count: int = 1) -> None:
        self._add(Rule("corrupt", command, direction, count))

    def cut_after(self, command: str, direction: str = "to_broker", count: int = 1) -> None:
        """Close the connection right after the ``count``-th such frame went through."""
        self._add(Rule("cut_after", command, direction, 1, float(count)))

    def pending_rules(self) -> int:
        with self._lock:
            return sum(1 for r in self.rules if r.count > 0)

    def cut(self) -> int:
        """Close every connection (both sides) now; returns how many."""

        async def go() -> int:
            pairs = list(self._pairs)
            for pair in pairs:
                pair.close()
            return len(pairs)

        return int(self._call(go()))

    def half_open(self, seconds: float) -> int:
        """Close the client sides now and the broker sides ``seconds`` later."""

        async def go() -> int:
            pairs = list(self._pairs)
            for pair in pairs:
                pair.holding = True
                pair.close("to_client")

            def release() -> None:
                for pair in pairs:
                    pair.close()

            self._loop.call_later(seconds, release)
            return len(pairs)

        return int(self._call(go()))

    # -- forwarding ------------------------------------------------------------------
    def _take(self, direction: str, command: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(direction, command):
                    if rule.action == "cut_after":
                        rule.seconds -= 1
                        if rule.seconds > 0:
                            return None
                    rule.count -= 1
                    return rule
        return None

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            broker_r, broker_w = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError:
            client_w.transport.abort()
            return
        self.connections += 1
        pair = _Pair(client_w, broker_w)
        self._pairs.add(pair)
        pair.tasks = [
            asyncio.ensure_future(self._pump(client_r, broker_w, "to_broker", pair)),
            asyncio.ensure_future(self._pump(broker_r, client_w, "to_client", pair)),
        ]
        await asyncio.gather(*pair.tasks, return_exceptions=True)
        self._pairs.discard(pair)
        if not pair.holding:
            pair.close()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str, pair: _Pair
    ) -> None:
        buf = bytearray()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                buf += data
                for frame in _frames(buf):
                    if not await self._forward(frame, writer, direction, pair):
                        return
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not pair.holding:
                pair.close()

    async def _forward(self, frame: bytes, writer: asyncio.StreamWriter, direction: str, pair: _Pair) -> bool:
        """Forward one frame under the rules; False when the connection was cut."""
        command = _command_name(frame)
        if command == "LOOKUP_RESPONSE":
            frame = _through_proxy(frame)
        rule = self._take(direction, command)
        if rule is not None and rule.action == "drop":
            return True
        if rule is not None and rule.action == "delay":
            await writer.drain()
            await asyncio.sleep(rule.seconds)
        if rule is not None and rule.action == "corrupt":
            frame = frame[:-1] + bytes([frame[-1] ^ 0xFF])
        writer.write(frame)
        self.seen[(direction, command)] += 1
        if rule is not None and rule.action == "cut_after":
            await writer.drain()
            pair.close()
            return False
        return True


def _frames(buf: bytearray) -> Iterator[bytes]:
    """Whole frames off the front of ``buf`` (consumed), in order."""
    while True:
        size = split_frame(buf)
        if size is None:
            return
        frame = bytes(buf[:size])
        del buf[:size]
        yield frame


def _through_proxy(frame: bytes) -> bytes:
    """A lookup answer telling the client to reach the topic through us (as a Pulsar proxy does)."""
    cmd = decode_command(frame[8 : 8 + int.from_bytes(frame[4:8], "big")])
    cmd.lookupTopicResponse.proxy_through_service_url = True
    return encode_command(cmd)


def _command_name(frame: bytes) -> str:
    cmd_size = int.from_bytes(frame[4:8], "big")
    try:
        return str(pb.BaseCommand.Type.Name(decode_command(frame[8 : 8 + cmd_size]).type))
    except Exception:  # not ours to judge: forward it, the peer will reject it
        return "UNKNOWN"
