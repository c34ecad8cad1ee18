"""``trainscope analyze DIR`` (or a glob): ranks mapped in parallel, reduced in this process."""
from __future__ import annotations

import argparse
import sys

from trainscope.common import EXIT_BAD_INPUT, Progress, emit_document


def add_arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument("--jobs", type=_positive_int, default=None, metavar="N",
                   help="rank directories: analyze N ranks at once in worker processes (default: the cores this process may use)")
    a.add_argument("--dask", metavar="ADDRESS",
                   help="rank directories: analyze the ranks on the Dask cluster whose scheduler is at ADDRESS "
                        "(tcp://host:8786); the workers read the files at the same paths (needs the dask extra)")


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return n


def run_rank_set(args: argparse.Namespace, rules, ledger) -> int:
    from trainscope.api import with_ledger
    from trainscope.analyzers.ranks import align_ranks, ranks_view
    from trainscope.analyzers.stragglers import stragglers_from
    from trainscope.executor import MapOptions, run_rank_set as map_rank_set
    from trainscope.reports.deep import alignment_dict, stragglers_dict
    from trainscope.reports.document import build_document
    from trainscope.reports.markdown import render_markdown
    from trainscope.reports.text import render_text

    progress = Progress(enabled=not args.quiet and sys.stderr.isatty())
    options = MapOptions(tuple(args.threshold), args.peak_tflops, args.step_range)
    try:
        rs = map_rank_set(args.trace, options, jobs=getattr(args, "jobs", None), dask=getattr(args, "dask", None),
                          progress=lambda done, n: progress(f"ranks {done}/{n}", done / n))
    except (ValueError, RuntimeError) as e:
        progress.done()
        sys.stderr.write(f"trainscope: {args.trace}: {e}\n")
        return EXIT_BAD_INPUT
    analyses = [s.analysis for s in rs.summaries]
    stragglers = deep = alignment = None
    if len(analyses) > 1:
        stragglers = stragglers_dict(stragglers_from([s.host_collectives for s in rs.summaries], analyses, rules))
        alignment = align_ranks(rs.summaries, rules)
        if alignment is not None:
            stragglers["alignment"] = alignment_dict(alignment)
    if args.deep:
        from trainscope.analyzers.analysis import slowest
        from trainscope.analyzers.deep import deep_analysis
        from trainscope.collectors import TraceError
        from trainscope.collectors.inputs import open_any
        from trainscope.reports.deep import deep_dict

        main = slowest(analyses) if len(analyses) > 1 else analyses[0]
        try:  # the one trace read again in this process: the slowest rank's
            loaded = open_any(main.source)
            trace = next((t for t in loaded if t.rank == main.rank), loaded[0])
        except TraceError as e:
            progress.done()
            sys.stderr.write(f"trainscope: {e}\n")
            return EXIT_BAD_INPUT
        trace.rank = main.rank
        deep = deep_dict(deep_analysis(trace, main, rules, args.deep_step, progress))
    progress.done()
    if stragglers is not None:
        stragglers["ranks_view"] = ranks_view(rs.summaries, alignment)
    doc = build_document(args.trace, analyses, rules, rs.warnings, deep=deep, stragglers=stragglers)
    doc = with_ledger(doc, ledger)
    return emit_document(doc, args, render_text, render_markdown)
