"""The one version string: the installed package's metadata (pyproject.toml's ``version``).

Read once at import. A source tree used without installing (``PYTHONPATH=.``) has no metadata;
it then reports ``0+unknown`` rather than a number that could be stale.
"""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("pulsarwire")
except metadata.PackageNotFoundError:
    __version__ = "0+unknown"
