"""Connector-style auth options (authPluginClassName + authParams) and the profile's ``auth:``.

The Spark tests read and write through a broker that verifies RS256 JWTs from a local OAuth2
issuer (tests/helpers/oauth2_issuer.py), with the options exactly as StreamNative's connector
takes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.errors import JobError, OptionError
from pipelines.jobs.config import load_job, redacted
from pipelines.options.auth import CLASS_OF, parse_auth
from pipelines.options.grammar import client_settings
from pulsarwire.broker import Authentication, Broker, Grants, TokenAuth
from pulsarwire.client.auth import AuthenticationBasic, AuthenticationToken
from pulsarwire.client.oauth2 import AuthenticationOauth2
from tests.helpers.oauth2_issuer import LocalIssuer

SECRET = "client-secret-for-spark-1234"
OAUTH2 = "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2"
BASIC = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"
TOKEN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TLS = "org.apache.pulsar.client.impl.auth.AuthenticationTls"


def settings(plugin: str, params: str, **more: str) -> Any:
    return client_settings(
        {
            "service.url": "pulsar://localhost:6650",
            "pulsar.client.authPluginClassName": plugin,
            "pulsar.client.authParams": params,
            **more,
        }
    )


# -- option parsing (no Spark) ------------------------------------------------------------------


def test_oauth2_json_and_key_value_forms_give_the_same_provider() -> None:
    as_json = json.dumps(
        {
            "type": "client_credentials",
            "issuerUrl": "https://auth.example.com/",
            "privateKey": "file:///keys/sa.json",
            "audience": "urn:sn:pulsar:o:i",
        }
    )
    as_kv = "issuerUrl:https://auth.example.com/,privateKey:file:///keys/sa.json,audience:urn:sn:pulsar:o:i"
    for params in (as_json, as_kv):
        auth, extra = settings(OAUTH2, params).auth.build()
        assert isinstance(auth, AuthenticationOauth2) and extra == {}
        assert (auth.issuer_url, auth.private_key, auth.audience) == (
            "https://auth.example.com",
            "file:///keys/sa.json",
            "urn:sn:pulsar:o:i",
        )


def test_token_basic_and_tls_plugins() -> None:
    for params in ("token:abc.def.ghi", '{"token": "abc.def.ghi"}', "abc.def.ghi"):
        auth, _ = settings(TOKEN, params).auth.build()
        assert isinstance(auth, AuthenticationToken) and auth.token() == "abc.def.ghi"
    auth, _ = settings(BASIC, '{"userId": "bob", "password": "pw"}').auth.build()
    assert isinstance(auth, AuthenticationBasic) and auth.auth_data() == b"bob:pw"
    auth, extra = settings(TLS, "tlsCertFile:/c.pem,tlsKeyFile:/k.pem").auth.build()
    assert auth is None
    assert extra == {"tls_certificate_file_path": "/c.pem", "tls_private_key_file_path": "/k.pem"}


@pytest.mark.parametrize(
    ("plugin", "params", "option", "message"),
    [
        ("com.example.Nope", "{}", "authPluginClassName", "unsupported plugin"),
        (OAUTH2, '{"issuerUrl": "https://a"}', "authParams", "needs privateKey"),
        (BASIC, '{"userId": "bob", "password": ' + json.dumps(SECRET), "authParams", "not valid JSON"),
        (BASIC, "userId:bob", "authParams", "needs password"),
        (OAUTH2, "", "authParams", "required"),
    ],
)
def test_bad_auth_options_name_the_option_never_the_secret(
    plugin: str, params: str, option: str, message: str
) -> None:
    with pytest.raises(OptionError) as info:
        settings(plugin, params)
    assert option in str(info.value) and message in str(info.value) and SECRET not in str(info.value)


def test_plugin_and_auth_token_together_are_refused() -> None:
    with pytest.raises(OptionError, match="not both"):
        settings(TOKEN, "token:x", **{"pulsar.client.authToken": "y"})
    assert parse_auth(None, None) is None
    assert repr(settings(BASIC, f'{{"userId": "bob", "password": "{SECRET}"}}')).count(SECRET) == 0


# -- job profiles ---------------------------------------------------------------------------------

JOB = """
name: auth_job
source:
  pulsar:
    topic: orders
sink:
  delta:
    path: /data/tables/t
checkpoint: /data/checkpoints/auth_job
offsets: /data/offsets
"""


def write_project(tmp_path: Path, client: str) -> tuple[Path, Path]:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "p.yaml").write_text(
        "pulsar:\n  service_url: pulsar://localhost:6650\n  client:\n" + client
    )
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    return job, tmp_path / "conf"


def test_profile_oauth2_becomes_connector_options_and_is_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEY_FILE", "/secrets/sa-key.json")
    job_path, conf = write_project(
        tmp_path,
        "    auth:\n      oauth2:\n        issuer_url: https://auth.example.com\n"
        "        private_key: ${env:KEY_FILE}\n        audience: urn:x\n",
    )
    job = load_job(job_path, "p", conf_dir=conf)
    opts = job.source_options()
    assert opts["pulsar.client.authPluginClassName"] == CLASS_OF["oauth2"] == OAUTH2
    assert json.loads(opts["pulsar.client.authParams"]) == {
        "issuerUrl": "https://auth.example.com",
        "privateKey": "/secrets/sa-key.json",
        "audience": "urn:x",
    }
    assert isinstance(client_settings(opts).auth.build()[0], AuthenticationOauth2)
    shown = json.dumps(redacted(job))
    assert "/secrets/sa-key.json" not in shown and "auth.example.com" in shown
    assert "sa-key" not in repr(job)


def test_profile_basic_password_from_env_is_masked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULSAR_PASSWORD", SECRET)
    job_path, conf = write_project(
        tmp_path, "    auth:\n      basic:\n        username: bob\n        password: ${env:PULSAR_PASSWORD}\n"
    )
    job = load_job(job_path, "p", conf_dir=conf)
    assert json.loads(job.source_options()["pulsar.client.authParams"]) == {
        "userId": "bob",
        "password": SECRET,
    }
    assert SECRET not in json.dumps(redacted(job)) and SECRET not in repr(job)


def test_profile_auth_needs_exactly_one_kind(tmp_path: Path) -> None:
    job_path, conf = write_project(tmp_path, "    auth: {}\n")
    with pytest.raises(JobError, match="exactly one of oauth2 or basic"):
        load_job(job_path, "p", conf_dir=conf)


# -- Spark against a broker verifying the issuer's tokens -----------------------------------------


@pytest.fixture(scope="module")
def issuer() -> Iterator[LocalIssuer]:
    i = LocalIssuer({"spark": SECRET}, expires_in=30)
    yield i
    i.stop()


@pytest.fixture(scope="module")
def oauth2_broker(issuer: LocalIssuer) -> Iterator[Broker]:
    grants = Grants.of("spark:public/default:produce,consume")
    with Broker(auth=TokenAuth(public_key=issuer.public_key_pem), grants=grants) as b:
        yield b


def test_spark_read_and_write_with_oauth2_options(
    spark: Any, oauth2_broker: Broker, issuer: LocalIssuer, tmp_path: Path, topic_name: str
) -> None:
    key_file = issuer.credentials_file(tmp_path, "spark", SECRET)
    auth = {
        "pulsar.client.authPluginClassName": OAUTH2,
        "pulsar.client.authParams": json.dumps(
            {"type": "client_credentials", "issuerUrl": issuer.url, "privateKey": f"file://{key_file}"}
        ),
    }
    rows = [(f"k{i}", f"v{i}".encode()) for i in range(20)]
    df = spark.createDataFrame(rows, "key string, value binary")
    writer = df.write.format("pulsarwire").option("service.url", oauth2_broker.service_url)
    writer = writer.option("topic", topic_name)
    for k, v in auth.items():
        writer = writer.option(k, v)
    writer.mode("append").save()
    reader = spark.read.format("pulsarwire").option("service.url", oauth2_broker.service_url)
    for k, v in auth.items():
        reader = reader.option(k, v)
    got = reader.option("topic", topic_name).load().select("key", "value").collect()
    assert sorted((bytes(r.key).decode(), bytes(r.value)) for r in got) == sorted(rows)
    assert issuer.issued  # the broker let in only clients holding the issuer's tokens


def test_pipelines_run_with_an_oauth2_profile(
    spark: Any, issuer: LocalIssuer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pipelines run jobs/orders_ingest.yaml --env <profile with auth.oauth2>``: the job reads
    with the issuer's token (only the role "spark" may consume; the demo producer is anonymous)."""
    from deltalake import DeltaTable

    from jobs.demo import produce
    from pipelines.jobs.cli import main as cli

    root = Path(__file__).resolve().parents[3]
    local = (root / "conf" / "local.yaml").read_text()
    profile = tmp_path / "oauth2.yaml"
    profile.write_text(
        local.replace(
            "pulsar:\n  service_url: ${env:PULSAR_URL:-pulsar://127.0.0.1:6650}\n",
            "pulsar:\n  service_url: ${env:PULSAR_URL}\n  client:\n    auth:\n      oauth2:\n"
            "        issuer_url: ${env:ISSUER}\n        private_key: ${env:KEY_FILE}\n",
        )
    )
    assert "auth:" in profile.read_text()
    grants = Grants.of("spark:public/default:produce,consume", "demo:public/default:produce")
    auth = Authentication(TokenAuth(public_key=issuer.public_key_pem), anonymous_role="demo")
    with Broker(auth=auth, grants=grants) as b:
        monkeypatch.setenv("PULSAR_URL", b.service_url)
        monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path / "data"))
        monkeypatch.setenv("ISSUER", issuer.url)
        monkeypatch.setenv("KEY_FILE", str(issuer.credentials_file(tmp_path, "spark", SECRET)))
        monkeypatch.chdir(root)
        produce(b.service_url, "orders", 50)
        before = len(issuer.issued)
        assert cli(["run", "jobs/orders_ingest.yaml", "--env", str(profile)]) == 0
        table = DeltaTable(str(tmp_path / "data" / "tables" / "orders_raw")).to_pyarrow_table()
        assert sorted(table.column("order_id").to_pylist()) == list(range(50))
        assert len(issuer.issued) > before
