"""``trainscope runs``: the run history — the saved analysis summaries, newest first, filtered."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from trainscope import api
from trainscope.api.errors import EXIT_OK
from trainscope.argtypes import positive_int
from trainscope.common import fail_on
from trainscope.common import one_line_errors
from trainscope.reports.history import render_fixes_text
from trainscope.reports.history import render_run_text
from trainscope.reports.history import render_runs_text
from trainscope.reports.output import to_json
from trainscope.traces.safe_text import safe_strings
from trainscope.traces.safe_text import visible

if TYPE_CHECKING:
    from trainscope.api.cache import CachedReport
    from trainscope.api.report import Report


def add_store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        metavar="PATH",
        help="the run history (default: $TRAINSCOPE_STORE, else "
        "$XDG_DATA_HOME/trainscope/runs.db, else ~/.local/share/trainscope/runs.db)",
    )


def add_save_args(p: argparse.ArgumentParser) -> None:
    """``--save``, ``--store``, ``--tag``: what analyze (and watch) add to save a run in the history."""
    p.add_argument(
        "--save",
        action="store_true",
        help="save the analysis summary (verdict, every step's time, sinks, top kernels, fixes with their "
        "projections, GPU, ranks, git commit of the current directory) in the run history — never "
        "the trace; see `trainscope runs`",
    )
    add_store_arg(p)
    p.add_argument("--tag", metavar="TAG", help="with --save: the model or job this run belongs to (resnet50-bs256)")


def save_report(report: Report | CachedReport, args: argparse.Namespace, saved_by: str = "analyze") -> int:
    """Save ``report`` when ``args.save``; one line on stderr names the run."""
    if not getattr(args, "save", False):
        return EXIT_OK

    run = api.save_run(report, args.store, tag=args.tag, saved_by=saved_by)
    sys.stderr.write(f"trainscope: saved as {run.label} in {args.store or api.default_store_path()}\n")
    return EXIT_OK


def watch_save_problem(args: argparse.Namespace) -> str | None:
    """``watch --save`` saves the analysis of what the watch recorded: it needs --record (or --replay)."""
    if getattr(args, "save", False) and not (args.record or args.replay):
        return "--save needs --record FILE (the run history keeps the analysis of the recording)"
    return None


def save_recording(args: argparse.Namespace) -> int:
    """At the end of ``watch --save``: analyze the recording (or the replayed file) and save it."""
    if not getattr(args, "save", False):
        return EXIT_OK

    try:
        report = api.analyze(args.record or args.replay)
    except api.TrainscopeError as e:
        return fail_on(e)
    return save_report(report, args, "watch")


def register(r: argparse.ArgumentParser) -> None:
    """The arguments of ``trainscope runs`` on its parser (named, with its help line, by trainscope/cli.py's table)."""
    r.description = (
        "List the saved runs, newest first: id, when, tag, git commit, GPU, steps, step time p50 and the "
        "verdict, and which are baselines. A run is the analysis summary of a trace (verdict, every step's "
        "time, sinks, top kernels, the fixes with their projections), never the trace itself. Pass an id "
        "(or latest, baseline[:TAG]) to show one run; --fixes lists the projected and achieved gains "
        "`diff --save` recorded."
    )
    r.epilog = (
        "examples:\n"
        "  trainscope runs\n"
        "  trainscope runs --tag resnet50 --verdict data --limit 10\n"
        "  trainscope runs --commit 3f2a --format json\n"
        "  trainscope runs 12 --format json          # one run with its whole summary\n"
        "  trainscope runs --fixes                   # projected against achieved, every recorded fix\n\n"
        "exit codes: 0 listed, 2 bad input (unknown run, unreadable store)"
    )
    r.formatter_class = argparse.RawDescriptionHelpFormatter
    r.add_argument("ref", nargs="?", metavar="RUN", help="show one run: an id, latest[:TAG] or baseline[:TAG]")
    add_store_arg(r)
    r.add_argument("--tag", metavar="TAG", help="only runs with this tag")
    r.add_argument(
        "--verdict",
        metavar="AXIS_OR_FINDING",
        help="only runs with this verdict: an axis (data, algorithm, machine, balanced, "
        "insufficient_evidence) or a finding id (data/input-wait)",
    )
    r.add_argument("--gpu", metavar="TEXT", help="only runs whose GPU name contains TEXT (case-insensitive)")
    r.add_argument("--commit", metavar="PREFIX", help="only runs saved at a git commit starting with PREFIX")
    r.add_argument("--source", metavar="TEXT", help="only runs whose trace path contains TEXT")
    r.add_argument("--since", metavar="DATE", help="only runs saved on or after DATE (ISO 8601, UTC: 2026-05-01)")
    r.add_argument("--limit", type=positive_int, default=50, metavar="N", help="at most N runs (default 50)")
    r.add_argument("--fixes", action="store_true", help="list the recorded fix outcomes (projected against achieved)")
    r.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or JSON on stdout")
    r.set_defaults(run=run)


@one_line_errors
def run(args: argparse.Namespace) -> int:
    store = api.open_store(args.store, read_only=True) if _exists(args.store) else None
    path = args.store or api.default_store_path()
    if store is None:  # nothing saved yet: an empty history, not an error
        if args.ref is not None:
            raise api.BadInput(f"no run store at {path} (save a run with `trainscope analyze TRACE --save`)")
        sys.stdout.write(to_json({"store": path, "runs": []}) if args.format == "json" else render_runs_text([], path))
        return EXIT_OK
    with store:
        if args.fixes:
            rows = store.outcomes(args.ref)
            sys.stdout.write(
                to_json({"store": path, "fix_outcomes": rows})
                if args.format == "json"
                else render_fixes_text(safe_strings(rows))
            )
            return EXIT_OK
        if args.ref is not None:
            one = store.get(args.ref)
            doc = one.to_dict(full=True)
            sys.stdout.write(to_json(doc) if args.format == "json" else render_run_text(safe_strings(doc), path))
            return EXIT_OK
        runs = store.runs(
            tag=args.tag,
            verdict=args.verdict,
            gpu=args.gpu,
            commit=args.commit,
            source=args.source,
            since=args.since,
            limit=args.limit,
        )
        docs = [r.to_dict() for r in runs]
        skipped = list(store.skipped)
    warn_skipped(skipped, path)
    if args.format == "json":
        sys.stdout.write(to_json({"store": path, "runs": docs, **({"skipped": skipped} if skipped else {})}))
    else:
        sys.stdout.write(render_runs_text(safe_strings(docs), path))
    return EXIT_OK


def warn_skipped(lines: list[str], path: str) -> None:
    """One stderr line per damaged run a listing left out (the others are listed)."""

    for line in lines:
        sys.stderr.write(f"trainscope: warning: {visible(path)}: {visible(line)}\n")


def _exists(store: str | None) -> bool:
    import os

    return os.path.exists(store or api.default_store_path())
