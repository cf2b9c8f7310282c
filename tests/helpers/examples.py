"""Hypothesis profiles: ``ci`` runs today's example counts, ``dev`` a tenth of them.

The profile comes from ``PULSARWIRE_HYPOTHESIS_PROFILE`` (default ``ci``, which ``make test`` and
CI use); tests/conftest.py loads it before any test module is imported. A test that asks for
its own count writes ``settings(max_examples=examples(300))``: the count it needs under ``ci``,
scaled with the profile's default (100 under ``ci``, 10 under ``dev``), at least 5.
"""

from __future__ import annotations

import os

from hypothesis import settings

ENV = "PULSARWIRE_HYPOTHESIS_PROFILE"
#: hypothesis's default count: the scale ``examples`` is relative to
CI_EXAMPLES = 100

settings.register_profile("ci", max_examples=CI_EXAMPLES)
settings.register_profile("dev", max_examples=CI_EXAMPLES // 10)


def load_profile() -> str:
    """Load the profile named by ``PULSARWIRE_HYPOTHESIS_PROFILE`` (``ci`` when unset); its name."""
    name = os.environ.get(ENV, "ci")
    settings.load_profile(name)  # an unknown name fails here, naming the registered ones
    return name


def examples(ci_count: int) -> int:
    """``ci_count`` under ``ci``; scaled by the loaded profile's default count otherwise (at least 5,
    never more than ``ci_count``)."""
    scaled = ci_count * settings.default.max_examples // CI_EXAMPLES
    return max(min(5, ci_count), scaled)
