"""The ``pipelines`` console script: :mod:`pipelines.jobs.cli`, or one line naming a missing extra.

The command's modules import pydantic and pyyaml, which come with the ``jobs`` extra, not with
``pip install pulsarwire``: without them the command says which extra to install
(:func:`pipelines.extras.missing_extra`) and exits 1, instead of a traceback; so does an
installed connector that cannot be loaded (:mod:`pipelines.connectors`). Everything else is
:func:`pipelines.jobs.cli.main`'s.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pipelines.errors import PipelinesError
from pipelines.extras import missing_extra


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pipelines ARGS``; returns the exit status."""
    try:
        from pipelines.jobs.cli import main as command
    except ModuleNotFoundError as exc:
        line = missing_extra(exc)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 1
    except PipelinesError as exc:  # an installed connector that cannot be loaded
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return command(argv)
