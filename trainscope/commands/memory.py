"""``trainscope memory FILE``: peak, fragmentation and what was live, from a CUDA memory snapshot
or a profiler memory timeline.

A separate command rather than ``analyze``: ``analyze`` explains where step *time* goes, and a
snapshot holds no kernels or steps — only allocator state. ``analyze`` recognizes a snapshot and
points here.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from trainscope import api
from trainscope.api.errors import EXIT_OK
from trainscope.commands import analyze as analyze_command  # its use_tui through the module: tests replace it
from trainscope.common import add_document_args
from trainscope.common import add_input_limit_args
from trainscope.common import add_threshold_arg
from trainscope.common import emit_document
from trainscope.common import one_line_errors
from trainscope.common import progress_line
from trainscope.common import resolve_inputs
from trainscope.common import terminal_app
from trainscope.common import write_json_after_app

if TYPE_CHECKING:
    from trainscope.api.memory_report import MemoryReport


def register(p: argparse.ArgumentParser) -> None:
    """The arguments of ``trainscope memory`` on its parser (named, with its help line, by trainscope/cli.py's table)."""
    p.description = (
        "Read a CUDA memory snapshot (torch.cuda.memory._dump_snapshot, a pickle, loaded with a "
        "restricted unpickler that accepts plain data only) or a memory timeline "
        "(profile.export_memory_timeline, .json/.json.gz/.raw.json.gz) and report peak allocated versus "
        "reserved memory (fragmentation), what was live at the peak and where it was allocated, "
        "and memory-capacity findings."
    )
    p.epilog = (
        "examples:\n"
        "  trainscope memory snapshot.pickle --gpu h100-80\n"
        "  trainscope memory timeline.raw.json.gz --format json\n\n"
        "record a snapshot:\n"
        "  torch.cuda.memory._record_memory_history(max_entries=100_000)\n"
        '  train_step(); torch.cuda.memory._dump_snapshot("snapshot.pickle")\n\n'
        "exit codes: 0 analyzed, 2 bad or unsafe input, 1 internal error"
    )
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("file", metavar="FILE", help="snapshot .pickle (or .pickle.gz) or memory timeline .json[.gz]")
    p.add_argument(
        "--gpu", help="device the run used, for capacity findings (e.g. h100-80; see `trainscope plan --help`)"
    )
    p.add_argument("--gpu-memory", metavar="SIZE", help="device memory instead of --gpu: 80GiB, 24GB")
    p.add_argument("--top", type=int, default=10, metavar="N", help="largest live allocations to list (default 10)")
    add_document_args(p, "memory", app="for a snapshot, the app")
    p.add_argument("--json", metavar="FILE", dest="json_out", help="also write the JSON document to FILE")
    add_threshold_arg(p, "override memory.capacity or memory.fragmentation")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress indicator")
    add_input_limit_args(p)
    p.set_defaults(run=run)


@one_line_errors
def run(args: argparse.Namespace) -> int:
    (snapshot,) = resolve_inputs(args, args.file)
    with progress_line(args) as progress:
        report = api.memory(
            snapshot,
            gpu=args.gpu,
            gpu_memory=args.gpu_memory,
            top=args.top,
            thresholds=dict(args.threshold),
            progress=progress,
        )

    if not (report.kind == "cuda_snapshot" and analyze_command.use_tui(args)):  # a timeline has no stacks to show: text
        return emit_document(report.output(), args)  # --json, then --format on stdout
    code = _run_app(args.file, report)
    if code != EXIT_OK:
        return code
    return write_json_after_app(args.json_out, report.to_dict()) if args.json_out else EXIT_OK


def _run_app(path: str, report: MemoryReport) -> int:
    """The memory app (tui/memory_app.py): the timeline, the peak and what was live at it."""

    app = terminal_app("memory")(
        path, report=report, loader=lambda progress: (report, report.peaks())
    )  # the snapshot read once
    code = app.run()
    return app.return_code if app.return_code is not None else (code or EXIT_OK)
