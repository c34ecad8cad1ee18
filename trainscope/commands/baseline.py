"""``trainscope baseline``: name the run a tag is compared against (``diff --against baseline``)."""

from __future__ import annotations

import argparse
import sys

from trainscope import api
from trainscope.api.errors import EXIT_OK
from trainscope.commands.runs import add_store_arg
from trainscope.commands.runs import warn_skipped
from trainscope.common import one_line_errors
from trainscope.reports.output import to_json
from trainscope.traces.safe_text import safe_strings
from trainscope.traces.safe_text import visible


def register(b: argparse.ArgumentParser) -> None:
    """The arguments of ``trainscope baseline`` on its parser (named, with its help line, by trainscope/cli.py's table)."""
    b.description = (
        "`baseline set RUN` makes a saved run the baseline of its tag (or of --tag TAG; a run without "
        "a tag and no --tag sets the untagged baseline). `baseline show` prints the baselines."
    )
    b.epilog = (
        "examples:\n"
        "  trainscope baseline set 12\n"
        "  trainscope baseline set latest:resnet50 --tag resnet50\n"
        "  trainscope baseline show\n\n"
        "exit codes: 0 done, 2 bad input (unknown run, bad tag, unreadable store)"
    )
    b.formatter_class = argparse.RawDescriptionHelpFormatter
    actions = b.add_subparsers(dest="action", metavar="ACTION")
    s = actions.add_parser("set", help="make RUN the baseline of its tag (or of --tag)")
    s.add_argument("ref", metavar="RUN", help="a saved run: an id, latest[:TAG] or baseline[:TAG]")
    s.add_argument("--tag", metavar="TAG", help="the tag whose baseline RUN becomes (default: RUN's own tag)")
    add_store_arg(s)
    s.add_argument("--format", choices=("text", "json"), default="text")
    sh = actions.add_parser("show", help="print every tag's baseline")
    add_store_arg(sh)
    sh.add_argument("--format", choices=("text", "json"), default="text")
    b.set_defaults(run=run)


@one_line_errors
def run(args: argparse.Namespace) -> int:
    if args.action is None:
        raise api.BadInput("baseline needs an action: set RUN [--tag TAG] or show")
    if args.action == "set":
        with api.open_store(args.store) as store:
            r = store.set_baseline(args.ref, args.tag)
        tag = args.tag if args.tag is not None else (r.tag or "")
        if args.format == "json":
            sys.stdout.write(to_json({"tag": tag, "run": r.to_dict()}))
        else:
            sys.stdout.write(
                f"baseline{f' of {tag}' if tag else ' (untagged)'}: {r.label} — {visible(r.source)} "
                f"(step p50 {r.summary.step_p50_ms:.2f} ms, "
                f"{r.summary.verdict_bottleneck or r.summary.verdict_axis})\n"
            )
        return EXIT_OK
    import os

    path = args.store or api.default_store_path()
    bases = {}
    skipped: list[str] = []
    if os.path.exists(path):
        with api.open_store(path, read_only=True) as store:
            for tag, rid in store.baselines().items():
                run = store.get_listed(rid)  # a damaged run is named in store.skipped, the others shown
                if run is not None:
                    bases[tag] = run.to_dict()
            skipped = list(store.skipped)
    warn_skipped(skipped, path)
    if args.format == "json":
        sys.stdout.write(to_json({"store": path, "baselines": bases}))
    elif not bases:
        sys.stdout.write(f"no baselines in {path} (set one with `trainscope baseline set RUN`)\n")
    else:
        for tag, r in safe_strings(bases).items():
            sys.stdout.write(f"{tag or '(untagged)':20s} run {r['id']}  {r['created']}  {r['source']}\n")
    return EXIT_OK
