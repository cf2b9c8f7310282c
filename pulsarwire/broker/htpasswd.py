"""Basic authentication (Pulsar's ``AuthenticationProviderBasic``): users and password hashes from an
htpasswd-style file.

A client sends ``auth_method_name = "basic"`` and ``auth_data = b"user:password"`` in CONNECT; the
role is the user. The file has one ``user:hash`` line per user (blank lines are skipped; Pulsar
refuses them). As Pulsar, exactly two hash forms can verify:

* ``$apr1$salt$hash`` -- Apache's MD5 (``htpasswd -m``): :func:`apr1_crypt`, written here from the
  published md5crypt algorithm with hashlib, no dependency;
* the traditional 13-character DES ``crypt(3)`` (``htpasswd -d``): checked with the standard
  library's ``crypt`` module (the C library's crypt; deprecated in Python 3.11, removed in 3.13:
  where it is missing, a DES line is refused when the file is read).

Pulsar checks every other line as DES with the hash's first two characters as the salt, so bcrypt
(``$2y$``, ``htpasswd -B``), ``$1$``, ``$5$`` and ``$6$`` lines can never log in there; here such a
line is refused when the file is read, naming the line, instead of failing every login.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pulsarwire.errors import AuthenticationError, PulsarWireError

from .auth import Identity, PeerCertificate

BASIC_METHOD = "basic"
APR1_MAGIC = "$apr1$"
_ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_DES_HASH = re.compile(r"[./0-9A-Za-z]{13}")
#: Longest ``user:password`` checked (bytes): hashing costs time in the password's length (an
#: $apr1$ hash runs MD5 a thousand times over it), so a longer one is refused unhashed.
MAX_CREDENTIAL_BYTES = 1024
#: Pulsar's answer to a wrong user or password (the same for both: nothing tells which was wrong)
REFUSED = "Unknown user or invalid password"


class PasswordFileError(PulsarWireError, ValueError):
    """A password file that cannot be read or holds a line no login could match."""


def apr1_crypt(password: bytes, salt: str) -> str:
    """``$apr1$salt$hash`` of ``password`` (Apache's MD5 crypt; the salt is cut to 8 characters)."""
    salt_b = salt[:8].encode()
    magic = APR1_MAGIC.encode()
    alternate = hashlib.md5(password + salt_b + password).digest()
    ctx = password + magic + salt_b
    for left in range(len(password), 0, -16):
        ctx += alternate[: min(16, left)]
    n = len(password)
    while n:
        ctx += b"\0" if n & 1 else password[:1]
        n >>= 1
    digest = hashlib.md5(ctx).digest()
    for i in range(1000):
        round_ = password if i & 1 else digest
        if i % 3:
            round_ += salt_b
        if i % 7:
            round_ += password
        round_ += digest if i & 1 else password
        digest = hashlib.md5(round_).digest()
    out = []
    for a, b, c in ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)):
        out.append(_to64((digest[a] << 16) | (digest[b] << 8) | digest[c], 4))
    out.append(_to64(digest[11], 2))
    return f"{APR1_MAGIC}{salt[:8]}${''.join(out)}"


def _to64(value: int, count: int) -> str:
    chars = []
    for _ in range(count):
        chars.append(_ITOA64[value & 0x3F])
        value >>= 6
    return "".join(chars)


def system_crypt() -> Callable[[str, str], str] | None:
    """The C library's crypt(3) through the standard ``crypt`` module, None where it is gone."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt
        except ImportError:
            return None
    return crypt.crypt


def _check(stored: str, password: str) -> bool:
    if stored.startswith(APR1_MAGIC[:-1]):  # as Pulsar: "$apr1", then exactly $apr1$salt$hash
        parts = stored.split("$")
        return len(parts) == 4 and hmac.compare_digest(stored, apr1_crypt(password.encode(), parts[2]))
    des = system_crypt()
    computed = des(password, stored[:2]) if des is not None else None
    return computed is not None and hmac.compare_digest(stored, computed)


@dataclass
class BasicAuth:
    """The ``basic`` provider: ``users`` maps a user to its hash (see the module docstring)."""

    users: dict[str, str] = field(default_factory=dict)
    method = BASIC_METHOD

    @classmethod
    def from_file(cls, path: str | Path) -> BasicAuth:
        """Read an htpasswd-style file; raises PasswordFileError naming the file and line."""
        try:
            text = Path(path).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise PasswordFileError(f"cannot read the password file {path}: {reason}") from None
        users: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            parts = line.split(":")
            if len(parts) != 2 or not parts[0]:
                raise PasswordFileError(f"{path}:{number}: expected user:hash")
            user, stored = parts
            refusal = hash_refusal(stored)
            if refusal is not None:
                raise PasswordFileError(f"{path}:{number}: user {user}: {refusal}")
            users[user] = stored
        return cls(users)

    def verify(self, data: bytes, now: float, peer_cert: PeerCertificate = None) -> Identity:
        """The user's identity for ``user:password``; raises AuthenticationError (also, without
        hashing anything, for one over :data:`MAX_CREDENTIAL_BYTES`)."""
        if len(data) > MAX_CREDENTIAL_BYTES:
            raise AuthenticationError(REFUSED)
        try:
            params = data.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationError(REFUSED) from None
        parts = params.split(":")
        if len(parts) != 2:  # as Pulsar: a password holding ':' cannot be sent
            raise AuthenticationError("Base64 decoded params are invalid")
        user, password = parts
        stored = self.users.get(user)
        if stored is None or not _check(stored, password):
            raise AuthenticationError(REFUSED)
        return Identity(user, None)


def hash_refusal(stored: str) -> str | None:
    """Why a stored hash can never verify as Pulsar checks it (None when it can)."""
    if stored.startswith(APR1_MAGIC[:-1]):
        return None if len(stored.split("$")) == 4 else "an $apr1$ hash is $apr1$salt$hash"
    if stored.startswith("$2"):
        return (
            "bcrypt hashes are not accepted by Pulsar's basic provider: use htpasswd -m (apr1) or -d (crypt)"
        )
    if not _DES_HASH.fullmatch(stored):
        return (
            "not an $apr1$ or a 13-character crypt(3) hash (Pulsar accepts only these): use htpasswd -m or -d"
        )
    if system_crypt() is None:
        return "crypt(3) hashes need Python's crypt module (gone since Python 3.13): use htpasswd -m (apr1)"
    return None
