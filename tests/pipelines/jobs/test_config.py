"""The job configuration layer: loading, merging, interpolation, validation, the validate command.

No Spark session: everything here runs before Spark would start. Each test builds a small
project (``conf/``, ``jobs/``) in a temporary directory and works from there, so messages
name ``jobs/t.yaml`` and ``conf/local.yaml`` as a user would see them.
"""

from __future__ import annotations

import io
import json
import sys
import types
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.errors import JobError
from pipelines.jobs.cli import main
from pipelines.jobs.config import load_job, parse_override, parse_path, redacted
from pipelines.jobs.models import Job
from pipelines.masking import MASK
from pipelines.options.bound import Bound, BoundError, format_path, parse_bound
from pipelines.state.positions import Position

REPO = Path(__file__).resolve().parents[3]

PROFILE = """\
vars:
  data_dir: /data
pulsar:
  service_url: pulsar://localhost:6650
spark:
  master: local[2]
  delta_engine: deltalake
  conf:
    spark.ui.enabled: "false"
    spark.sql.shuffle.partitions: "4"
"""

INGEST = """\
name: t
source:
  pulsar:
    topic: orders
sink:
  delta:
    path: ${vars.data_dir}/tables/t
checkpoint: ${vars.data_dir}/checkpoints/${name}
offsets: ${vars.data_dir}/offsets
"""

TOKEN = "tok-3f9a1c77e2"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PIPELINES_PROJECT_DIR", raising=False)
    (tmp_path / "conf").mkdir()
    (tmp_path / "jobs").mkdir()
    (tmp_path / "conf" / "local.yaml").write_text(PROFILE)
    return tmp_path


def write(root: Path, rel: str, text: str) -> str:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return rel


@pytest.fixture
def load(project: Path) -> Callable[..., Job]:
    def _load(text: str, *overrides: str, env: str | None = "local", **kw: Any) -> Job:
        return load_job(write(project, "jobs/t.yaml", text), env, list(overrides), **kw)

    return _load


def problems(fn: Callable[[], object]) -> list[str]:
    with pytest.raises(JobError) as info:
        fn()
    assert str(info.value) == "\n".join(info.value.problems)
    return list(info.value.problems)


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


# -- merging -----------------------------------------------------------------------------------


def test_profile_then_job_then_set(load: Callable[..., Job]) -> None:
    job = load(
        INGEST
        + "spark:\n  conf:\n    spark.sql.shuffle.partitions: 8\n    spark.job.only: x\n"
        + "vars:\n  data_dir: /job\n",
        "spark.conf.spark-only=1",
        'spark.conf["spark.job.only"]=true',
        "vars.data_dir=/cli",
    )
    assert job.spark.conf == {
        "spark.ui.enabled": "false",  # profile
        "spark.sql.shuffle.partitions": "8",  # job over profile (YAML int → Spark string)
        "spark.job.only": "true",  # --set over job
        "spark-only": "1",
    }
    assert job.spark.master == "local[2]"
    assert job.checkpoint == "/cli/checkpoints/t"  # interpolation after merging
    assert job.sink.delta is not None and job.sink.delta.path == "/cli/tables/t"


def test_lists_are_replaced_and_null_replaces(load: Callable[..., Job]) -> None:
    text = INGEST.replace("path: ${vars.data_dir}/tables/t", "path: /t\n    partition_by: [a, b]")
    job = load(text, "sink.delta.partition_by=[c]", "spark.master=")
    assert job.sink.delta is not None and job.sink.delta.partition_by == ["c"]
    assert job.spark.master is None


def test_set_values_are_yaml() -> None:
    assert parse_override("a.b=8") == (("a", "b"), 8)
    assert parse_override("a=true") == (("a",), True)
    assert parse_override("a=[x, y]") == (("a",), ["x", "y"])
    assert parse_override("a={k: 1}") == (("a",), {"k": 1})
    assert parse_override("a=x: y") == (("a",), "x: y")
    assert parse_override("a=") == (("a",), None)
    assert parse_override("a=1:2:-1") == (("a",), "1:2:-1")
    assert parse_override('spark.conf["spark.x=y"]=v=w') == (("spark", "conf", "spark.x=y"), "v=w")
    with pytest.raises(JobError, match=r"^--set nope: expected key.path=value$"):
        parse_override("nope")
    with pytest.raises(JobError, match="list items cannot be set one by one"):
        parse_override("a[0]=1")


def test_paths_round_trip() -> None:
    for parts in [
        ("a",),
        ("a", "b", 0, "c"),
        ("spark", "conf", "spark.ui.enabled"),
        ("x", "orders-partition-0"),
    ]:
        assert parse_path(format_path(parts)) == parts
    assert format_path(("starting_offsets", "persistent://public/default/o")) == (
        'starting_offsets["persistent://public/default/o"]'
    )
    for bad in ["", ".a", "a..b", "a b", "[0]"]:
        with pytest.raises(ValueError):
            parse_path(bad)


# -- interpolation -------------------------------------------------------------------------


def test_interpolation(load: Callable[..., Job], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PW_HOST", "broker-1")
    monkeypatch.setenv("PW_EMPTY", "")
    monkeypatch.delenv("PW_UNSET", raising=False)
    job = load(
        INGEST
        + """\
description: "${vars.url} ${vars.n} ${vars.flag} $${literal}"
vars:
  url: pulsar://${env:PW_HOST}:${vars.port}
  port: ${env:PW_UNSET:-6650}
  empty: ${env:PW_EMPTY:-fallback}
  nested: ${env:PW_UNSET:-${vars.data_dir}/x}
  n: ${vars.list[1]}
  list: [a, 7]
  whole: ${vars.map}
  map: {k: 1}
  flag: true
"""
    )
    v = job.vars
    assert v["url"] == "pulsar://broker-1:6650"
    assert v["empty"] == "fallback"  # like the shell: unset or empty takes the default
    assert v["nested"] == "/data/x"
    assert v["n"] == 7  # a whole-string reference keeps the type
    assert v["whole"] == {"k": 1}
    assert job.description == "pulsar://broker-1:6650 7 true ${literal}"


def test_interpolation_errors(load: Callable[..., Job], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PW_UNSET", raising=False)
    found = problems(
        lambda: load(
            INGEST
            + """\
description: ${vars.a}
vars:
  a: ${vars.b}
  b: ${vars.a}
  c: ${env:PW_UNSET}
  d: ${vars.nope}
  e: x${vars.m}
  f: ${foo:bar}
  g: ${vars.a
  m: {k: 1}
"""
        )
    )
    assert found == [
        "jobs/t.yaml: vars.a: reference cycle: vars.a -> vars.b -> vars.a",
        "jobs/t.yaml: vars.c: environment variable PW_UNSET is not set "
        "(or give a default: ${env:PW_UNSET:-...})",
        "jobs/t.yaml: vars.d: ${vars.nope}: no key vars.nope in the job or its profile",
        "jobs/t.yaml: vars.e: ${vars.m} is a mapping: it cannot be part of a string",
        "jobs/t.yaml: vars.f: ${foo:bar}: unknown resolver (expected ${env:NAME} or ${key.path})",
        "jobs/t.yaml: vars.g: unclosed ${ in '${vars.a'",
    ]


def test_self_reference_is_a_cycle(load: Callable[..., Job]) -> None:
    assert problems(lambda: load(INGEST + "vars:\n  x: a${vars}\n")) == [
        "jobs/t.yaml: vars.x: reference cycle: vars.x -> vars.x"
    ]


def test_missing_env_in_profile_names_the_profile(project: Path, load: Callable[..., Job]) -> None:
    write(project, "conf/local.yaml", PROFILE.replace("pulsar://localhost:6650", "${env:PW_UNSET_URL}"))
    assert problems(lambda: load(INGEST)) == [
        "conf/local.yaml: pulsar.service_url: environment variable PW_UNSET_URL is not set "
        "(or give a default: ${env:PW_UNSET_URL:-...})"
    ]


# -- validation --------------------------------------------------------------------------------

CASES = [
    # (what, job text change, expected problem lines)
    (
        "unknown key",
        lambda t: t.replace("topic: orders", "topic: orders\n    tpoics: [x]"),
        ["jobs/t.yaml: source.pulsar.tpoics: unknown key (did you mean topics?)"],
    ),
    (
        "unknown key without a near match",
        lambda t: t + "zzz: 1\n",
        [
            "jobs/t.yaml: zzz: unknown key (expected one of: name, description, vars, pulsar, source, "
            "transform, sink, trigger, checkpoint, offsets, spark, backfill)"
        ],
    ),
    (
        "wrong type",
        lambda t: t.replace("topic: orders", "topic: orders\n    max_messages_per_trigger: many"),
        ["jobs/t.yaml: source.pulsar.max_messages_per_trigger: expected an integer, got 'many'"],
    ),
    (
        "wrong type: a boolean is not an integer",
        lambda t: t.replace("topic: orders", "topic: orders\n    max_messages_per_trigger: true"),
        ["jobs/t.yaml: source.pulsar.max_messages_per_trigger: expected an integer, got a boolean"],
    ),
    (
        "wrong type: mapping for a string",
        lambda t: t.replace("topic: orders", "topic: {name: orders}"),
        ["jobs/t.yaml: source.pulsar.topic: expected a string, got a mapping"],
    ),
    (
        "out of range",
        lambda t: t.replace("topic: orders", "topic: orders\n    max_bytes_per_trigger: 0"),
        ["jobs/t.yaml: source.pulsar.max_bytes_per_trigger: must be >= 1, got 0"],
    ),
    (
        "missing required",
        lambda t: t.replace("path: ${vars.data_dir}/tables/t", "mode: append"),
        ["jobs/t.yaml: sink.delta.path: required"],
    ),
    (
        "missing required section",
        lambda t: t.replace("sink:\n  delta:\n    path: ${vars.data_dir}/tables/t\n", ""),
        ["jobs/t.yaml: sink: required"],
    ),
    (
        "two topic selectors",
        lambda t: t.replace("topic: orders", "topic: orders\n    topics_pattern: orders-.*"),
        [
            "jobs/t.yaml: source.pulsar: give exactly one of topic, topics, topics_pattern "
            "(got topic, topics_pattern)"
        ],
    ),
    (
        "no topic selector",
        lambda t: t.replace("topic: orders", "fail_on_data_loss: false"),
        ["jobs/t.yaml: source.pulsar: give exactly one of topic, topics, topics_pattern"],
    ),
    (
        "two sources",
        lambda t: t.replace("    topic: orders\n", "    topic: orders\n  delta:\n    path: /d\n"),
        ["jobs/t.yaml: source: give exactly one of pulsar, delta (got pulsar, delta)"],
    ),
    (
        "merge without keys",
        lambda t: t.replace("/tables/t", "/tables/t\n    mode: merge"),
        ["jobs/t.yaml: sink.delta.merge_keys: required with mode: merge (the columns that identify a row)"],
    ),
    (
        "merge keys without merge",
        lambda t: t.replace("/tables/t", "/tables/t\n    merge_keys: [id]"),
        ["jobs/t.yaml: sink.delta.merge_keys: only with mode: merge"],
    ),
    (
        "bad delta mode",
        lambda t: t.replace("/tables/t", "/tables/t\n    mode: upsert"),
        ["jobs/t.yaml: sink.delta.mode: expected one of append, merge, got 'upsert'"],
    ),
    (
        "pulsar source + delta sink without offsets",
        lambda t: t.replace("offsets: ${vars.data_dir}/offsets\n", ""),
        [
            "jobs/t.yaml: offsets: required when the source is pulsar and the sink is delta "
            "(the offset store table)"
        ],
    ),
    (
        "missing checkpoint",
        lambda t: t.replace("checkpoint: ${vars.data_dir}/checkpoints/${name}\n", ""),
        ["jobs/t.yaml: checkpoint: required (the directory where Spark records the stream's progress)"],
    ),
    (
        "bad trigger",
        lambda t: t + "trigger: available_now\n",
        [
            "jobs/t.yaml: trigger: expected availableNow, once or {processing_time: <duration>}, "
            "got 'available_now' (did you mean availableNow?)"
        ],
    ),
    (
        "bad trigger key",
        lambda t: t + "trigger: {interval: 30s}\n",
        ["jobs/t.yaml: trigger.interval: unknown key (expected processing_time)"],
    ),
    (
        "bad trigger duration",
        lambda t: t + "trigger: {processing_time: soon}\n",
        ["jobs/t.yaml: trigger.processing_time: expected a duration such as 500ms, 30s, 15m, got 'soon'"],
    ),
    (
        "bad duration",
        lambda t: t.replace(
            "topic: orders",
            "topic: orders\n    min_messages_per_trigger: 10\n    max_trigger_delay: 15 minutes",
        ),
        [
            "jobs/t.yaml: source.pulsar.max_trigger_delay: expected a duration such as 500ms, 30s, 15m, "
            "got '15 minutes'"
        ],
    ),
    (
        "delay without minimum",
        lambda t: t.replace("topic: orders", "topic: orders\n    max_trigger_delay: 15m"),
        ["jobs/t.yaml: source.pulsar.max_trigger_delay: only with min_messages_per_trigger"],
    ),
    (
        "min above max",
        lambda t: t.replace(
            "topic: orders",
            "topic: orders\n    min_messages_per_trigger: 500\n    max_messages_per_trigger: 100",
        ),
        ["jobs/t.yaml: source.pulsar.min_messages_per_trigger: 500 is above max_messages_per_trigger 100"],
    ),
    (
        "bad starting_offsets mapping value",
        lambda t: t.replace(
            "topic: orders",
            "topic: orders\n    starting_offsets:\n"
            "      orders-partition-0: 12:x\n      orders-partition-1: latest",
        ),
        [
            "jobs/t.yaml: source.pulsar.starting_offsets.orders-partition-0: "
            "expected 'ledger:entry:batch', earliest or latest, got '12:x'"
        ],
    ),
    (
        "bad starting_offsets word",
        lambda t: t.replace("topic: orders", "topic: orders\n    starting_offsets: oldest"),
        [
            "jobs/t.yaml: source.pulsar.starting_offsets: expected earliest, latest or a mapping of "
            "topic-partition to position, got 'oldest'"
        ],
    ),
    (
        "offsets and time",
        lambda t: t.replace(
            "topic: orders", "topic: orders\n    starting_offsets: latest\n    starting_time: 5"
        ),
        ["jobs/t.yaml: source.pulsar.starting_time: give starting_offsets or starting_time, not both"],
    ),
    (
        "bad starting_time",
        lambda t: t.replace("topic: orders", "topic: orders\n    starting_time: yesterday"),
        [
            "jobs/t.yaml: source.pulsar.starting_time: expected milliseconds since the epoch or an "
            "ISO-8601 time, got 'yesterday'"
        ],
    ),
    (
        "bad schema mode",
        lambda t: t.replace("topic: orders", "topic: orders\n    schema: avro"),
        ["jobs/t.yaml: source.pulsar.schema: expected one of raw, auto, got 'avro'"],
    ),
    (
        "bad service url",
        lambda t: t.replace("topic: orders", "topic: orders\n    service_url: http://broker:8080"),
        [
            "jobs/t.yaml: source.pulsar.service_url: expected pulsar://host:port or pulsar+ssl://host:port, "
            "got 'http://broker:8080'"
        ],
    ),
    (
        "bad topics pattern",
        lambda t: t.replace("topic: orders", "topics_pattern: orders-("),
        [
            "jobs/t.yaml: source.pulsar.topics_pattern: not a regular expression: "
            "missing ), unterminated subpattern at position 7"
        ],
    ),
    (
        "transform with sql and python",
        lambda t: t + "transform:\n  sql: SELECT * FROM source\n  python: jobs.x:f\n",
        ["jobs/t.yaml: transform: give exactly one of sql, python (got sql, python)"],
    ),
    (
        "bad python transform spec",
        lambda t: t + "transform:\n  python: jobs/transforms.py\n",
        [
            "jobs/t.yaml: transform.python: expected module:function (e.g. jobs.transforms:enrich), "
            "got 'jobs/transforms.py'"
        ],
    ),
    (
        "empty sql statement",
        lambda t: t + "transform:\n  sql: ['SELECT * FROM source', ' ']\n",
        ["jobs/t.yaml: transform.sql[1]: must not be empty"],
    ),
    (
        "bad name",
        lambda t: t.replace("name: t", "name: Orders Ingest"),
        [
            "jobs/t.yaml: name: expected lowercase letters, digits, '_' and '-' (e.g. orders_ingest), "
            "got 'Orders Ingest'"
        ],
    ),
    (
        "compression suggestion",
        lambda t: t.replace(
            "  delta:\n    path: ${vars.data_dir}/tables/t", "  pulsar:\n    compression: lz5"
        ),
        [
            "jobs/t.yaml: sink.pulsar.compression: expected one of NONE, LZ4, ZLIB, ZSTD, SNAPPY, got 'lz5' "
            "(did you mean LZ4?)"
        ],
    ),
    (
        "token and token file",
        lambda t: t.replace(
            "topic: orders", f"topic: orders\n    client: {{auth_token: {TOKEN}, auth_token_file: /t}}"
        ),
        ["jobs/t.yaml: source.pulsar.client.auth_token_file: give auth_token or auth_token_file, not both"],
    ),
    (
        "existing session with a master",
        lambda t: t + "spark:\n  session: existing\n",
        ["conf/local.yaml: spark.master: only with session: new (an existing session keeps its master)"],
    ),
    (
        "table name with deltalake",
        lambda t: t.replace("${vars.data_dir}/tables/t", "main.sales.orders"),
        [
            "jobs/t.yaml: sink.delta.path: 'main.sales.orders' is a table name: the deltalake engine takes "
            "paths (or use delta-spark)"
        ],
    ),
    (
        "offsets with a delta source",
        lambda t: t.replace("  pulsar:\n    topic: orders", "  delta:\n    path: /in"),
        ["jobs/t.yaml: offsets: only for a pulsar source"],
    ),
    (
        "backfill bounds",
        lambda t: t + "backfill: {from: '2024-06-02T00:00:00Z', to: '2024-06-01'}\n",
        ["jobs/t.yaml: backfill.to: must be after from"],
    ),
    (
        "backfill bad bound",
        lambda t: t + "backfill: {from: last week}\n",
        [
            "jobs/t.yaml: backfill.from: expected earliest, latest, a time (milliseconds or ISO-8601) or a "
            "mapping of topic-partition to 'ledger:entry:batch', got 'last week'"
        ],
    ),
    (
        "spark conf value",
        lambda t: t + "spark:\n  conf:\n    spark.x: [1]\n",
        ['jobs/t.yaml: spark.conf["spark.x"]: expected a string, got a list'],
    ),
    (
        "on_corrupt_message choice",
        lambda t: t.replace("topic: orders", "topic: orders\n    on_corrupt_message: quarantne"),
        [
            "jobs/t.yaml: source.pulsar.on_corrupt_message: expected one of fail, skip, quarantine, "
            "got 'quarantne' (did you mean quarantine?)"
        ],
    ),
    (
        "quarantine without its table",
        lambda t: t.replace("topic: orders", "topic: orders\n    on_corrupt_message: quarantine"),
        [
            "jobs/t.yaml: source.pulsar.quarantine_table: required with on_corrupt_message: quarantine "
            "(the Delta table)"
        ],
    ),
    (
        "quarantine table without quarantine",
        lambda t: t.replace(
            "topic: orders", "topic: orders\n    on_corrupt_message: skip\n    quarantine_table: /q"
        ),
        ["jobs/t.yaml: source.pulsar.quarantine_table: only with on_corrupt_message: quarantine"],
    ),
    (
        "quarantine table name with deltalake",
        lambda t: t.replace(
            "topic: orders", "topic: orders\n    on_corrupt_message: quarantine\n    quarantine_table: main.q"
        ),
        [
            "jobs/t.yaml: source.pulsar.quarantine_table: 'main.q' is a table name: the deltalake engine "
            "takes paths (or use delta-spark)"
        ],
    ),
]


@pytest.mark.parametrize(("what", "change", "expected"), CASES, ids=[c[0] for c in CASES])
def test_validation_messages(
    load: Callable[..., Job], what: str, change: Callable[[str], str], expected: list[str]
) -> None:
    assert problems(lambda: load(change(INGEST))) == expected


def test_every_problem_is_reported(load: Callable[..., Job]) -> None:
    text = INGEST.replace("name: t", "name: T").replace("topic: orders", "topic: orders\n    subscriptoin: s")
    text += "trigger: never\n"
    assert problems(lambda: load(text)) == [
        "jobs/t.yaml: name: expected lowercase letters, digits, '_' and '-' (e.g. orders_ingest), got 'T'",
        "jobs/t.yaml: source.pulsar.subscriptoin: unknown key (did you mean subscription?)",
        "jobs/t.yaml: trigger: expected availableNow, once or {processing_time: <duration>}, got 'never'",
    ]


def test_problems_name_the_layer_they_come_from(project: Path, load: Callable[..., Job]) -> None:
    write(project, "conf/local.yaml", PROFILE + "  mastr: x\n")
    assert problems(lambda: load(INGEST, "sink.delta.mode=upsert")) == [
        "jobs/t.yaml: sink.delta.mode: expected one of append, merge, got 'upsert'".replace(
            "jobs/t.yaml", "--set"
        ),
        "conf/local.yaml: spark.mastr: unknown key (did you mean master?)",
    ]


def test_profile_keys_are_limited(project: Path, load: Callable[..., Job]) -> None:
    write(project, "conf/local.yaml", PROFILE + "sink: {console: {}}\n")
    assert problems(lambda: load(INGEST)) == [
        "conf/local.yaml: sink: not a profile key (a profile sets vars, pulsar, delta, console and spark)"
    ]


def test_unknown_profile_and_missing_file(project: Path, load: Callable[..., Job]) -> None:
    assert problems(lambda: load(INGEST, env="prod")) == [
        "--env: no profile 'prod' in conf (profiles: local)"
    ]
    assert problems(lambda: load_job("jobs/none.yaml")) == ["jobs/none.yaml: no such file"]
    # no profile: the job says everything itself
    text = INGEST.replace("${vars.data_dir}", "/d")
    assert problems(lambda: load(text, env=None)) == ["jobs/t.yaml: source.pulsar.service_url: required"]
    job = load(text, "source.pulsar.service_url=pulsar://b:6650", env=None)
    assert job.spark.master is None and job.profile_file is None


def test_profile_pulsar_section_is_the_default_connection(project: Path, load: Callable[..., Job]) -> None:
    write(
        project,
        "conf/local.yaml",
        PROFILE.replace(
            "pulsar://localhost:6650",
            f"pulsar://localhost:6650\n  client: {{auth_token: {TOKEN}, operation_timeout_ms: 5}}",
        ),
    )
    job = load(INGEST.replace("topic: orders", "topic: orders\n    client: {operation_timeout_ms: 9}"))
    opts = job.source_options()
    assert opts["service.url"] == "pulsar://localhost:6650"
    assert opts["pulsar.client.authToken"] == TOKEN
    assert opts["pulsar.client.operationTimeoutMs"] == "9"  # the job's own key wins
    # a job drops an inherited key by setting it to null
    job = load(INGEST, "source.pulsar.client.auth_token=")
    assert "pulsar.client.authToken" not in job.source_options()


# -- YAML ----------------------------------------------------------------------------------------


def test_yaml_syntax_error_position(load: Callable[..., Job]) -> None:
    assert problems(lambda: load("name: t\nsource:\n  pulsar:\n    topic: [orders\nsink: {}\n")) == [
        "jobs/t.yaml:5:5: expected ',' or ']', but got ':' (while parsing a flow sequence)"
    ]
    assert problems(lambda: load("name: t\nsource: x: y\n")) == [
        "jobs/t.yaml:2:10: mapping values are not allowed here"
    ]
    assert problems(lambda: load("name: t\nname: u\n")) == [
        "jobs/t.yaml:2:1: duplicate key 'name' (first at line 1)"
    ]
    assert problems(lambda: load("")) == ["jobs/t.yaml: empty file (expected a job: name, source, sink, ...)"]
    assert problems(lambda: load("- a\n")) == [
        "jobs/t.yaml: expected a mapping (name, source, sink, ...), got a list"
    ]


def test_yaml_scalars_are_yaml_1_2(load: Callable[..., Job]) -> None:
    job = load(
        INGEST.replace(
            "topic: orders",
            "topic: orders\n    starting_offsets: {orders-partition-0: 5:3:0, orders-partition-1: 7:1:-1}",
        )
        + "description: 2024-06-01\nvars: {x: yes, y: 0755, z: 1:30}\n"
    )
    assert job.source.pulsar is not None
    assert job.source.pulsar.starting_offsets == {
        "orders-partition-0": "5:3:0",
        "orders-partition-1": "7:1:-1",
    }
    assert job.description == "2024-06-01"
    assert job.vars["x"] == "yes" and job.vars["y"] == "0755" and job.vars["z"] == "1:30"


# -- secrets ------------------------------------------------------------------------------------


def test_secrets_never_shown(load: Callable[..., Job], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PW_TOKEN", TOKEN)
    monkeypatch.setenv("PW_KEY", "azure-key-0x55aa")
    job = load(
        INGEST.replace("topic: orders", "topic: orders\n    client: {auth_token: '${env:PW_TOKEN}'}")
        + """\
vars:
  innocent_name: ${env:PW_TOKEN}
spark:
  conf:
    spark.hadoop.fs.s3a.secret.key: s3-secret-998877
  storage_options:
    AZURE_STORAGE_ACCOUNT_KEY: ${env:PW_KEY}
"""
    )
    assert job.source_options()["pulsar.client.authToken"] == TOKEN
    assert job.storage_options() == {"AZURE_STORAGE_ACCOUNT_KEY": "azure-key-0x55aa"}
    shown = [str(job), repr(job), repr(job.source), str(job.spark), json.dumps(redacted(job))]
    for text in shown:
        for secret in (TOKEN, "azure-key-0x55aa", "s3-secret-998877"):
            assert secret not in text
    r = redacted(job)
    assert r["source"]["pulsar"]["client"]["auth_token"] == MASK
    assert r["vars"]["innocent_name"] == MASK
    assert r["spark"]["conf"]["spark.hadoop.fs.s3a.secret.key"] == MASK
    assert r["spark"]["conf"]["spark.ui.enabled"] == "false"


def test_secrets_not_in_error_messages(load: Callable[..., Job], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PW_TOKEN", TOKEN)
    found = problems(
        lambda: load(
            INGEST.replace(
                "topic: orders",
                "topic: orders\n"
                "    client: {auth_token: '${env:PW_TOKEN}', operation_timeout_ms: '${env:PW_TOKEN}'}",
            )
        )
    )
    assert found == [
        "jobs/t.yaml: source.pulsar.client.operation_timeout_ms: expected an integer, "
        "got <the value of $PW_TOKEN>"  # named, never echoed (issue 29, section 7)
    ]
    found = problems(
        lambda: load(INGEST.replace("topic: orders", "topic: orders\n    client: {auth_token: [1]}"))
    )
    assert found == ["jobs/t.yaml: source.pulsar.client.auth_token: expected a string, got a list"]


# -- option maps --------------------------------------------------------------------------------


def test_source_options_exact(load: Callable[..., Job]) -> None:
    job = load(
        INGEST.replace(
            "topic: orders",
            """topics: [orders, returns]
    starting_offsets:
      orders-partition-0: 12:40:-1
      returns: earliest
    max_messages_per_trigger: 1000
    max_bytes_per_trigger: 1048576
    min_messages_per_trigger: 10
    max_trigger_delay: 15m
    fail_on_data_loss: false
    subscription: sub-1
    include_properties: false
    poll_timeout_ms: 5000
    receiver_queue_size: 500
    min_partitions: 6
    client:
      auth_token: """
            + TOKEN
            + """
      operation_timeout_ms: 30000
      connection_timeout_ms: 1000
      keep_alive_interval_seconds: 30
      tls_trust_certs_file_path: /ca.pem
      tls_allow_insecure_connection: false
      tls_hostname_verification_enable: true
      tls_certificate_file_path: /c.pem
      tls_key_file_path: /k.pem""",
        )
    )
    assert job.source_options() == {
        "service.url": "pulsar://localhost:6650",
        "topics": "orders,returns",
        "startingOffsets": '{"orders-partition-0":"12:40:-1","returns":"earliest"}',
        "maxMessagesPerTrigger": "1000",
        "maxBytesPerTrigger": "1048576",
        "minMessagesPerTrigger": "10",
        "maxTriggerDelay": "15m",
        "pollTimeoutMs": "5000",
        "receiverQueueSize": "500",
        "minPartitions": "6",
        "failOnDataLoss": "false",
        "includeProperties": "false",
        "subscriptionName": "sub-1",
        "pulsar.client.authToken": TOKEN,
        "pulsar.client.operationTimeoutMs": "30000",
        "pulsar.client.connectionTimeoutMs": "1000",
        "pulsar.client.keepAliveIntervalSeconds": "30",
        "pulsar.client.tlsTrustCertsFilePath": "/ca.pem",
        "pulsar.client.tlsAllowInsecureConnection": "false",
        "pulsar.client.tlsHostnameVerificationEnable": "true",
        "pulsar.client.tlsCertificateFilePath": "/c.pem",
        "pulsar.client.tlsKeyFilePath": "/k.pem",
    }
    job = load(
        INGEST.replace(
            "topic: orders",
            "topics_pattern: orders-.*\n    starting_time: 2024-06-01T00:00:00Z\n    schema: auto",
        )
    )
    assert job.source_options() == {
        "service.url": "pulsar://localhost:6650",
        "topicsPattern": "orders-.*",
        "startingTime": "1717200000000",
        "subscriptionName": "t",  # default: the job name
        "schema": "auto",
    }


@pytest.mark.parametrize("mode", ["fail", "skip", "quarantine"])
def test_on_corrupt_message_reaches_the_source(load: Callable[..., Job], mode: str) -> None:
    from pipelines.spark.planner import SourceSettings
    from pipelines.spark.reader import source_schema

    extra = f"\n    on_corrupt_message: {mode}" + (
        "\n    quarantine_table: /q" if mode == "quarantine" else ""
    )
    job = load(INGEST.replace("topic: orders", "topic: orders" + extra))
    options = job.source_options()
    assert options.get("onCorruptMessage") == mode  # the keys a job sets are passed on
    assert SourceSettings.parse(options, streaming=True).on_corrupt == mode
    columns = source_schema(options).fieldNames()
    assert columns[-2:] == (
        ["corruptReason", "corruptBytes"] if mode == "quarantine" else ["producerName", "sequenceId"]
    )


def test_on_corrupt_message_option_is_checked() -> None:
    from pipelines.errors import OptionError
    from pipelines.spark.planner import SourceSettings

    options = {"service.url": "pulsar://h:6650", "topic": "orders", "onCorruptMessage": "ignore"}
    with pytest.raises(
        OptionError, match=r"^onCorruptMessage: expected one of fail, skip, quarantine, got 'ignore'"
    ):
        SourceSettings.parse(options, streaming=True)


def test_source_options_accepted_by_the_source(load: Callable[..., Job]) -> None:
    from pipelines.spark.planner import SourceSettings

    job = load(
        INGEST.replace(
            "topic: orders",
            "topic: orders\n    starting_offsets: {orders: '1:2:-1'}\n    min_messages_per_trigger: 5\n"
            "    max_messages_per_trigger: 9\n    max_trigger_delay: 2h\n"
            f"    client: {{auth_token: {TOKEN}, operation_timeout_ms: 100}}",
        )
    )
    parsed = SourceSettings.parse(job.source_options(), streaming=True)
    assert parsed.max_trigger_delay_ms == 2 * 3_600_000
    assert parsed.subscription == "t"
    assert parsed.settings.auth_token == TOKEN
    assert parsed.max_rows == 9 and parsed.min_rows == 5
    batch = SourceSettings.parse(
        job.backfill_options(parse_bound("1000"), parse_bound("2000", end=True)), False
    )
    assert (batch.starting.kind, batch.starting.time_ms) == ("time", 1000)
    assert (batch.ending.kind, batch.ending.time_ms) == ("time", 2000)


def test_sink_options_exact_and_accepted(load: Callable[..., Job]) -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    from pipelines.spark.sink import sink_settings

    text = INGEST.replace("offsets: ${vars.data_dir}/offsets\n", "").replace(
        "  delta:\n    path: ${vars.data_dir}/tables/t",
        """  pulsar:
    topic: out
    batching: false
    batching_max_messages: 100
    batching_max_publish_delay_ms: 0
    compression: zstd
    max_pending_messages: 50
    send_timeout_ms: 0
    hashing_scheme: Murmur3_32Hash
    ignore_extra_columns: true
    client: {auth_token_file: /run/token}""",
    )
    job = load(text)
    opts = job.sink_options()
    assert opts == {
        "service.url": "pulsar://localhost:6650",
        "topic": "out",
        "batchingEnabled": "false",
        "batchingMaxMessages": "100",
        "batchingMaxPublishDelayMs": "0",
        "compressionType": "ZSTD",
        "maxPendingMessages": "50",
        "sendTimeoutMs": "0",
        "hashingScheme": "Murmur3_32Hash",
        "producerNamePrefix": "t",
        "ignoreExtraColumns": "true",
        "pulsar.client.authTokenFile": "/run/token",
    }
    settings = sink_settings(opts, StructType([StructField("value", BinaryType())]), streaming=True)
    assert settings.producer_name_prefix == "t" and settings.topic == "out"
    job = load(text, "sink.pulsar.exactly_once=false")
    assert "producerNamePrefix" not in job.sink_options()
    assert load(text, "sink.pulsar.producer_name_prefix=p1").sink_options()["producerNamePrefix"] == "p1"
    assert problems(
        lambda: load(text, "sink.pulsar.exactly_once=false", "sink.pulsar.producer_name_prefix=p")
    ) == ["--set: sink.pulsar.producer_name_prefix: only with exactly_once: true"]


def test_options_of_the_wrong_kind(load: Callable[..., Job]) -> None:
    job = load(INGEST)
    with pytest.raises(JobError, match=r"^jobs/t.yaml: sink: is delta, not pulsar$"):
        job.sink_options()


def test_backfill_options_and_bounds(load: Callable[..., Job]) -> None:
    job = load(INGEST + "backfill: {from: '2024-06-01T00:00:00Z'}\n")
    opts = job.backfill_options()
    assert opts["startingTime"] == "1717200000000" and opts["endingOffsets"] == "latest"
    assert "subscriptionName" not in opts
    opts = job.backfill_options(parse_bound('{"orders-partition-0": "3:4:-1"}'), parse_bound("99", end=True))
    assert opts["startingOffsets"] == '{"orders-partition-0":"3:4:-1"}' and opts["endingTime"] == "99"
    with pytest.raises(JobError, match=r"^jobs/t.yaml: backfill: no range"):
        load(INGEST).backfill_options()
    assert parse_bound("earliest") == Bound.model_construct(kind="earliest")
    with pytest.raises(BoundError, match=r"^earliest is not a valid end$"):
        parse_bound("earliest", end=True)
    with pytest.raises(BoundError, match=r"^p0: expected 'ledger:entry:batch', earliest or latest, got 'x'$"):
        parse_bound('{"p0": "x"}')
    with pytest.raises(BoundError, match=r"^not valid JSON"):
        parse_bound("{nope")


def test_trigger_and_spark_helpers(load: Callable[..., Job]) -> None:
    assert load(INGEST).trigger.spark_kwargs() == {"availableNow": True}
    assert load(INGEST + "trigger: once\n").trigger.spark_kwargs() == {"once": True}
    job = load(INGEST + "trigger: {processing_time: 30s}\n")
    assert job.trigger.spark_kwargs() == {"processingTime": "30000 milliseconds"}
    assert redacted(job)["trigger"] == {"processing_time": "30s"}
    assert job.app_name == "pipelines-t"
    assert job.source_file == "jobs/t.yaml" and job.env == "local" and job.profile_file == "conf/local.yaml"


def test_python_transform_is_imported(project: Path, load: Callable[..., Job]) -> None:
    write(project, "jobs/my_transforms.py", "def double(df):\n    return df\nNOT_A_FUNCTION = 1\n")
    sys.modules.pop("jobs", None)
    sys.modules.pop("jobs.my_transforms", None)
    try:
        job = load(INGEST + "transform: {python: 'jobs.my_transforms:double'}\n")
        fn = job.transform_function()
        assert fn is not None and fn(5) == 5
        assert problems(lambda: load(INGEST + "transform: {python: 'jobs.nothere:f'}\n")) == [
            "jobs/t.yaml: transform.python: no module named 'jobs.nothere'"
        ]
        assert problems(
            lambda: load(INGEST + "transform: {python: 'jobs.my_transforms:NOT_A_FUNCTION'}\n")
        ) == ["jobs/t.yaml: transform.python: module 'jobs.my_transforms' has no function 'NOT_A_FUNCTION'"]
    finally:
        sys.modules.pop("jobs", None)
        sys.modules.pop("jobs.my_transforms", None)
        sys.path[:] = [p for p in sys.path if p != str(project)]


# -- the CLI -------------------------------------------------------------------------------------


def test_cli_validate(project: Path) -> None:
    write(project, "jobs/a.yaml", INGEST.replace("name: t", "name: a"))
    write(project, "jobs/b.yaml", INGEST.replace("name: t", "name: b").replace("topic: orders", "topik: x"))
    code, out, _ = run_cli("validate", "jobs/a.yaml")
    assert (code, out) == (0, "ok  jobs/a.yaml\n")
    code, out, _ = run_cli("validate")  # every jobs/*.yaml
    assert code == 1
    assert out.splitlines() == [
        "ok  jobs/a.yaml",
        "jobs/b.yaml: source.pulsar.topik: unknown key (did you mean topic?)",
    ]
    # a problem is reported against the layer that set the key it names (here: the missing
    # merge_keys belong in the job's sink.delta), or the --set that set it
    code, out, _ = run_cli("validate", "jobs/a.yaml", "--set", "sink.delta.mode=merge")
    assert code == 1
    assert (
        out
        == "jobs/a.yaml: sink.delta.merge_keys: required with mode: merge (the columns that identify a row)\n"
    )
    code, out, _ = run_cli("validate", "jobs/a.yaml", "--set", "sink.delta.mode=upsert")
    assert (code, out) == (1, "--set: sink.delta.mode: expected one of append, merge, got 'upsert'\n")


def test_cli_validate_clashes_and_shared_problems(project: Path) -> None:
    write(project, "jobs/a.yaml", INGEST)
    write(project, "jobs/b.yaml", INGEST)
    code, out, _ = run_cli("validate")
    assert code == 1
    assert out.splitlines() == [
        "ok  jobs/a.yaml",
        "jobs/b.yaml: name: 't' is also the name of jobs/a.yaml",
        "jobs/b.yaml: checkpoint: also the checkpoint of jobs/a.yaml",
    ]
    write(project, "jobs/b.yaml", INGEST.replace("name: t", "name: u"))
    code, out, _ = run_cli("validate", "--set", "vars.x=${env:PW_UNSET_X}")
    assert out.splitlines() == [
        "--set: vars.x: environment variable PW_UNSET_X is not set "
        "(or give a default: ${env:PW_UNSET_X:-...})",
        "jobs/b.yaml: invalid (the problems above)",
    ]


def test_cli_validate_show_masks_secrets(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PW_TOKEN", TOKEN)
    write(
        project,
        "jobs/a.yaml",
        INGEST.replace("topic: orders", "topic: orders\n    client: {auth_token: '${env:PW_TOKEN}'}"),
    )
    code, out, err = run_cli("validate", "--show", "jobs/a.yaml")
    assert code == 0 and TOKEN not in out + err
    assert out.startswith("ok  jobs/a.yaml\n    name: t\n")
    shown = yaml.safe_load("\n".join(line[4:] for line in out.splitlines()[1:]))
    assert shown["source"]["pulsar"]["client"]["auth_token"] == MASK
    write(
        project,
        "jobs/a.yaml",
        INGEST.replace("orders", "orders\n    client: {auth_token: '${env:PW_TOKEN}', x: 1}"),
    )
    code, out, err = run_cli("validate", "jobs/a.yaml")
    assert code == 1 and TOKEN not in out + err


def test_cli_hands_jobs_to_the_runner(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    fake = types.SimpleNamespace(
        run_job=lambda job, again=None: calls.append(("run", job)) or 0,
        backfill=lambda job, start, end: calls.append(("backfill", job, start, end)) or 0,
        show_offsets=lambda job: calls.append(("show", job)) or 3,
        reset_offsets=lambda job, position: calls.append(("reset", job, position)) or 3,
    )
    monkeypatch.setattr("pipelines.jobs.cli._runner", lambda: fake)
    monkeypatch.setattr("pipelines.jobs.preflight.check", lambda job, command: None)  # no broker here
    write(project, "jobs/a.yaml", INGEST)

    assert run_cli("run", "jobs/a.yaml", "--set", "name=z")[0] == 0
    kind, job = calls[-1]
    assert (kind, job.name, job.env) == ("run", "z", "local")

    assert run_cli("backfill", "jobs/a.yaml", "--from", "2024-06-01T00:00:00Z", "--to", "latest")[0] == 0
    kind, job, start, end = calls[-1]
    assert kind == "backfill" and start.time_ms == 1717200000000 and end.kind == "latest"
    assert job.backfill_options(start, end)["startingTime"] == "1717200000000"

    assert run_cli("offsets", "show", "jobs/a.yaml") == (3, "", "")
    assert calls[-1][0] == "show"
    code, _, err = run_cli("offsets", "reset", "jobs/a.yaml", "--to", '{"orders": "1:2:-1"}')
    assert code == 2 and "add --yes to confirm" in err
    assert run_cli("offsets", "reset", "jobs/a.yaml", "--to", "earliest", "--yes")[0] == 3
    assert calls[-1][0] == "reset" and calls[-1][2].kind == "earliest"

    code, _, err = run_cli("backfill", "jobs/a.yaml")
    assert (
        code == 1 and err == "jobs/a.yaml: backfill: no range: give --from (and --to) or a backfill section\n"
    )
    code, _, err = run_cli("run", "jobs/nope.yaml")
    assert (code, err) == (1, "jobs/nope.yaml: no such file\n")
    with pytest.raises(SystemExit) as info, redirect_stderr(io.StringIO()):
        main(["backfill", "jobs/a.yaml", "--to", "earliest"])
    assert info.value.code == 2
    assert len(calls) == 4


# -- the project's own jobs and profiles ---------------------------------------------------------


@pytest.mark.parametrize("profile", sorted(p.stem for p in (REPO / "conf").glob("*.yaml")))
def test_every_job_validates_with_every_profile(profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("PIPELINES_PROJECT_DIR", raising=False)
    monkeypatch.setenv("PULSAR_URL", "pulsar+ssl://pulsar.example.com:6651")
    monkeypatch.setenv("PULSAR_TOKEN", TOKEN)
    jobs = sorted(str(p.relative_to(REPO)) for p in (REPO / "jobs").glob("*.yaml"))
    assert len(jobs) >= 3
    code, out, err = run_cli("validate", "--env", profile, "--show")
    assert code == 0, out + err
    assert [line for line in out.splitlines() if not line.startswith("    ")] == [f"ok  {j}" for j in jobs]
    assert TOKEN not in out
    for path in jobs:
        job = load_job(path, profile)
        if job.source.pulsar is not None:
            assert job.source_options()["service.url"].startswith("pulsar")
        if job.sink.pulsar is not None:
            assert job.sink_options()["producerNamePrefix"] == job.name


# -- one grammar for job files and Spark options -------------------------------------------------

GRAMMAR_CASES = [
    # (job key, Spark option, bad value in YAML, the same as a Spark option, problem under a key)
    ("max_trigger_delay", "maxTriggerDelay", "15 minutes", "15 minutes", None),
    ("starting_time", "startingTime", "yesterday", "yesterday", None),
    ("starting_offsets", "startingOffsets", "oldest", "oldest", None),
    ("starting_offsets", "startingOffsets", "'{nope'", "{nope", None),
    ("starting_offsets", "startingOffsets", "{p0: '12:x'}", '{"p0": "12:x"}', "p0"),
]


@pytest.mark.parametrize(("key", "option", "in_yaml", "in_spark", "under"), GRAMMAR_CASES)
def test_job_files_and_spark_options_share_one_grammar(
    load: Callable[..., Job], key: str, option: str, in_yaml: str, in_spark: str, under: str | None
) -> None:
    from pipelines.errors import OptionError
    from pipelines.spark.planner import SourceSettings

    lines = f"topic: orders\n    {key}: {in_yaml}\n    min_messages_per_trigger: 10"
    [found] = problems(lambda: load(INGEST.replace("topic: orders", lines)))
    options = {"service.url": "pulsar://h:6650", "topic": "orders", "minMessagesPerTrigger": "10"}
    with pytest.raises(OptionError) as info:
        SourceSettings.parse({**options, option: in_spark}, streaming=True)
    job_place = f"jobs/t.yaml: source.pulsar.{key}" + (f".{under}" if under else "")
    spark_place = option + (f"[{under}]" if under else "")
    assert found.startswith(job_place + ": ") and str(info.value).startswith(spark_place + ": ")
    assert found[len(job_place) + 2 :] == str(info.value)[len(spark_place) + 2 :]  # the same message


def test_a_job_files_values_mean_the_same_to_the_source(load: Callable[..., Job]) -> None:
    from pipelines.spark.planner import SourceSettings

    job = load(
        INGEST.replace(
            "topic: orders",
            "topic: orders\n    starting_time: '2024-06-01T00:00:00Z'\n"
            "    min_messages_per_trigger: 10\n    max_trigger_delay: 2min",
        )
    )
    opts = SourceSettings.parse(job.source_options(), streaming=True)
    assert (opts.starting.kind, opts.starting.time_ms) == ("time", 1717200000000)
    assert opts.max_trigger_delay_ms == 120_000
    offsets = '{"orders-partition-0": "3:4:-1", "orders-partition-1": -2}'
    job = load(INGEST.replace("topic: orders", f"topic: orders\n    starting_offsets: '{offsets}'"))
    opts = SourceSettings.parse(job.source_options(), streaming=True)
    assert opts.starting.positions() == {
        "persistent://public/default/orders-partition-0": Position(3, 4, -1),
        "persistent://public/default/orders-partition-1": "earliest",
    }
