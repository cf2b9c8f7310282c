"""``authPlugin`` + ``authParams`` as pulsar-admin and client.conf name a credential (client/plugins.py).

Each Java plugin class (and its short name) with the parameter forms the Java clients read; a
refusal names the plugin and the key, never a value.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarwire.client.auth import AuthenticationBasic, AuthenticationToken
from pulsarwire.client.plugins import PluginError, from_plugin

J = "org.apache.pulsar.client.impl.auth."


def test_token_forms(tmp_path: Path) -> None:
    for plugin, params, token in (
        (J + "AuthenticationToken", "token:abc", b"abc"),
        ("token", '{"token": "xyz"}', b"xyz"),
    ):
        provider = from_plugin(plugin, params).provider
        assert isinstance(provider, AuthenticationToken) and provider.auth_data() == token
    path = tmp_path / "t.jwt"
    path.write_text("from-file\n")
    auth = from_plugin(J + "AuthenticationToken", f"file:{path}").provider
    assert isinstance(auth, AuthenticationToken) and auth.auth_data() == b"from-file"
    path.write_text("rotated\n")
    assert auth.auth_data() == b"rotated"  # read at each use


def test_basic_oauth2_and_tls() -> None:
    basic = from_plugin(J + "AuthenticationBasic", "userId:alice,password:p:w").provider
    assert isinstance(basic, AuthenticationBasic) and basic.auth_data() == b"alice:p:w"
    oauth = from_plugin(
        J + "oauth2.AuthenticationOAuth2",
        '{"issuerUrl": "https://issuer.example", "privateKey": "/creds.json", "audience": "a"}',
    )
    assert oauth.provider is not None and oauth.provider.method == "token"
    tls = from_plugin(J + "AuthenticationTls", "tlsCertFile:/c.pem,tlsKeyFile:/k.pem")
    assert (tls.provider, tls.tls_cert_file, tls.tls_key_file) == (None, "/c.pem", "/k.pem")


@pytest.mark.parametrize(
    ("plugin", "params", "expected"),
    [
        ("com.example.Custom", "x", "unsupported auth plugin"),
        (J + "AuthenticationToken", "", "auth params required"),
        (J + "AuthenticationBasic", "userId:alice", "needs password"),
        (J + "AuthenticationBasic", "no-separator-s3cret", "key:value"),
        (J + "AuthenticationToken", '{"token": ""}', "token:"),
        (J + "oauth2.AuthenticationOAuth2", '{"issuerUrl": "ftp://s3cret"}', "privateKey"),
    ],
)
def test_refusals_name_the_key_never_the_value(plugin: str, params: str, expected: str) -> None:
    with pytest.raises(PluginError) as info:
        from_plugin(plugin, params)
    assert expected in str(info.value) and "s3cret" not in str(info.value)
