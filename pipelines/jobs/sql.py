"""Transform SQL checked without Spark: each statement is parsed as Spark SQL by sqlglot.

``pipelines validate`` (and every command, as it loads the job) parses each ``transform``
statement with sqlglot's Spark dialect, so that a syntax error is reported before a JVM starts,
in one line naming the statement and the place: ``jobs/x.yaml: transform.sql[1]: syntax error
at line 2, column 9 near 'FORM': ...`` (``transform[i].sql[j]`` for a list of steps). Only the
syntax is checked: names of columns and functions are Spark's to resolve when the job runs
(its analysis error is then one line too). sqlglot comes with the ``jobs`` extra and is
imported here only.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["sql_problems", "syntax_error"]


def syntax_error(statement: str) -> str | None:
    """Where and why ``statement`` is not Spark SQL (None when it parses)."""
    import sqlglot
    from sqlglot.errors import ParseError, TokenError

    try:
        sqlglot.parse(statement, read="spark")
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        line, col = first.get("line"), first.get("col")
        near = (first.get("highlight") or "").strip()
        why = str(first.get("description") or exc).split("\n")[0]
        where = f" at line {line}, column {col}" if line is not None else ""
        return f"syntax error{where}" + (f" near {near!r}" if near else "") + f": {why}"
    except TokenError as exc:
        return f"syntax error: {str(exc).splitlines()[0]}"
    return None


def sql_problems(statements: Sequence[str]) -> list[tuple[int, str]]:
    """``(index, syntax error)`` for each of a step's statements that does not parse."""
    out = []
    for i, statement in enumerate(statements):
        problem = syntax_error(statement)
        if problem is not None:
            out.append((i, problem))
    return out
