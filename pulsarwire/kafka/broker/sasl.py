"""SASL authentication for the Kafka broker: SaslHandshake + SaslAuthenticate with PLAIN and
SCRAM-SHA-256/512, users from a file.

Turned on by ``--sasl-users FILE`` (``Broker(sasl_users=PATH)``): then every connection must
authenticate before anything but ApiVersions, SaslHandshake and SaslAuthenticate -- any other
request closes the connection, as Kafka's ``SaslServerAuthenticator`` does. The mechanisms
offered are ``--sasl-mechanisms`` (all three by default).

Users file: one user a line, ``NAME:PASSWORD`` (the name up to the first colon, the password the
rest of the line, kept as written); blank lines and lines starting with ``#`` are skipped.
A name may not hold ``:``, a password may. The SCRAM credentials (salt, StoredKey, ServerKey,
RFC 5802) are derived from each password when the file is loaded, with ``hashlib.pbkdf2_hmac``,
a random 16-byte salt per user and mechanism and :data:`SCRAM_ITERATIONS` iterations (Kafka's
minimum); only they and a SHA-256 digest of the password stay in memory.

The exchange (:class:`SaslExchange`, one per connection in ``session.data``):

- PLAIN (RFC 4616): one message ``authzid NUL authcid NUL password``; an authzid other than
  empty or the user's own name is refused, as Kafka's ``PlainSaslServer``.
- SCRAM (RFC 5802 / 7677): client-first (``n,,n=USER,r=NONCE``; channel binding ``p=`` and
  ``tokenauth`` extensions refused), server-first (``r=NONCE+OURS,s=SALT,i=ITERATIONS``),
  client-final (``c=biws,r=...,p=PROOF``) checked against StoredKey, server-final
  (``v=SIGNATURE``). An unknown user gets a made-up salt and fails at the proof, like a wrong
  password, so user names cannot be probed.

Comparisons are constant-time (``hmac.compare_digest``). A failed login is answered
SASL_AUTHENTICATION_FAILED with Kafka's message and the connection is closed 100 ms after the
answer (Kafka's ``connection.failed.authentication.delay.ms``, so the client reads it first);
the log names the user and mechanism, never a password, proof or nonce. The authenticated
principal is ``User:NAME`` (``session.principal``), what ACL grants name.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarwire.errors import PulsarWireError
from pulsarwire.kafka.codec import API_KEYS
from pulsarwire.kafka.errors import ERROR_CODES as E

if TYPE_CHECKING:
    from pulsarwire.kafka.broker.context import RequestContext
    from pulsarwire.kafka.broker.server import Handler
    from pulsarwire.kafka.broker.state import BrokerState

log = logging.getLogger(__name__)

Body = dict[str, Any]
PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
SCRAM_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
#: Kafka's minimum for SCRAM credentials (ScramMechanism.minIterations)
SCRAM_ITERATIONS = 4096
EXTENSION = "sasl"
#: the request keys an unauthenticated connection may send
BEFORE_AUTH = frozenset({API_KEYS["ApiVersions"], API_KEYS["SaslHandshake"], API_KEYS["SaslAuthenticate"]})
#: session.data key the core reads to close a connection this many seconds after its answer
CLOSE_AFTER_ANSWER = "close_after_answer"
#: Kafka's connection.failed.authentication.delay.ms (100 ms): the client reads the answer first
CLOSE_DELAY = 0.1
#: the longest user name accepted (a longer one is a failed login, not an allocation)
MAX_NAME = 1024

PLAIN_FAILED = "Authentication failed: Invalid username or password"


class SaslConfigError(PulsarWireError, ValueError):
    """The users file or the mechanism list is unusable (the message names the file and line)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def scram_credential(password: str, hash_name: str, salt: bytes, iterations: int) -> ScramCredential:
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    return ScramCredential(
        salt,
        iterations,
        hashlib.new(hash_name, client_key).digest(),
        hmac.digest(salted, b"Server Key", hash_name),
    )


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password_sha256: bytes
    scram: Mapping[str, ScramCredential]


class Users:
    """The users of a users file (see the module docstring), credentials derived at load."""

    def __init__(self, users: Mapping[str, User], mechanisms: tuple[str, ...]) -> None:
        self.users = dict(users)
        self.mechanisms = mechanisms
        self._fake_key = secrets.token_bytes(32)

    @classmethod
    def from_passwords(
        cls,
        passwords: Mapping[str, str],
        mechanisms: tuple[str, ...] = MECHANISMS,
        iterations: int = SCRAM_ITERATIONS,
    ) -> Users:
        users = {}
        for name, password in passwords.items():
            scram = {
                mech: scram_credential(password, SCRAM_HASHES[mech], os.urandom(16), iterations)
                for mech in mechanisms
                if mech in SCRAM_HASHES
            }
            users[name] = User(name, hashlib.sha256(password.encode("utf-8")).digest(), scram)
        return cls(users, mechanisms)

    @classmethod
    def load(cls, path: Path, mechanisms: tuple[str, ...] = MECHANISMS) -> Users:
        """Read a users file; raises SaslConfigError naming the file (and line) on a bad one."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SaslConfigError(f"{path}: cannot read the SASL users file: {exc}") from None
        passwords: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, sep, password = line.partition(":")
            if not sep or not name or not password:
                raise SaslConfigError(f"{path}:{number}: a user line reads NAME:PASSWORD")
            if name in passwords:
                raise SaslConfigError(f"{path}:{number}: user {name!r} is listed twice")
            passwords[name] = password
        if not passwords:
            raise SaslConfigError(f"{path}: the SASL users file names no user")
        return cls.from_passwords(passwords, mechanisms)

    def check_plain(self, name: str, password: str) -> bool:
        user = self.users.get(name)
        given = hashlib.sha256(password.encode("utf-8")).digest()
        expected = user.password_sha256 if user is not None else hashlib.sha256(b"\0no-such-user").digest()
        return hmac.compare_digest(given, expected) and user is not None

    def scram(self, name: str, mechanism: str) -> tuple[ScramCredential, bool]:
        """The user's credential, or a made-up one (same salt every time) and False."""
        user = self.users.get(name)
        if user is not None and mechanism in user.scram:
            return user.scram[mechanism], True
        hash_name = SCRAM_HASHES[mechanism]
        salt = hmac.digest(self._fake_key, name.encode("utf-8"), "sha256")[:16]
        size = hashlib.new(hash_name).digest_size
        return ScramCredential(salt, SCRAM_ITERATIONS, bytes(size), bytes(size)), False


class SaslFailure(Exception):
    """A failed login: ``message`` goes to the client (it holds no credential)."""

    def __init__(self, message: str, code: str = "SASL_AUTHENTICATION_FAILED") -> None:
        super().__init__(message)
        self.message = message
        self.code = E[code]


def _saslname(text: str) -> str:
    """RFC 5802's saslname: ``=2C`` is ``,``, ``=3D`` is ``=``; any other ``=`` is an error."""
    out = []
    i = 0
    while i < len(text):
        if text[i] == "=":
            code = text[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise SaslFailure("Authentication failed: invalid user name encoding")
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _attributes(text: str) -> list[tuple[str, str]]:
    pairs = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslFailure("Authentication failed: malformed SCRAM message")
        pairs.append((key, value))
    return pairs


class SaslExchange:
    """One connection's login with one mechanism (see the module docstring)."""

    def __init__(self, users: Users, mechanism: str) -> None:
        self.users = users
        self.mechanism = mechanism
        self.user: str | None = None
        self.done = False
        self._step = 0
        self._gs2 = ""
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._known = False

    def step(self, data: bytes) -> bytes:
        """Consume the client's message; returns ours. Raises SaslFailure; sets ``done``/``user``."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Authentication failed: the SASL message is not UTF-8") from None
        if self.mechanism == PLAIN:
            return self._plain(text)
        if self._step == 0:
            return self._scram_first(text)
        if self._step == 1:
            return self._scram_final(text)
        raise SaslFailure("Authentication failed: unexpected SCRAM message", "ILLEGAL_SASL_STATE")

    def _plain(self, text: str) -> bytes:
        parts = text.split("\0")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, name, password = parts
        self.user = name[:MAX_NAME]  # for the log line of a failure (never the password)
        if not name or not password:
            raise SaslFailure(PLAIN_FAILED)
        if authzid and authzid != name:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        if len(name) > MAX_NAME or not self.users.check_plain(name, password):
            raise SaslFailure(PLAIN_FAILED)
        self.done = True
        return b""

    def _scram_first(self, text: str) -> bytes:
        cbind, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or cbind not in ("n", "y"):
            # "p=...": channel binding, which Kafka does not support either
            raise SaslFailure("Authentication failed: invalid SCRAM client-first message")
        attributes = _attributes(bare)
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r" or not attributes[1][1]:
            raise SaslFailure("Authentication failed: invalid SCRAM client-first message")
        name = _saslname(attributes[0][1])
        extensions = dict(attributes[2:])
        if extensions.get("t") is not None or "tokenauth" in bare:
            raise SaslFailure("Authentication failed: delegation tokens are not supported")
        if authzid and (not authzid.startswith("a=") or _saslname(authzid[2:]) != name):
            raise SaslFailure("Authentication failed: Authorization id does not match user name")
        if not name or len(name) > MAX_NAME:
            raise SaslFailure(self._scram_failed())
        self.user = name
        self._gs2 = f"{cbind},{authzid},"
        self._first_bare = bare
        self._credential, self._known = self.users.scram(name, self.mechanism)
        self._nonce = attributes[1][1] + secrets.token_urlsafe(24)
        salt = base64.b64encode(self._credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        self._step = 1
        return self._server_first.encode("ascii")

    def _scram_failed(self) -> str:
        return (
            "Authentication failed during authentication due to invalid credentials with SASL mechanism "
            + self.mechanism
        )

    def _scram_final(self, text: str) -> bytes:
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise SaslFailure("Authentication failed: invalid SCRAM client-final message")
        attributes = dict(_attributes(without_proof))
        expected_c = base64.b64encode(self._gs2.encode("utf-8")).decode("ascii")
        if attributes.get("c") != expected_c or attributes.get("r") != self._nonce:
            raise SaslFailure("Authentication failed: invalid SCRAM client-final message")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:
            raise SaslFailure("Authentication failed: invalid SCRAM client proof") from None
        credential = self._credential
        assert credential is not None
        hash_name = SCRAM_HASHES[self.mechanism]
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(credential.stored_key, auth_message, hash_name)
        if len(proof) != len(signature):
            raise SaslFailure(self._scram_failed())
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        ok = hmac.compare_digest(hashlib.new(hash_name, client_key).digest(), credential.stored_key)
        if not (ok and self._known):
            raise SaslFailure(self._scram_failed())
        server_signature = hmac.digest(credential.server_key, auth_message, hash_name)
        self._step = 2
        self.done = True
        return b"v=" + base64.b64encode(server_signature)


# -- broker plugin -------------------------------------------------------------------------------


def _users(ctx: RequestContext) -> Users | None:
    users: Users | None = ctx.broker.extensions.get(EXTENSION)
    return users


async def sasl_handshake(ctx: RequestContext, body: Body) -> Body:
    users = _users(ctx)
    offered = list(users.mechanisms) if users is not None else []
    mechanism = body["mechanism"]
    if users is None or mechanism not in users.mechanisms:
        ctx.session.data[CLOSE_AFTER_ANSWER] = CLOSE_DELAY
        return {"error_code": E["UNSUPPORTED_SASL_MECHANISM"], "mechanisms": offered}
    if ctx.session.authenticated or ctx.api_version < 1:
        # re-authentication (KIP-368) is not offered; v0 would send raw tokens we do not frame
        ctx.session.data[CLOSE_AFTER_ANSWER] = CLOSE_DELAY
        return {"error_code": E["ILLEGAL_SASL_STATE"], "mechanisms": offered}
    ctx.session.data[EXTENSION] = SaslExchange(users, mechanism)
    return {"error_code": 0, "mechanisms": offered}


async def sasl_authenticate(ctx: RequestContext, body: Body) -> Body:
    exchange: SaslExchange | None = ctx.session.data.get(EXTENSION)
    if exchange is None or exchange.done or ctx.session.authenticated:
        ctx.session.data[CLOSE_AFTER_ANSWER] = CLOSE_DELAY
        return {
            "error_code": E["ILLEGAL_SASL_STATE"],
            "error_message": "SaslAuthenticate without a SaslHandshake before it",
            "auth_bytes": b"",
            "session_lifetime_ms": 0,
        }
    try:
        answer = exchange.step(body["auth_bytes"])
    except SaslFailure as exc:
        log.info(
            "connection %s: SASL %s login of %r failed", ctx.session.peer, exchange.mechanism, exchange.user
        )
        ctx.session.data.pop(EXTENSION, None)
        ctx.session.data[CLOSE_AFTER_ANSWER] = CLOSE_DELAY
        return {
            "error_code": exc.code,
            "error_message": exc.message,
            "auth_bytes": b"",
            "session_lifetime_ms": 0,
        }
    if exchange.done:
        ctx.session.principal = f"User:{exchange.user}"
        ctx.session.authenticated = True
        ctx.session.data.pop(EXTENSION, None)
        log.info(
            "connection %s: authenticated as %s (%s)", ctx.session.peer, exchange.user, exchange.mechanism
        )
    return {"error_code": 0, "error_message": None, "auth_bytes": answer, "session_lifetime_ms": 0}


def permits(ctx: RequestContext) -> bool:
    """The request gate: before authentication only ApiVersions and the SASL requests pass."""
    return ctx.session.authenticated or ctx.api_key in BEFORE_AUTH


def handlers() -> dict[int, Handler]:
    return {API_KEYS["SaslHandshake"]: sasl_handshake, API_KEYS["SaslAuthenticate"]: sasl_authenticate}


def _mechanisms(text: str) -> tuple[str, ...]:
    names = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    unknown = [m for m in names if m not in MECHANISMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown SASL mechanism {unknown[0] if unknown else text!r} (use {', '.join(MECHANISMS)})"
        )
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("SASL authentication")
    group.add_argument(
        "--sasl-users",
        type=Path,
        metavar="FILE",
        help="require SASL: users as NAME:PASSWORD lines (see docs/kafka.md); every connection must log in",
    )
    group.add_argument(
        "--sasl-mechanisms",
        type=_mechanisms,
        default=MECHANISMS,
        metavar="LIST",
        help=f"mechanisms offered, comma-separated (default {','.join(MECHANISMS)})",
    )


def attach(state: BrokerState) -> None:
    """With ``sasl_users`` set: load the users (raises SaslConfigError) and gate requests."""
    extra = state.config.extra
    path = extra.get("sasl_users")
    if path is None:
        return
    mechanisms = extra.get("sasl_mechanisms") or MECHANISMS
    if isinstance(mechanisms, str):
        mechanisms = _mechanisms(mechanisms)
    state.extensions[EXTENSION] = Users.load(Path(path), tuple(mechanisms))
    state.request_gates.append(permits)
    from pulsarwire.kafka.broker.server import register

    # v0 is followed by raw SASL tokens outside Kafka's framing: only v1 is offered
    register(API_KEYS["SaslHandshake"], sasl_handshake, (1, 1))
