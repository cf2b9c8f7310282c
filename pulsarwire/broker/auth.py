"""Token authentication for the broker: static token lists and JWT (HS256) tokens.

A client sends ``auth_method_name = "token"`` and the token as ``auth_data``
in CONNECT (and again in AUTH_RESPONSE when challenged). :class:`TokenAuth`
decides whether a token is valid now and when it stops being valid, so the
connection can send AUTH_CHALLENGE at that moment and expect a fresh token.

JWTs are checked with the standard library's HMAC-SHA256 (the only algorithm
accepted, as a broker configured with a secret key accepts); the ``sub``
claim is the role, ``exp`` (seconds since the epoch) the expiry.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from pathlib import Path

from pulsarwire.errors import AuthenticationError

#: What Pulsar's broker sends as challenge data to ask for a refreshed credential.
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"
TOKEN_METHOD = "token"


def _b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_jwt(secret: bytes, subject: str, expires_at: float | None = None) -> str:
    """Create an HS256 JWT (for tests and the token tooling)."""
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims: dict[str, object] = {"sub": subject}
    if expires_at is not None:
        claims["exp"] = int(expires_at)
    body = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    signing_input = f"{header}.{body}".encode()
    sig = hmac.new(secret, signing_input, hashlib.sha256).digest()
    return f"{header}.{body}.{_b64url(sig)}"


@dataclass(frozen=True, slots=True)
class Identity:
    role: str
    expires_at: float | None  # seconds since the epoch


@dataclass
class TokenAuth:
    """Validates tokens: ``secret`` for HS256 JWTs, ``tokens`` for a fixed list (token → role)."""

    secret: bytes | None = None
    tokens: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_files(cls, secret: str | None = None, tokens_file: str | Path | None = None) -> TokenAuth:
        """``secret`` is the key itself or ``file:PATH``; the tokens file has one ``token [role]`` a line."""
        key: bytes | None = None
        if secret is not None:
            key = Path(secret[5:]).read_bytes().strip() if secret.startswith("file:") else secret.encode()
        tokens: dict[str, str] = {}
        if tokens_file is not None:
            for line in Path(tokens_file).read_text().splitlines():
                parts = line.split()
                if parts and not parts[0].startswith("#"):
                    tokens[parts[0]] = parts[1] if len(parts) > 1 else parts[0][:16]
        return cls(key, tokens)

    def authenticate(self, method: str, data: bytes, now: float) -> Identity:
        """Return the identity for a credential; raises AuthenticationError."""
        if method != TOKEN_METHOD:
            raise AuthenticationError(f"authentication method {method or '(none)'!r} is not accepted")
        token = data.decode("utf-8", "replace").strip()
        if token.startswith("token:"):
            token = token[6:]
        if token in self.tokens:
            return Identity(self.tokens[token], None)
        if self.secret is None:
            raise AuthenticationError("unknown token")
        return self._verify_jwt(token, now)

    def _verify_jwt(self, token: str, now: float) -> Identity:
        parts = token.split(".")
        if len(parts) != 3:
            raise AuthenticationError("token is not a JWT")
        try:
            header = json.loads(_b64url_decode(parts[0]))
            claims = json.loads(_b64url_decode(parts[1]))
            signature = _b64url_decode(parts[2])
        except (ValueError, UnicodeDecodeError):
            raise AuthenticationError("token is not a well-formed JWT") from None
        if not isinstance(header, dict) or header.get("alg") != "HS256" or not isinstance(claims, dict):
            raise AuthenticationError("only HS256 JWTs are accepted")
        assert self.secret is not None
        expected = hmac.new(self.secret, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(expected, signature):
            raise AuthenticationError("token signature does not verify")
        exp = claims.get("exp")
        if exp is not None and not isinstance(exp, int | float):
            raise AuthenticationError("token 'exp' claim is not a number")
        if exp is not None and exp <= now:
            raise AuthenticationError("token has expired")
        role = claims.get("sub")
        if not isinstance(role, str):
            raise AuthenticationError("token has no 'sub' role")
        return Identity(role, float(exp) if exp is not None else None)
