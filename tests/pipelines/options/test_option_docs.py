"""The docs' option tables agree with the option models (names, defaults, doc lines).

docs/spark.md and docs/sink.md hold tables generated from the models
(``python -m pipelines.options.docs FILE``); docs/jobs.md's key tables are written by hand
and checked here: every job key is a key of its section, every key of the section is
listed, and each key's Spark option is the one the model maps it to.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipelines.jobs.models import ClientConfig, PulsarSink, PulsarSource
from pipelines.options.docs import TABLES, render, table
from pipelines.options.model import OptionsModel
from pipelines.options.source import SourceOptions

ROOT = Path(__file__).resolve().parents[3]
GENERATED = {"docs/spark.md": ("source", "client"), "docs/sink.md": ("sink",)}


@pytest.mark.parametrize("doc", sorted(GENERATED))
def test_generated_option_tables_are_the_models(doc: str) -> None:
    text = (ROOT / doc).read_text()
    for name in GENERATED[doc]:
        assert f"<!-- options: {name} -->\n" in text
    assert render(text) == text, (
        f"{doc} differs from the option models: python -m pipelines.options.docs {doc}"
    )


def test_a_changed_model_shows_in_the_table() -> None:
    rows = table(*TABLES["source"]).splitlines()
    assert "| `maxTriggerDelay` | `15m` | how long `minMessagesPerTrigger` may wait" in "\n".join(rows)
    assert "| `service.url` | required |" in rows[2]
    assert len(rows) == 2 + len(SourceOptions.spark_names())
    stale = (
        (ROOT / "docs/sink.md")
        .read_text()
        .replace("| `batchingMaxMessages` | 1000 |", "| `batchingMaxMessages` | 100 |")
    )
    assert render(stale) != stale


def _table_after(text: str, heading: str) -> list[list[str]]:
    """The cells of the first table after ``heading`` (header and rule left out)."""
    rest = text[text.index(heading) :]
    lines = [line for line in rest.splitlines() if line.startswith("|")]
    start = rest.splitlines().index(lines[0])
    out: list[list[str]] = []
    for line in rest.splitlines()[start + 2 :]:
        if not line.startswith("|"):
            break
        out.append([c.strip() for c in line.strip("|").split("|")])
    return out


def _keys(cell: str) -> list[str]:
    """The job keys of a cell: each backticked name (``auth: {...}`` counts as ``auth``)."""
    return [re.match(r"[a-z_]+", k).group(0) for k in re.findall(r"`([^`]+)`", cell)]  # type: ignore[union-attr]


def _field(model: type[OptionsModel], key: str, where: str) -> str:
    """The field of job key ``key``; fails naming the table when there is none."""
    found = [n for n, f in model.model_fields.items() if key in (n, f.alias)]
    assert found, f"docs/jobs.md {where}: {key} is not a key of {model.__name__}"
    return found[0]


def _job_keys(model: type[OptionsModel]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


@pytest.mark.parametrize(
    ("heading", "model"),
    [("### `source.pulsar`", PulsarSource), ("### `sink.pulsar`", PulsarSink)],
)
def test_jobs_md_key_tables_match_the_models(heading: str, model: type[OptionsModel]) -> None:
    rows = _table_after((ROOT / "docs/jobs.md").read_text(), heading)
    listed: list[str] = []
    for key_cell, option_cell, *_ in rows:
        keys = _keys(key_cell)
        listed += keys
        options = re.findall(r"`([^`]+)`", option_cell)
        for key, shown in zip(keys, options, strict=False):
            spark = model.spark_names().get(_field(model, key, heading))
            expected = f"{spark}*" if spark is not None and spark.endswith(".") else spark
            assert shown == expected, f"docs/jobs.md {heading}: {key} is {expected}, not {shown}"
        if option_cell in ("—", ""):
            for key in keys:
                name = _field(model, key, heading)
                assert name not in model.spark_names(), f"docs/jobs.md {heading}: {key} has a Spark option"
    assert sorted(listed) == sorted(_job_keys(model)), f"docs/jobs.md {heading} lists other keys"


def test_jobs_md_client_table_matches_the_model() -> None:
    rows = _table_after((ROOT / "docs/jobs.md").read_text(), "### `client`")
    listed = {k for key_cell, *_ in rows for k in _keys(key_cell)}
    assert listed == _job_keys(ClientConfig)
    names = ClientConfig.spark_names()
    for key_cell, option_cell, *_ in rows:
        keys = [k for k in _keys(key_cell) if k in names]
        shown = re.findall(r"`pulsar\.client\.([A-Za-z]+)`", option_cell)
        for key, option in zip(keys, shown, strict=False):
            assert names[key] == option, f"docs/jobs.md client: {key} is {names[key]}, not {option}"
