"""Client authentication: static, supplier and file tokens, the official prefixes, errors without secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarwire.client.auth import Authentication, AuthenticationNone, AuthenticationToken
from pulsarwire.errors import AuthenticationError, TokenFileError

SECRET = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0.c2VjcmV0LXNpZw"


def test_none() -> None:
    auth = AuthenticationNone()
    assert auth.method == "none"
    assert auth.auth_data() == b""
    assert isinstance(auth, Authentication)


def test_static_token() -> None:
    auth = AuthenticationToken(SECRET)
    assert auth.method == "token"
    assert auth.auth_data() == SECRET.encode()
    assert auth.path is None
    assert isinstance(auth, Authentication)


def test_static_token_is_stripped() -> None:
    assert AuthenticationToken(f"  {SECRET}\n").auth_data() == SECRET.encode()


def test_token_prefix() -> None:
    assert AuthenticationToken(f"token:{SECRET}").auth_data() == SECRET.encode()


def test_supplier_is_called_on_every_auth_data() -> None:
    calls: list[int] = []

    def supplier() -> str:
        calls.append(1)
        return f"tok-{len(calls)}\n"

    auth = AuthenticationToken(supplier)
    assert auth.auth_data() == b"tok-1"
    assert auth.auth_data() == b"tok-2"
    assert len(calls) == 2


def test_file_is_reread_after_it_changes(tmp_path: Path) -> None:
    f = tmp_path / "token.txt"
    f.write_text("first-token\n")
    auth = AuthenticationToken(path=f)
    assert auth.path == f
    assert auth.auth_data() == b"first-token"
    f.write_text("  second-token  \n")
    assert auth.auth_data() == b"second-token"


def test_path_as_str(tmp_path: Path) -> None:
    f = tmp_path / "t"
    f.write_text(SECRET)
    assert AuthenticationToken(path=str(f)).auth_data() == SECRET.encode()


@pytest.mark.parametrize("form", ["file:{p}", "file://{p}", "file://localhost{p}"])
def test_file_prefix(tmp_path: Path, form: str) -> None:
    f = tmp_path / "my token.txt"
    f.write_text(SECRET + "\n")
    spec = form.format(p=f.as_posix()) if form == "file:{p}" else form.format(p=f.as_uri()[len("file://") :])
    auth = AuthenticationToken(spec)
    assert auth.path == f
    assert auth.auth_data() == SECRET.encode()
    f.write_text("rotated")
    assert auth.auth_data() == b"rotated"


def test_file_uri_with_a_remote_host_is_refused() -> None:
    with pytest.raises(ValueError, match="local file"):
        AuthenticationToken("file://otherhost/etc/token")


def test_missing_file_error_names_the_file_but_not_a_secret(tmp_path: Path) -> None:
    f = tmp_path / "missing.txt"
    auth = AuthenticationToken(path=f)
    with pytest.raises(AuthenticationError) as info:
        auth.auth_data()
    message = str(info.value)
    assert "missing.txt" in message
    assert "cannot read the token file" in message and "file not found" in message
    assert isinstance(info.value, TokenFileError) and info.value.path == str(f)


def test_file_deleted_later_raises(tmp_path: Path) -> None:
    f = tmp_path / "t"
    f.write_text(SECRET)
    auth = AuthenticationToken(f"file:{f}")
    assert auth.auth_data() == SECRET.encode()
    f.unlink()
    with pytest.raises(AuthenticationError) as info:
        auth.auth_data()
    assert SECRET not in str(info.value)


def test_empty_file_raises(tmp_path: Path) -> None:
    f = tmp_path / "t"
    f.write_text("  \n")
    with pytest.raises(AuthenticationError, match="empty"):
        AuthenticationToken(path=f).auth_data()


def test_non_utf8_file_raises_without_quoting_its_bytes(tmp_path: Path) -> None:
    f = tmp_path / "t"
    f.write_bytes(b"abc\xffsecretbytes")
    with pytest.raises(AuthenticationError, match="not UTF-8") as info:
        AuthenticationToken(path=f).auth_data()
    assert "secretbytes" not in str(info.value)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


@pytest.mark.parametrize("token", ["", "   ", "token:", "token:  "])
def test_empty_static_token_raises(token: str) -> None:
    with pytest.raises(AuthenticationError, match="empty"):
        AuthenticationToken(token)


def test_no_token_at_all_raises() -> None:
    with pytest.raises(AuthenticationError, match="no token configured"):
        AuthenticationToken()


def test_token_and_path_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        AuthenticationToken(SECRET, path=tmp_path / "t")


def test_supplier_returning_empty_raises() -> None:
    with pytest.raises(AuthenticationError, match="empty"):
        AuthenticationToken(lambda: " ").auth_data()


def test_supplier_returning_a_non_string_raises() -> None:
    auth = AuthenticationToken(lambda: SECRET.encode())  # type: ignore[arg-type, return-value]
    with pytest.raises(AuthenticationError, match="bytes"):
        auth.auth_data()


def test_supplier_failure_is_wrapped_without_its_message() -> None:
    def supplier() -> str:
        raise RuntimeError(f"vault said {SECRET}")

    with pytest.raises(AuthenticationError, match="RuntimeError") as info:
        AuthenticationToken(supplier).auth_data()
    assert SECRET not in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_supplier_authentication_error_passes_through() -> None:
    def supplier() -> str:
        raise AuthenticationError("expired refresh token")

    with pytest.raises(AuthenticationError, match="expired refresh token"):
        AuthenticationToken(supplier).auth_data()


def test_a_non_callable_non_string_token_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        AuthenticationToken(42)  # type: ignore[arg-type]


def test_repr_never_shows_the_token(tmp_path: Path) -> None:
    f = tmp_path / "t"
    f.write_text(SECRET)
    for auth in (
        AuthenticationToken(SECRET),
        AuthenticationToken(f"token:{SECRET}"),
        AuthenticationToken(lambda: SECRET),
        AuthenticationToken(path=f),
    ):
        assert SECRET not in repr(auth)
    assert repr(AuthenticationNone()) == "AuthenticationNone()"
