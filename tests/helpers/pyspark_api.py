"""Which parts of pyspark's Python data source API a pyspark source tree has, read without importing it.

:data:`NEEDED` lists what ``pipelines.spark`` uses (classes of ``pyspark/sql/datasource.py`` and
``pyspark/sql/streaming/datasource.py`` and their methods we call or override);
:func:`missing` reads a tree's two modules with :mod:`ast` and returns what it lacks. The
suite checks the installed pyspark with it, and the newest claimed one in a venv of its own
(tests/test_newest_pyspark.py). As a script it measures releases: download them, e.g.
``pip download --no-deps pyspark-client==4.1.0 -d /tmp/x`` (the Python part, 1.5 MB; 3.5 has
only ``pyspark``), unpack, and run ``python tests/helpers/pyspark_api.py DIR...`` with each
unpacked directory: it prints what each lacks (docs/install.md has the table this gave).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

#: module (relative to the directory holding ``pyspark``) -> class -> methods
NEEDED: dict[str, dict[str, tuple[str, ...]]] = {
    "pyspark/sql/datasource.py": {
        "DataSource": ("name", "schema", "reader", "streamReader", "writer", "streamWriter"),
        "DataSourceReader": ("partitions", "read"),
        "DataSourceStreamReader": (
            "initialOffset",
            "latestOffset",
            "partitions",
            "read",
            "commit",
            "stop",
            "getDefaultReadLimit",
            "reportLatestOffset",
        ),
        "InputPartition": (),
        "DataSourceWriter": ("write", "commit", "abort"),
        "DataSourceStreamWriter": ("write", "commit", "abort"),
        "DataSourceArrowWriter": (),
        "DataSourceStreamArrowWriter": (),
        "WriterCommitMessage": (),
    },
    "pyspark/sql/streaming/datasource.py": {
        "ReadLimit": (),
        "ReadAllAvailable": (),
        "ReadMaxRows": (),
        "ReadMinRows": (),
        "ReadMaxBytes": (),
        "SupportsTriggerAvailableNow": ("prepareForTriggerAvailableNow",),
    },
}


#: the arguments of latestOffset with admission control
_LIMITED = ["self", "start", "limit"]


def _classes(path: Path) -> dict[str, dict[str, list[str]]] | None:
    if not path.is_file():
        return None
    out: dict[str, dict[str, list[str]]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {
                f.name: [a.arg for a in f.args.args] for f in node.body if isinstance(f, ast.FunctionDef)
            }
    return out


def missing(root: Path) -> list[str]:
    """What the pyspark tree under ``root`` (the directory holding ``pyspark/``) lacks of :data:`NEEDED`.

    ``latestOffset`` must take ``(start, limit)``: admission control.
    """
    out: list[str] = []
    for module, wanted in NEEDED.items():
        found = _classes(root / module)
        if found is None:
            out.append(f"{module} (the module)")
            continue
        for name, methods in wanted.items():
            if name not in found:
                out.append(f"{module}: {name}")
                continue
            out += [f"{module}: {name}.{m}" for m in methods if m not in found[name]]
            args = found[name].get("latestOffset", _LIMITED)
            limited = args == _LIMITED
            if name == "DataSourceStreamReader" and not limited:
                out.append(f"{module}: {name}.latestOffset(start, limit)")
    return out


def root_of(tree: Path) -> Path:
    """The directory holding ``pyspark/`` in an unpacked sdist, a site-packages or a source tree."""
    if (tree / "pyspark").is_dir():
        return tree
    found = sorted(p.parent for p in tree.glob("**/pyspark/sql/datasource.py"))
    return found[0].parent.parent if found else tree


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        gaps = missing(root_of(Path(arg)))
        print(f"{arg}: " + ("everything" if not gaps else "lacks " + ", ".join(gaps)))
