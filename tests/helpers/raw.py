"""A bare protocol connection for tests: a socket, our encoder and FrameDecoder, no client logic."""

from __future__ import annotations

import socket
import time
from typing import Any

from pulsarwire.codec import Frame, FrameDecoder, encode_command, new_command
from pulsarwire.proto import pb


class RawConnection:
    def __init__(self, host: str, port: int, *, connect: bool = True, token: str | None = None) -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.decoder = FrameDecoder()
        self.frames: list[Frame] = []
        self.closed = False
        if connect:
            cmd, c = new_command(pb.BaseCommand.CONNECT)
            c.client_version = "pulsarwire-tests"
            c.protocol_version = 21
            if token is not None:
                c.auth_method_name = "token"
                c.auth_data = token.encode()
            self.send(cmd)
            assert self.expect(pb.BaseCommand.CONNECTED).type == pb.BaseCommand.CONNECTED

    @classmethod
    def to(cls, service_url: str, **kw: Any) -> RawConnection:
        host, port = service_url.split("://", 1)[1].rsplit(":", 1)
        return cls(host, int(port), **kw)

    def send(self, cmd: pb.BaseCommand) -> None:
        self.sock.sendall(encode_command(cmd))

    def _read(self, timeout: float) -> None:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return
        except ConnectionResetError:  # closed by the peer with unread bytes on its side
            data = b""
        if not data:
            self.closed = True
            return
        self.decoder.feed(data)
        self.frames.extend(self.decoder)

    def expect(self, type_: int, timeout: float = 5.0) -> Frame:
        """Wait for the next frame of ``type_`` (other frames are kept in ``frames``)."""
        deadline = time.monotonic() + timeout
        while True:
            for i, f in enumerate(self.frames):
                if f.type == type_:
                    return self.frames.pop(i)
            if self.closed or time.monotonic() > deadline:
                raise AssertionError(f"no {pb.BaseCommand.Type.Name(type_)} frame (closed={self.closed})")
            self._read(max(0.01, deadline - time.monotonic()))

    def wait_closed(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.closed and time.monotonic() < deadline:
            self._read(0.05)
        return self.closed

    def close(self) -> None:
        self.sock.close()
