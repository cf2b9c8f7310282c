"""Generate ``definitions.py`` and ``../error_codes.py`` from Apache Kafka's message specs.

Run by hand, never at runtime: ``python -m pulsarwire.kafka.codec._generate KAFKA_GIT_DIR [REV]``
reads ``clients/src/main/resources/common/message/*.json`` (the facts: API keys, versions, field
names, order, types, flexible and tagged versions, defaults) and
``clients/src/main/java/org/apache/kafka/common/protocol/Errors.java`` (error names and numbers,
and whether each error's exception class is a ``RetriableException``) out of a git checkout of
apache/kafka, and writes them as plain Python literals in *our* compact format (documented at the
top of each generated module), then formats them with ruff. The runtime reads only the generated
modules.
"""

from __future__ import annotations

import json
import pprint
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

MESSAGE_DIR = "clients/src/main/resources/common/message"
ERRORS_JAVA = "clients/src/main/java/org/apache/kafka/common/protocol/Errors.java"
EXCEPTIONS_DIR = "clients/src/main/java/org/apache/kafka/common/errors"

# the APIs the three judge clients (librdkafka, kafka-python, aiokafka) negotiate
APIS = [
    "Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch", "FindCoordinator",
    "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups", "ListGroups",
    "SaslHandshake", "ApiVersions", "CreateTopics", "DeleteTopics", "InitProducerId",
    "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit", "DescribeConfigs",
    "SaslAuthenticate", "CreatePartitions", "DeleteGroups", "OffsetDelete",
]  # fmt: skip

NEVER = 32767  # "N+" is stored as (N, NEVER)


def _git(repo: Path, rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), "show", f"{rev}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def _versions(text: str | None) -> tuple[int, int] | None:
    if text is None or text == "none":
        return None
    if text.endswith("+"):
        return (int(text[:-1]), NEVER)
    if "-" in text:
        lo, hi = text.split("-")
        return (int(lo), int(hi))
    return (int(text), int(text))


def _snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def _default(ftype: str, raw: Any, nullable: bool) -> Any:
    if ftype.startswith("[]"):
        return None if raw == "null" else ()
    if raw is None:
        return {
            "bool": False, "string": "", "bytes": b"", "records": None, "uuid": b"\x00" * 16,
            "float64": 0.0,
        }.get(ftype, 0 if ftype[:3] in ("int", "uin") else None)  # fmt: skip
    if raw == "null":
        return None
    if ftype == "bool":
        return str(raw).lower() == "true"
    if ftype.startswith(("int", "uint")):
        return int(str(raw), 0)
    if ftype == "float64":
        return float(raw)
    if ftype == "string":
        return str(raw)
    return None


def _fields(fields: list[dict[str, Any]], common: dict[str, list[dict[str, Any]]]) -> tuple[Any, ...]:
    out = []
    for f in fields:
        ftype = f["type"]
        elem = ftype[2:] if ftype.startswith("[]") else ftype
        children = f.get("fields")
        if children is None and elem in common:
            children = common[elem]
        kind = ftype
        if children is not None:
            kind = "[]" if ftype.startswith("[]") else "{}"
        nullable = _versions(f.get("nullableVersions"))
        tag = f.get("tag")
        flex = f.get("flexibleVersions")
        out.append(
            (
                _snake(f["name"]),
                kind,
                _versions(f["versions"]),
                nullable,
                tag,
                _versions(f.get("taggedVersions")) if tag is not None else None,
                _default(ftype, f.get("default"), nullable is not None),
                _fields(children, common) if children is not None else (),
                False if flex == "none" else None,
            )
        )
    return tuple(out)


def _message(text: str) -> tuple[str, tuple[Any, ...]]:
    spec = json.loads(_strip_comments(text))
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
    valid = _versions(spec["validVersions"])
    assert valid is not None
    flexible = _versions(spec["flexibleVersions"])
    return spec["name"], (
        spec.get("apiKey", -1),
        valid[0],
        valid[1],
        flexible[0] if flexible else None,
        _fields(spec["fields"], common),
    )


def _retriable_classes(repo: Path, rev: str) -> set[str]:
    listing = subprocess.run(
        ["git", "--git-dir", str(repo), "ls-tree", "--name-only", f"{rev}:{EXCEPTIONS_DIR}"],
        check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    parent: dict[str, str] = {}
    for name in listing:
        m = re.search(r"class\s+(\w+)\s+extends\s+(\w+)", _git(repo, rev, f"{EXCEPTIONS_DIR}/{name}"))
        if m:
            parent[m.group(1)] = m.group(2)
    retriable = set()
    for cls in parent:
        seen = cls
        while seen in parent and seen != "RetriableException":
            seen = parent[seen]
        if seen == "RetriableException":
            retriable.add(cls)
    return retriable


def _errors(repo: Path, rev: str) -> list[tuple[str, int, bool, str]]:
    text = _git(repo, rev, ERRORS_JAVA)
    retriable = _retriable_classes(repo, rev)
    out = []
    literal = r'"(?:[^"\\]|\\.)*"'
    pattern = re.compile(
        rf"^\s{{4}}([A-Z0-9_]+)\(\s*(-?\d+),\s*(null|{literal}(?:\s*\+\s*{literal})*),\s*(\w+)?", re.M | re.S
    )
    for m in pattern.finditer(text):
        parts = [] if m.group(3) == "null" else re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(3))
        message = "".join(parts)
        exc = m.group(4) or ""
        out.append((m.group(1), int(m.group(2)), exc in retriable, message.replace('\\"', '"')))
    return out


DEFINITIONS_HEADER = '''# ruff: noqa: E501
"""Kafka message definitions as data (generated by ``_generate.py``; do not edit by hand).

Facts from apache/kafka ``clients/src/main/resources/common/message/*.json`` at {rev}, in our
format. ``MESSAGES`` maps a message name (``FetchRequest``, ``RequestHeader``, ...) to::

    (api_key, min_version, max_version, flexible_from, fields)

``api_key`` is -1 for headers; ``flexible_from`` is the first flexible version (None: never).
Each field is::

    (name, type, versions, nullable_versions, tag, tagged_versions, default, children, flexible)

``name`` is snake_case; ``type`` is a scalar (int8 int16 uint16 int32 uint32 int64 float64 bool
string bytes records uuid), ``[]scalar``, ``[]`` (array of structs: ``children``) or ``{{}}`` (a
struct: ``children``). Version ranges are ``(lo, hi)`` inclusive, ``hi`` {never} meaning "and
later", or None. ``flexible`` is False for a field that is never written in the flexible
(compact) encoding (the request header's client id), None otherwise.
"""

from __future__ import annotations

from typing import Any

'''

ERRORS_HEADER = '''# ruff: noqa: E501
"""Kafka protocol error codes (generated by ``_generate.py``; do not edit by hand).

Facts from apache/kafka ``Errors.java`` at {rev}: ``ERRORS`` lists ``(name, code, retriable,
message)``; ``retriable`` is whether Kafka's exception class for the code is a
``RetriableException``.
"""

from __future__ import annotations

'''


def main(argv: list[str]) -> None:
    repo = Path(argv[0])
    rev = argv[1] if len(argv) > 1 else "HEAD"
    commit = subprocess.run(
        ["git", "--git-dir", str(repo), "rev-parse", rev], check=True, capture_output=True, text=True
    ).stdout.strip()
    names = ["RequestHeader", "ResponseHeader"]
    for api in APIS:
        names += [f"{api}Request", f"{api}Response"]
    messages = dict(_message(_git(repo, rev, f"{MESSAGE_DIR}/{n}.json")) for n in names)
    here = Path(__file__).parent
    body = pprint.pformat(messages, width=110, sort_dicts=False)
    (here / "definitions.py").write_text(
        DEFINITIONS_HEADER.format(rev=f"apache/kafka@{commit}", never=NEVER)
        + f"NEVER = {NEVER}\n\nMESSAGES: dict[str, tuple[Any, ...]] = {body}\n"
    )
    errs = pprint.pformat(_errors(repo, rev), width=110)
    (here.parent / "error_codes.py").write_text(
        ERRORS_HEADER.format(rev=f"apache/kafka@{commit}")
        + f"ERRORS: list[tuple[str, int, bool, str]] = {errs}\n"
    )
    generated = [str(here / "definitions.py"), str(here.parent / "error_codes.py")]
    subprocess.run([sys.executable, "-m", "ruff", "format", *generated], check=True)


if __name__ == "__main__":
    main(sys.argv[1:])
