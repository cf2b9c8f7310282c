"""Client authentication providers: what goes into CONNECT and AUTH_RESPONSE.

An :class:`Authentication` has a ``method`` (CONNECT's ``auth_method_name``)
and :meth:`~Authentication.auth_data`, which the connection calls on every
connect and on every AUTH_CHALLENGE, so a credential that changes (a token
supplier, a token file rewritten by a sidecar) is read afresh each time.

:class:`AuthenticationToken` takes a token in one of the official clients'
forms: a plain string, ``"token:<jwt>"``, ``"file:<path or file URI>"``, a
callable returning the token, or ``path=``. Tokens are stripped of surrounding
whitespace (as the Java client does for files); an absent, unreadable or empty
token raises :class:`~pulsarwire.errors.AuthenticationError` whose message names
the source but never contains the token. :class:`AuthenticationNone` sends no
credential. :class:`AuthenticationBasic` sends ``user:password`` (method
``basic``); OAuth2 client credentials live in :mod:`pulsarwire.client.oauth2`.

A provider whose credential needs network I/O (OAuth2) also has an
``auth_data_async(refresh=...)`` coroutine; the connection asks for credentials
through :func:`pulsarwire.io.connection.credentials`, which uses it when present
so the event loop never blocks, and passes ``refresh=True`` when the broker sent
AUTH_CHALLENGE.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

from pulsarwire.errors import AuthenticationError, TokenFileError

TOKEN_PREFIX = "token:"
FILE_PREFIX = "file:"


@runtime_checkable
class Authentication(Protocol):
    """A client credential provider."""

    @property
    def method(self) -> str:
        """The ``auth_method_name`` sent in CONNECT and AUTH_RESPONSE."""
        ...

    def auth_data(self) -> bytes:
        """The credential bytes, read afresh on every call. Raises AuthenticationError."""
        ...


class AuthenticationNone:
    """No authentication: method ``"none"`` and empty data."""

    __slots__ = ()
    method: ClassVar[str] = "none"

    def auth_data(self) -> bytes:
        return b""

    def __repr__(self) -> str:
        return "AuthenticationNone()"


def _file_path(spec: str) -> Path:
    """The path of a ``file:`` spec: ``file:/abs``, ``file:///abs``, ``file:rel`` or ``file://localhost/abs``."""
    parts = urlsplit(spec)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"token file URI must name a local file, got host {parts.netloc!r}")
    path = unquote(parts.path)
    if not path:
        raise ValueError("token file URI has no path")
    return Path(path)


class AuthenticationToken:
    """Token authentication (method ``"token"``).

    ``token`` is the token itself, ``"token:<token>"``, ``"file:<path>"`` (a
    file read on every :meth:`auth_data` call), or a callable called on every
    call; alternatively ``path=`` names the file. Give exactly one source.

    Raises AuthenticationError when no token source is given (e.g. an unset
    environment variable passed through), ValueError when both are given.
    """

    __slots__ = ("_path", "_static", "_supplier")
    method: ClassVar[str] = "token"

    def __init__(
        self,
        token: str | Callable[[], str] | None = None,
        *,
        path: str | Path | None = None,
    ) -> None:
        if token is not None and path is not None:
            raise ValueError("give either token or path, not both")
        self._static: str | None = None
        self._supplier: Callable[[], str] | None = None
        self._path: Path | None = None
        if path is not None:
            self._path = Path(path)
        elif token is None:
            raise AuthenticationError("no token configured: pass a token, a token supplier or path=")
        elif isinstance(token, str):
            if token.startswith(TOKEN_PREFIX):
                self._static = token[len(TOKEN_PREFIX) :]
            elif token.startswith(FILE_PREFIX):
                self._path = _file_path(token)
            else:
                self._static = token
        elif callable(token):
            self._supplier = token
        else:
            raise TypeError(f"token must be a str or a callable, got {type(token).__name__}")
        if self._static is not None and not self._static.strip():
            raise AuthenticationError("the configured token is empty")

    @property
    def path(self) -> Path | None:
        """The token file, when the token is read from one."""
        return self._path

    def token(self) -> str:
        """The current token, stripped of surrounding whitespace.

        Raises AuthenticationError when the file cannot be read or decoded,
        the supplier fails or returns a non-string, or the token is empty.
        """
        if self._static is not None:
            return self._static.strip()
        if self._path is not None:
            return self._read_file(self._path)
        assert self._supplier is not None
        try:
            value = self._supplier()
        except AuthenticationError:
            raise
        except Exception as exc:
            raise AuthenticationError(f"the token supplier raised {type(exc).__name__}") from exc
        if not isinstance(value, str):
            raise AuthenticationError(f"the token supplier returned {type(value).__name__}, expected str")
        value = value.strip()
        if not value:
            raise AuthenticationError("the token supplier returned an empty token")
        return value

    @staticmethod
    def _read_file(path: Path) -> str:
        where = str(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError as exc:
            raise TokenFileError(f"cannot read the token file {where}: file not found", path=where) from exc
        except OSError as exc:
            reason = (exc.strerror or type(exc).__name__).lower()
            raise TokenFileError(f"cannot read the token file {where}: {reason}", path=where) from exc
        try:
            value = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            # from None: the decode error would quote bytes of the token
            raise TokenFileError(f"the token file {where} is not UTF-8", path=where) from None
        if not value:
            raise TokenFileError(f"the token file {where} is empty", path=where)
        return value

    def auth_data(self) -> bytes:
        """The current token as UTF-8 bytes. Raises AuthenticationError (see :meth:`token`)."""
        return self.token().encode("utf-8")

    def __repr__(self) -> str:
        if self._path is not None:
            return f"AuthenticationToken(path={str(self._path)!r})"
        if self._supplier is not None:
            return "AuthenticationToken(<supplier>)"
        return "AuthenticationToken(<static token>)"


class AuthenticationBasic:
    """Basic authentication: method ``"basic"`` (or ``method``), data ``user:password``.

    Takes ``username`` and ``password``, or the official client's JSON
    ``auth_params_string`` (``{"username": ..., "password": ..., "method": ...}``),
    which then wins over the other arguments. Raises ValueError for a missing
    field or a malformed string, and for a username containing ``:``.
    """

    __slots__ = ("_method", "_password", "username")

    def __init__(
        self,
        username: str | None = None,
        password: str | None = None,
        method: str = "basic",
        auth_params_string: str | None = None,
    ) -> None:
        if auth_params_string is not None:
            try:
                doc = json.loads(auth_params_string)
            except ValueError:
                raise ValueError("basic auth parameters are not a JSON object") from None
            if not isinstance(doc, dict):
                raise ValueError("basic auth parameters are not a JSON object")
            username, password = doc.get("username"), doc.get("password")
            method = doc.get("method") or "basic"
        if not isinstance(username, str) or not username:
            raise ValueError("basic authentication needs a username")
        if not isinstance(password, str):
            raise ValueError("basic authentication needs a password")
        if ":" in username:
            raise ValueError("a basic-auth username cannot contain ':'")
        if not isinstance(method, str) or not method:
            raise ValueError("basic authentication needs a method name")
        self.username = username
        self._password = password
        self._method = method

    @property
    def method(self) -> str:
        return self._method

    def auth_data(self) -> bytes:
        return f"{self.username}:{self._password}".encode()

    def __repr__(self) -> str:
        return f"AuthenticationBasic(username={self.username!r}, password=<hidden>)"
