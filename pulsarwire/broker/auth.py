"""Authentication for the broker: tokens (JWTs verified with PyJWT, or a static list), TLS client
certificates, and an anonymous role -- several at once, as Pulsar's ``authenticationProviders``.

A client names its method in CONNECT (``auth_method_name``) and :class:`Authentication` hands the
credential to the provider of that method, as Pulsar's ``AuthenticationService`` does:

* ``token`` -- :class:`TokenAuth` (Pulsar's ``AuthenticationProviderToken``), below;
* ``tls`` -- :class:`TlsAuth` (``AuthenticationProviderTls``): the role is the common name (CN)
  of the certificate the client presented in the TLS handshake (the last CN of the subject, the
  first in its RFC 2253 form, as Java reads it); a client without one is refused;
* ``basic`` -- :class:`~pulsarwire.broker.htpasswd.BasicAuth` (``AuthenticationProviderBasic``):
  ``user:password`` checked against an htpasswd-style file, the role is the user;
* any other method, or none: the anonymous role when one is configured (Pulsar's
  ``anonymousUserRole``), else AuthenticationError. A credential for a configured method that
  does not verify is refused, never taken for anonymous.

A token client sends ``auth_method_name = "token"`` and the token as ``auth_data`` in CONNECT (and
again in AUTH_RESPONSE when challenged). :class:`TokenAuth` decides whether a token is valid
now and until when, so the connection can send AUTH_CHALLENGE at that moment and expect a
fresh token.

JWTs are checked as Apache Pulsar's ``AuthenticationProviderToken`` does:

* the broker holds either a secret key (HS256/HS384/HS512 tokens) or a public key (RSA: RS*/PS*
  tokens; EC: the ES* algorithm of its curve). Only the algorithms of the key's kind are
  accepted, so a broker with an RSA public key never accepts an HS256 token "signed" with that
  public key (algorithm confusion);
* the role is the ``sub`` claim (Pulsar's default ``tokenAuthClaim``); ``exp`` and ``nbf`` are
  honoured (no clock skew, as Pulsar's default); ``aud`` is not checked (Pulsar checks it only
  when ``tokenAudienceClaim`` is configured, which this broker does not offer);
* a secret key shorter than 256 bits is refused at start, as Pulsar (``Keys.hmacShaKeyFor``) does.

Keys are given as Pulsar's ``tokenSecretKey`` / ``tokenPublicKey`` settings are (:func:`read_key`,
as ``AuthTokenUtils.readKeyFromUrl``): a ``data:`` URL (``data:;base64,...``), a ``file:`` URL, the
path of an existing file (its bytes exactly as stored: nothing is stripped, so a key ending in a
newline byte stays that key), or the key itself in base64. Public keys are X.509
SubjectPublicKeyInfo, DER as Pulsar writes them (``pulsar tokens create-key-pair``) or PEM.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import jwt

from pulsarwire.errors import AuthenticationError, PulsarWireError

#: What Pulsar's broker sends as challenge data to ask for a refreshed credential.
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"
TOKEN_METHOD = "token"
TLS_METHOD = "tls"
#: Pulsar refuses HMAC keys shorter than this (JJWT's ``Keys.hmacShaKeyFor``: 256 bits for HS256).
MIN_SECRET_BYTES = 32
HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGORITHMS = {"secp256r1": ("ES256",), "secp384r1": ("ES384",), "secp521r1": ("ES512",)}

#: ``data:[<mediatype>][;charset=...][;base64],<data>`` (as Pulsar's DataURLStreamHandler).
_DATA_URL = re.compile(r"data:(?P<type>[^;,]*)(?:;charset=[^;,]+)?(?P<b64>;base64)?,(?P<data>.*)", re.S)
_BASE64 = re.compile(r"[A-Za-z0-9+/=\-_\s]+")
#: Specs that can only mean a file: a missing one is reported as such, not decoded as base64.
_PATH_PREFIXES = ("/", "./", "../", "~")
# Claims checked here against the caller's clock (``now``) rather than by PyJWT's own clock.
_DECODE_OPTIONS: Any = {
    "verify_signature": True,
    "verify_exp": False,
    "verify_nbf": False,
    "verify_iat": False,
    "verify_aud": False,
    "verify_iss": False,
    "verify_sub": False,
    "verify_jti": False,
}


class TokenKeyError(PulsarWireError, ValueError):
    """A token key that cannot be read or used (missing file, not base64, not a public key...)."""


def read_key(spec: str) -> bytes:
    """The key bytes a Pulsar ``tokenSecretKey`` / ``tokenPublicKey`` setting names; raises TokenKeyError.

    ``data:`` URL, ``file:`` URL, path of an existing file (bytes as stored), else base64. Unlike
    Pulsar, a spec starting like a path (``/``, ``./``, ``../``, ``~``) that names no file is reported
    as a missing file rather than decoded as base64.
    """
    if spec.startswith("data:"):
        m = _DATA_URL.fullmatch(spec)
        if m is None:
            raise TokenKeyError("the data: URL is not data:[<type>][;base64],<data>")
        if not m["b64"]:
            return urllib.parse.unquote_to_bytes(m["data"])
        return _b64decode(m["data"], "the data: URL's content")
    if spec.startswith("file:"):
        parsed = urllib.parse.urlparse(spec)
        return _read_file(urllib.parse.unquote(parsed.path or parsed.netloc))
    if spec and Path(spec).expanduser().is_file():
        return _read_file(str(Path(spec).expanduser()))
    if spec.startswith(_PATH_PREFIXES):
        raise TokenKeyError(
            f"no key file {spec} (a base64 key that starts with '/' is given as data:;base64,<key>)"
        )
    if not spec or not _BASE64.fullmatch(spec):
        raise TokenKeyError("the key is not a file, a data: or file: URL, nor base64")
    return _b64decode(spec, "the key (not an existing file, so read as base64)")


def _read_file(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TokenKeyError(f"cannot read the key file {path}: {exc.strerror or exc}") from None


def _b64decode(text: str, what: str) -> bytes:
    compact = re.sub(r"\s+", "", text)
    try:
        if "-" in compact or "_" in compact:
            return base64.urlsafe_b64decode(compact + "=" * (-len(compact) % 4))
        return base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise TokenKeyError(f"{what} is not valid base64") from None


def load_public_key(data: bytes) -> tuple[Any, tuple[str, ...]]:
    """A DER or PEM public key and the JWT algorithms it verifies; raises TokenKeyError."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.hazmat.primitives.serialization import load_der_public_key, load_pem_public_key
    except ImportError:
        raise TokenKeyError(
            "RS256/ES256 token keys need the 'cryptography' package: pip install 'pulsarwire[crypto]'"
        ) from None
    try:
        key = (
            load_pem_public_key(data)
            if data.lstrip().startswith(b"-----BEGIN")
            else load_der_public_key(data)
        )
    except (ValueError, TypeError) as exc:
        raise TokenKeyError(f"the public key is not an X.509 public key in DER or PEM: {exc}") from None
    if isinstance(key, rsa.RSAPublicKey):
        return key, RSA_ALGORITHMS
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in EC_ALGORITHMS:
        return key, EC_ALGORITHMS[key.curve.name]
    raise TokenKeyError(
        f"unsupported public key type {type(key).__name__} (use an RSA or EC P-256/384/521 key)"
    )


@dataclass(frozen=True, slots=True)
class Identity:
    role: str
    expires_at: float | None  # seconds since the epoch


#: The client certificate of a TLS connection as ``ssl`` decodes it (``getpeercert()``), or None.
PeerCertificate = dict[str, Any] | None


class Authenticator(Protocol):
    """What the broker asks about a credential (CONNECT, AUTH_RESPONSE)."""

    def authenticate(
        self, method: str, data: bytes, now: float, peer_cert: PeerCertificate = None
    ) -> Identity: ...


@dataclass
class TokenAuth:
    """Validates tokens: JWTs with ``secret`` (HMAC) or ``public_key`` (DER/PEM bytes), and/or
    a fixed list ``tokens`` (token -> role). Raises TokenKeyError for an unusable key."""

    secret: bytes | None = field(default=None, repr=False)  # never in a repr or a log line
    tokens: dict[str, str] = field(default_factory=dict, repr=False)
    public_key: bytes | None = None
    _key: Any = field(init=False, repr=False, default=None)
    _algorithms: tuple[str, ...] = field(init=False, repr=False, default=())

    def __post_init__(self) -> None:
        if self.secret is not None and self.public_key is not None:
            raise TokenKeyError("give a token secret key or a public key, not both")
        if self.secret is not None:
            if len(self.secret) < MIN_SECRET_BYTES:
                raise TokenKeyError(
                    f"the token secret key is {len(self.secret)} bytes; at least {MIN_SECRET_BYTES}"
                    " (256 bits) are needed, as Pulsar requires for HS256"
                )
            self._key, self._algorithms = self.secret, HMAC_ALGORITHMS
        elif self.public_key is not None:
            self._key, self._algorithms = load_public_key(self.public_key)

    @classmethod
    def from_tokens_file(cls, path: str | Path) -> TokenAuth:
        """A fixed token list: one ``token [role]`` a line (``#`` comments); raises TokenKeyError."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise TokenKeyError(f"cannot read the tokens file {path}: {exc.strerror or exc}") from None
        tokens: dict[str, str] = {}
        for line in text.splitlines():
            parts = line.split()
            if parts and not parts[0].startswith("#"):
                tokens[parts[0]] = parts[1] if len(parts) > 1 else parts[0][:16]
        return cls(tokens=tokens)

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The JWT algorithms accepted (empty: JWTs are not accepted, only listed tokens)."""
        return self._algorithms

    method = TOKEN_METHOD

    def authenticate(
        self, method: str, data: bytes, now: float, peer_cert: PeerCertificate = None
    ) -> Identity:
        """Return the identity for a credential; raises AuthenticationError."""
        if method != TOKEN_METHOD:
            raise AuthenticationError(f"authentication method {method or '(none)'!r} is not accepted")
        return self.verify(data, now, peer_cert)

    def verify(self, data: bytes, now: float, peer_cert: PeerCertificate = None) -> Identity:
        """The identity of a token; raises AuthenticationError."""
        token = data.decode("utf-8", "replace").strip()
        if token.startswith("token:"):
            token = token[6:]
        if token in self.tokens:
            return Identity(self.tokens[token], None)
        if not self._algorithms:
            raise AuthenticationError("unknown token")
        return self._verify_jwt(token, now)

    def _verify_jwt(self, token: str, now: float) -> Identity:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise AuthenticationError("token is not a well-formed JWT") from None
        alg = header.get("alg")
        if alg not in self._algorithms:
            raise AuthenticationError(f"token algorithm {alg!r} is not accepted by this broker")
        try:
            claims = jwt.decode(token, self._key, algorithms=[alg], options=_DECODE_OPTIONS)
        except jwt.InvalidSignatureError:
            raise AuthenticationError("token signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise AuthenticationError(f"token is not valid: {exc}") from None
        exp = _time_claim(claims, "exp")
        if exp is not None and exp <= now:
            raise AuthenticationError("token has expired")
        nbf = _time_claim(claims, "nbf")
        if nbf is not None and nbf > now:
            raise AuthenticationError("token is not valid yet (nbf)")
        role = claims.get("sub")
        if not isinstance(role, str) or not role:
            raise AuthenticationError("token has no 'sub' role")
        return Identity(role, exp)


def _time_claim(claims: dict[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AuthenticationError(f"token {name!r} claim is not a number")
    return float(value)


@dataclass(frozen=True, slots=True)
class TlsAuth:
    """Pulsar's AuthenticationProviderTls: the role is the CN of the client's TLS certificate.

    The broker's TLS listener must ask for client certificates (``tls_trust_certs_file``: the CAs
    a certificate must be signed by, as Pulsar's ``tlsTrustCertsFilePath``).
    """

    method = TLS_METHOD

    def authenticate(
        self, method: str, data: bytes, now: float, peer_cert: PeerCertificate = None
    ) -> Identity:
        if method != TLS_METHOD:
            raise AuthenticationError(f"authentication method {method or '(none)'!r} is not accepted")
        return self.verify(data, now, peer_cert)

    def verify(self, data: bytes, now: float, peer_cert: PeerCertificate = None) -> Identity:
        """The identity of the presented certificate; raises AuthenticationError."""
        if not peer_cert:
            raise AuthenticationError("Client unable to authenticate with TLS certificate")
        names = [
            value
            for rdn in peer_cert.get("subject", ())
            for key, value in rdn
            if key == "commonName" and value
        ]
        if not names:
            raise AuthenticationError("Client unable to authenticate with TLS certificate: no CN")
        return Identity(str(names[-1]), None)


class Provider(Protocol):
    """One authentication method (token, tls, basic)."""

    method: str

    def verify(self, data: bytes, now: float, peer_cert: PeerCertificate = None) -> Identity: ...


class Authentication:
    """Several providers at once, chosen by the client's method, and the anonymous role.

    ``Authentication(TokenAuth(key), TlsAuth(), anonymous_role="guest")``. Raises ValueError for two
    providers of one method.
    """

    def __init__(self, *providers: Provider, anonymous_role: str | None = None) -> None:
        self.providers = tuple(providers)
        self.anonymous_role = anonymous_role or None
        self._by_method: dict[str, Provider] = {}
        for p in self.providers:
            if p.method in self._by_method:
                raise ValueError(f"two authentication providers for the method {p.method!r}")
            self._by_method[p.method] = p

    def __repr__(self) -> str:
        return f"Authentication(methods={self.methods}, anonymous_role={self.anonymous_role!r})"

    @property
    def methods(self) -> list[str]:
        return sorted(self._by_method)

    def provider(self, method: str) -> Provider | None:
        return self._by_method.get(method)

    def authenticate(
        self, method: str, data: bytes, now: float, peer_cert: PeerCertificate = None
    ) -> Identity:
        """The identity for a credential; raises AuthenticationError.

        As Pulsar's ServerCnx: a method without a provider (or no method) is the anonymous role
        when there is one; otherwise refused.
        """
        provider = self._by_method.get(method)
        if provider is not None:
            return provider.verify(data, now, peer_cert)
        if self.anonymous_role is not None:
            return Identity(self.anonymous_role, None)
        accepted = ", ".join(self.methods) or "none"
        raise AuthenticationError(
            f"authentication method {method or '(none)'!r} is not accepted (accepted: {accepted})"
            " and there is no anonymous role"
        )
