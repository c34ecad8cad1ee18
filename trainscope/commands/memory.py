"""``trainscope memory FILE``: peak, fragmentation and what was live, from a CUDA memory snapshot
or a profiler memory timeline.

A separate command rather than ``analyze``: ``analyze`` explains where step *time* goes, and a
snapshot holds no kernels or steps — only allocator state. ``analyze`` recognizes a snapshot and
points here.
"""
from __future__ import annotations

import argparse
import os
import sys

from trainscope.common import (EXIT_BAD_INPUT, EXIT_OK, Progress, add_input_limit_args, apply_input_limits,
                               fail, input_errors, input_problem, threshold_arg, to_json, write_atomic)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "memory", help="peak memory, fragmentation and live allocations from a CUDA memory snapshot or timeline",
        description="Read a CUDA memory snapshot (torch.cuda.memory._dump_snapshot, a pickle, loaded with a "
                    "restricted unpickler that accepts plain data only) or a memory timeline "
                    "(profile.export_memory_timeline, .json/.json.gz/.raw.json.gz) and report peak allocated versus "
                    "reserved memory (fragmentation), what was live at the peak and where it was allocated, "
                    "and memory-capacity findings.",
        epilog="examples:\n"
               "  trainscope memory snapshot.pickle --gpu h100-80\n"
               "  trainscope memory timeline.raw.json.gz --format json\n\n"
               "record a snapshot:\n"
               "  torch.cuda.memory._record_memory_history(max_entries=100_000)\n"
               "  train_step(); torch.cuda.memory._dump_snapshot(\"snapshot.pickle\")\n\n"
               "exit codes: 0 analyzed, 2 bad or unsafe input, 1 internal error",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", help="snapshot .pickle (or .pickle.gz) or memory timeline .json[.gz]")
    p.add_argument("--gpu", help="device the run used, for capacity findings (e.g. h100-80; see `trainscope plan --help`)")
    p.add_argument("--gpu-memory", metavar="SIZE", help="device memory instead of --gpu: 80GiB, 24GB")
    p.add_argument("--top", type=int, default=10, metavar="N", help="largest live allocations to list (default 10)")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.add_argument("--json", metavar="FILE", dest="json_out", help="also write the JSON document to FILE")
    p.add_argument("--threshold", type=threshold_arg, action="append", default=[], metavar="NAME=VALUE",
                   help="override memory.capacity or memory.fragmentation")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress indicator")
    add_input_limit_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.snapshot_memory import snapshot_findings, snapshot_memory
    from trainscope.analyzers.timeline_memory import timeline_peak
    from trainscope.collectors.errors import TraceError
    from trainscope.collectors.memory_timeline import load_memory_timeline
    from trainscope.collectors.readers import sniff
    from trainscope.collectors.snapshot import is_pickle, load_snapshot
    from trainscope.commands.plan import resolve_gpu
    from trainscope.reports.memory import build_memory_document, render_memory_markdown, render_memory_text

    rules = Rules(dict(args.threshold))
    apply_input_limits(args)
    try:
        dev = resolve_gpu(args.gpu, args.gpu_memory) if (args.gpu or args.gpu_memory) else None
    except ValueError as e:
        sys.stderr.write(f"trainscope: memory: {e}\n")
        return EXIT_BAD_INPUT
    capacity = {"name": dev.name, "capacity_bytes": dev.capacity_bytes, "source": dev.source} if dev else None
    progress = Progress(enabled=not args.quiet and sys.stderr.isatty())
    path = args.file
    try:
        if not os.path.isfile(path):
            raise TraceError(path, "no such file" if not os.path.exists(path) else "not a file")
        head = _head(path, sniff)
        progress("reading", None)
        if is_pickle(head):
            snap = load_snapshot(path)
            progress("analyzing", None)
            devices = snapshot_memory(snap, top=max(0, args.top))
            found = snapshot_findings(devices, dev.capacity_bytes if dev else None, rules)
            doc = build_memory_document(path, "cuda_snapshot", devices, None, found, capacity, snap.warnings)
        else:
            tl = load_memory_timeline(path)
            doc = build_memory_document(path, f"memory_timeline_{tl.layout}", None, timeline_peak(tl), [], capacity, [])
    except input_errors() as e:
        progress.done()
        return fail(input_problem(e, path))
    progress.done()
    if args.json_out:
        try:
            write_atomic(args.json_out, to_json(doc))
        except OSError as e:
            sys.stderr.write(f"trainscope: cannot write {args.json_out}: {e.strerror or e}\n")
            return EXIT_BAD_INPUT
    if args.format == "json":
        sys.stdout.write(to_json(doc))
    else:
        from trainscope.reports.safe_text import safe_strings

        render = render_memory_markdown if args.format == "markdown" else render_memory_text
        sys.stdout.write(render(safe_strings(doc)))
    return EXIT_OK


def _head(path: str, sniff) -> bytes:
    """The first bytes, looking inside gzip: a gzipped snapshot is still a pickle."""
    import gzip
    import zlib

    head = sniff(path)
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as f:
                return f.read(16)
        except (OSError, EOFError, zlib.error):  # damage: the reader says what is wrong
            return head
    return head
