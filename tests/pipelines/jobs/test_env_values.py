"""A value from the environment that validation rejects is never echoed (issue 29, section 7).

The error names the variable instead: the value may be a credential a user put in an environment
variable (CI secrets, Databricks secret scopes), and error output goes to logs. Checked through
``pipelines validate`` as its own process.
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import pipelines
from tests.helpers.orders_job import INGEST

SECRET = "s3cr3t-hunter2-0042"


@pytest.mark.parametrize(
    ("override", "variable", "line"),
    [
        (
            "source.pulsar.max_messages_per_trigger=${env:MAX_ROWS}",
            "MAX_ROWS",
            "--set: source.pulsar.max_messages_per_trigger: expected an integer, "
            "got <the value of $MAX_ROWS>",
        ),
        (
            "trigger=${env:TRIGGER}",
            "TRIGGER",
            "--set: trigger: expected availableNow, once or {processing_time: <duration>}, "
            "got <the value of $TRIGGER>",
        ),
    ],
    ids=["integer", "choice"],
)
def test_a_rejected_value_from_the_environment_names_its_variable(
    override: str, variable: str, line: str
) -> None:
    ran = pipelines("validate", INGEST, "--set", override, **{variable: SECRET})
    assert ran.code == 1, ran
    assert SECRET not in ran.out + ran.err
    assert ran.out_lines[0].startswith(line), ran


def test_a_rejected_profile_value_from_the_environment_is_not_echoed() -> None:
    url = f"bogus://{SECRET}@broker:6650"
    ran = pipelines("validate", INGEST, PULSAR_URL=url)
    assert ran.code == 1, ran
    assert SECRET not in ran.out + ran.err
    assert (
        "conf/local.yaml: pulsar.service_url: expected pulsar://host:port or pulsar+ssl://host:port, "
        "got <the value of $PULSAR_URL>" in ran.out
    ), ran
