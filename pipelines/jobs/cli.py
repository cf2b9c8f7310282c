"""The ``pipelines`` command: validate, list, run, backfill and inspect YAML jobs.

``pipelines validate [JOB.yaml ...]`` loads and validates jobs (default: every
``jobs/*.yaml``) without starting Spark and prints ``ok  <file>`` or one line per
problem (``file: key.path: message``); the exit status is 1 when any job is invalid.
``validate`` never runs job code: a ``transform.python`` function is located by parsing
its module, not imported. ``list`` prints every job with its source and sink.
``run``, ``backfill`` and ``offsets show|reset`` validate their job the same way, run the
checks of :mod:`pipelines.jobs.preflight` (paths, the service URL, topics, positions: seconds,
no Spark) and then hand it to :mod:`pipelines.jobs.runner` (imported only then, so
``validate`` needs no Spark). ``run --dry-run`` and ``validate --plan`` stop after the
checks and print what a run would read. Every command takes ``--env`` (the profile,
default ``local``), ``--set key.path=value`` (repeatable), ``--conf-dir`` and ``-v``
(before or after the command). Position arguments (``--from``, ``--to``) are parsed here:
the runner receives :class:`~pipelines.options.bound.Bound` values for ``--from``, ``--to``
and ``offsets reset --to``.

Errors are short: the problem lines of an invalid job, or ``error: <one line>`` followed
by ``run with -v for the full trace``; tracebacks (ours, Py4J's, the JVM's) only with
``-v``. ``run`` and ``backfill`` stop after the current batch on Ctrl-C or SIGTERM and
at once on a second one (:mod:`pipelines.jobs.stopping`).

Exit status: 0 success (``pipelines`` alone prints the help), 1 an invalid job or a
failure, 2 a usage error, 130 / 143 stopped by SIGINT / SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from pipelines.errors import JobError, short_error
from pipelines.extras import check_pyspark, missing_extra
from pipelines.jobs import preflight, stopping
from pipelines.jobs.config import display_path, dump_yaml, find_jobs, load_job, redacted
from pipelines.jobs.idle import nothing_to_read
from pipelines.jobs.lock import job_lock
from pipelines.jobs.models import Job, source_kinds
from pipelines.masking import mask
from pipelines.options.bound import Bound, BoundError, parse_bound
from pulsarwire import __version__

__all__ = ["build_parser", "main"]


def _start(text: str) -> Bound:
    try:
        return parse_bound(text)
    except BoundError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _end(text: str) -> Bound:
    try:
        return parse_bound(text, end=True)
    except BoundError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_POSITION_HELP = (
    "earliest, latest, a time (milliseconds or ISO-8601, e.g. 2024-06-01T00:00:00Z) or JSON "
    '{"topic-partition": "ledger:entry:batch"}'
)


_VERBOSE_HELP = "log more and show full traces (-vv: debug)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``pipelines`` command."""
    # -v after the command too; SUPPRESS keeps an absent sub-command -v from resetting the main one
    verbosity = argparse.ArgumentParser(add_help=False)
    verbosity.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=_VERBOSE_HELP)
    common = argparse.ArgumentParser(add_help=False, parents=[verbosity])
    common.add_argument(
        "--env", default="local", help="profile: conf/<ENV>.yaml, or a path to a profile (default: local)"
    )
    common.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key after the profile and the job file (YAML value; repeatable)",
    )
    common.add_argument(
        "--conf-dir", type=Path, default=None, help="directory of the profiles (default: <project>/conf)"
    )

    parser = argparse.ArgumentParser(
        prog="pipelines", description="Validate and run YAML-defined Spark jobs over Pulsar and Delta."
    )
    parser.add_argument("--version", action="version", version=f"pipelines (pulsarwire) {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help=_VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("validate", parents=[common], help="validate job files without starting Spark")
    p.add_argument("jobs", nargs="*", metavar="JOB.yaml", help="job files (default: every jobs/*.yaml)")
    p.add_argument("--show", action="store_true", help="print each resolved job (secrets masked)")
    p.add_argument(
        "--plan",
        action="store_true",
        help="also connect and print the topics and start positions a run would use",
    )
    p.set_defaults(handler=_validate)

    p = sub.add_parser("list", parents=[common], help="list the jobs under jobs/ with their source and sink")
    p.set_defaults(handler=_list)

    p = sub.add_parser("run", parents=[common], help="run a job (streaming, until its trigger is done)")
    p.add_argument("job", metavar="JOB.yaml")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check and print the resolved job, its topics and start positions; start nothing",
    )
    p.set_defaults(handler=_run)

    p = sub.add_parser("backfill", parents=[common], help="read a bounded range of a Pulsar job's topics")
    p.add_argument("job", metavar="JOB.yaml")
    p.add_argument(
        "--from",
        dest="start",
        type=_start,
        default=None,
        help=f"start ({_POSITION_HELP}); default backfill.from",
    )
    p.add_argument(
        "--to", dest="end", type=_end, default=None, help="end (as --from, not earliest); default backfill.to"
    )
    p.set_defaults(handler=_backfill)

    p = sub.add_parser(
        "offsets", parents=[common], help="show or reset a job's positions in the offset store"
    )
    osub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = osub.add_parser("show", parents=[common], help="print the stored positions of the job")
    q.add_argument("job", metavar="JOB.yaml")
    q.set_defaults(handler=_offsets)
    q = osub.add_parser("reset", parents=[common], help="overwrite the stored positions of the job")
    q.add_argument("job", metavar="JOB.yaml")
    q.add_argument("--to", dest="position", type=_start, required=True, help=_POSITION_HELP)
    q.add_argument("--yes", action="store_true", help="confirm: the job resumes from the new positions")
    q.set_defaults(handler=_offsets)
    return parser


def _load(args: argparse.Namespace) -> Job:
    return load_job(args.job, args.env, args.overrides, args.conf_dir)


def _runner() -> ModuleType:
    """:mod:`pipelines.jobs.runner`, imported when a command runs Spark: it is the only module
    of this command that loads pyspark, so ``validate`` and ``list`` never do."""
    check_pyspark()  # one line for a runtime whose Spark is too old, before its imports fail
    from pipelines.jobs import runner

    return runner


def _validate(args: argparse.Namespace) -> int:
    paths = list(args.jobs) or [display_path(p) for p in find_jobs()]
    if not paths:
        print("no job files: give JOB.yaml or create jobs/*.yaml", file=sys.stderr)
        return 1
    failed = False
    printed: set[str] = set()
    names: dict[str, str] = {}
    checkpoints: dict[str, str] = {}
    for path in paths:
        try:
            job = load_job(path, args.env, args.overrides, args.conf_dir)
        except JobError as exc:
            failed = True
            new = [line for line in exc.problems if line not in printed]
            for line in new or [f"{path}: invalid (the problems above)"]:
                print(line)
            printed.update(new)
            continue
        clashes = []
        if job.name in names:
            clashes.append(f"{path}: name: {job.name!r} is also the name of {names[job.name]}")
        if job.checkpoint is not None and job.checkpoint in checkpoints:
            clashes.append(f"{path}: checkpoint: also the checkpoint of {checkpoints[job.checkpoint]}")
        names.setdefault(job.name, path)
        if job.checkpoint is not None:
            checkpoints.setdefault(job.checkpoint, path)
        if clashes:
            failed = True
            for line in clashes:
                print(line)
            continue
        if args.plan:
            try:
                preflight.check(job, "plan")
                plan = preflight.plan_lines(job)
            except JobError as exc:
                failed = True
                for line in exc.problems:
                    print(line)
                continue
        print(f"ok  {path}")
        if args.show:
            print(textwrap.indent(dump_yaml(redacted(job)), "    "), end="")
        if args.plan:
            print(mask(textwrap.indent("\n".join(plan), "    ")))
    return 1 if failed else 0


def _list(args: argparse.Namespace) -> int:
    paths = [display_path(p) for p in find_jobs()]
    if not paths:
        print("no job files under jobs/", file=sys.stderr)
        return 1
    rows: list[tuple[str, str, str]] = []
    for path in paths:
        try:
            job = load_job(path, args.env, args.overrides, args.conf_dir)
        except JobError as exc:
            rows.append(("(invalid)", path, f"{exc.problems[0]} (pipelines validate {path})"))
            continue
        rows.append((job.name, path, preflight.describe_target(job)))
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    for name, path, what in rows:
        print(mask(f"{name:<{width[0]}}  {path:<{width[1]}}  {what}"))
    return 0


def _run(args: argparse.Namespace) -> Any:
    job = _load(args)
    with stopping.installed(job.name) as stop:
        again = preflight.check(job, "run")
        if args.dry_run:
            print(f"{job.source_file}: resolved with --env {job.env} (secrets masked):")
            print(textwrap.indent(dump_yaml(redacted(job)), "    "), end="")
            print(mask("\n".join(preflight.plan_lines(job))))
            print(f"dry run: nothing started; `pipelines run {job.source_file}` runs it")
            return 0
        with job_lock(job, "run"):  # one run at a time (pipelines/jobs/lock.py)
            if stop.requested:
                return stop.exit_code
            idle = None if again else nothing_to_read(job)  # without Spark (pipelines/jobs/idle.py)
            if idle is not None:
                print(mask(idle))
                return 0
            code = _runner().run_job(job, again=again)
        return stop.exit_code if stop.requested else code


def _ranged(job: Job, what: str) -> None:
    """Refuse ``what`` (a backfill, an offsets reset) for a source that cannot resolve positions."""
    if not job.source.section.BOUNDED:
        raise job.error(
            "source", f"{what} needs a {source_kinds('BOUNDED')} source; this job reads {job.source.kind}"
        )


def _backfill(args: argparse.Namespace) -> Any:
    job = _load(args)
    _ranged(job, "backfill")
    job.backfill_window(args.start, args.end)  # no range: one line before anything starts
    with stopping.installed(f"{job.name} backfill") as stop:
        preflight.check(job, "backfill")
        code = _runner().backfill(job, args.start, args.end)
        return stop.exit_code if stop.requested else code


def _offsets(args: argparse.Namespace) -> Any:
    job = _load(args)
    if job.offsets is None:
        raise job.error("offsets", "this job has no offset store")
    if args.action == "reset":
        _ranged(job, "offsets reset")
        preflight.check(job, "offsets")
    if args.action == "reset" and not args.yes:
        print(
            f"offsets reset rewrites the stored positions of job {job.name!r} in {job.offsets}; "
            "add --yes to confirm",
            file=sys.stderr,
        )
        return 2
    if args.action == "show":
        return _runner().show_offsets(job)
    with job_lock(job, "offsets reset"):  # never under a running job's feet
        return _runner().reset_offsets(job, args.position)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    verbose = getattr(args, "verbose", 0) or 0
    if verbose:
        logging.basicConfig(
            level=logging.DEBUG if verbose > 1 else logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    try:
        result = args.handler(args)
    except JobError as exc:
        print(mask(str(exc)), file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before a run installed its handlers (loading, validate, offsets)
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        # an extra that is not installed (pyspark for run): the one line says which
        extra = missing_extra(exc) if isinstance(exc, ModuleNotFoundError) else None
        if verbose:
            print(mask(traceback.format_exc()), end="", file=sys.stderr)
        print(f"error: {extra or mask(short_error(exc))}", file=sys.stderr)
        if not verbose and extra is None:
            print("run with -v for the full trace", file=sys.stderr)
        return 1
    return int(result or 0)
