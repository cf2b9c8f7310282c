"""The option tables of the docs, generated from the option models.

A table in a Markdown file sits between ``<!-- options: NAME -->`` and ``<!-- /options -->``;
NAME is one of :data:`TABLES` (``source``, ``sink``, ``client``). :func:`render` gives a
document with every such table written from its model: one row per Spark option, its
default and its one-line doc (the field's ``description``). ``python -m
pipelines.options.docs FILE...`` rewrites the files; the docs tests fail when a table and
its model disagree.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pydantic.fields import FieldInfo

from pipelines.options.client import CLIENT_PREFIX, ClientOptions
from pipelines.options.model import OptionsModel
from pipelines.options.sink import SinkOptions
from pipelines.options.source import SourceOptions

#: table name -> the model it documents and the prefix of its options
TABLES: dict[str, tuple[type[OptionsModel], str]] = {
    "source": (SourceOptions, ""),
    "sink": (SinkOptions, ""),
    "client": (ClientOptions, CLIENT_PREFIX),
}

_BLOCK = re.compile(r"(<!-- options: (\w+) -->\n)(.*?)(<!-- /options -->)", re.S)


def default_text(f: FieldInfo) -> str:
    """A field's default as a table cell: ``required``, ``—`` (none), or the value."""
    if f.is_required():
        return "required"
    if f.default_factory is not None:
        return ""
    value = f.default
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f"`{value}`"
    return str(value)


def table(model: type[OptionsModel], prefix: str = "") -> str:
    """The Markdown table of ``model``'s Spark options (named with ``prefix`` in front)."""
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for name, spark in model.spark_names().items():
        f = model.model_fields[name]
        shown = f"`{prefix}{spark}*`" if spark.endswith(".") else f"`{prefix}{spark}`"
        rows.append(f"| {shown} | {default_text(f)} | {f.description or ''} |")
    return "\n".join(rows) + "\n"


def render(text: str) -> str:
    """``text`` with every marked option table written from its model (KeyError: an unknown table)."""
    return _BLOCK.sub(lambda m: m.group(1) + table(*TABLES[m.group(2)]) + m.group(4), text)


def main(paths: list[str]) -> int:
    """Rewrite the option tables of ``paths``; prints the files it changed."""
    for path in map(Path, paths):
        old = path.read_text()
        new = render(old)
        if new != old:
            path.write_text(new)
            print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
