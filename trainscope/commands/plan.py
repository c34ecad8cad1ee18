"""``trainscope plan``: the training-memory ledger of a model and setup, against a GPU, with what-ifs."""

from __future__ import annotations

import argparse

from trainscope import api
from trainscope.api.errors import EXIT_BAD_INPUT
from trainscope.api.errors import EXIT_OK
from trainscope.commands import analyze as analyze_command  # its use_tui through the module: tests replace it
from trainscope.common import add_document_args
from trainscope.common import emit_document
from trainscope.common import one_line_errors
from trainscope.common import terminal_app
from trainscope.common import write_json_after_app
from trainscope.modelspec import MODEL_FIELDS
from trainscope.modelspec import _gpu_keys
from trainscope.modelspec import count_arg  # noqa: F401 (re-exported)


def register(p: argparse.ArgumentParser) -> None:
    """The arguments of ``trainscope plan`` on its parser (named, with its help line, by trainscope/cli.py's table)."""
    p.description = (
        "Add up what one GPU holds while training — weights, gradients, FP32 master copy, optimizer "
        "state, activations — for a model and setup, say whether it fits the GPU, and list the cheapest "
        "changes that make it fit (mixed precision, 8-bit Adam, checkpointing, gradient accumulation, "
        "ZeRO sharding) with what each costs. GB are 10⁹ bytes, as in the sources."
    )
    p.epilog = (
        "examples:\n"
        "  trainscope plan --params 1.5B --optimizer adam --precision fp32          # 24 GB static\n"
        "  trainscope plan --params 1.5B --precision fp32 --batch 32 --activations-gb 65 \\\n"
        "                  --activations-precision fp32 --gpu v100-32                  # the GPT-2 walkthrough\n"
        "  trainscope plan --layers 48 --hidden 1600 --heads 25 --vocab 50257 --seq 1024 --batch 8 --gpu a100-80\n"
        "  trainscope plan --params 7B --gpus 8 --zero 3 --format json\n\n"
        f"GPUs (--gpu): {', '.join(_gpu_keys())}\n\n"
        "In a terminal, plan opens an app with live toggles (o optimizer, p precision, c checkpointing,\n"
        "b/B batch, a/A accumulation, g/G GPUs, z ZeRO, d device, Enter applies an option; ? every key).\n\n"
        "exit codes: 0 planned (fits or not), 2 bad input or usage"
    )
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    for flag, dest, typ, hlp in MODEL_FIELDS:
        p.add_argument(flag, dest=dest, type=typ, help=hlp, default=None)
    p.add_argument("--no-dropout", action="store_true", help="the model has no dropout (no 1-byte masks stored)")
    p.add_argument("--gpu", default="h100-80", help="device to fit (default h100-80; see the list below)")
    p.add_argument("--gpu-memory", metavar="SIZE", help="a device by size instead: 24GiB, 24GB (a bare number is GiB)")
    p.add_argument("--options", type=int, default=6, metavar="N", help="how many what-if options to list (default 6)")
    add_document_args(p, "plan", printed="plan")
    p.add_argument("--json", metavar="FILE", dest="json_out", help="also write the JSON document to FILE")
    p.set_defaults(run=run)


@one_line_errors
def run(args: argparse.Namespace) -> int:
    values = {dest: getattr(args, dest) for _, dest, _, _ in MODEL_FIELDS if getattr(args, dest) is not None}
    result = api.plan(
        dict(values, no_dropout=args.no_dropout), gpu=args.gpu, gpu_memory=args.gpu_memory, options=max(0, args.options)
    )
    if not analyze_command.use_tui(args):
        return emit_document(result.output(), args)  # --json, then --format on stdout
    if args.json_out and write_json_after_app(args.json_out, result.to_dict()) != EXIT_OK:
        return EXIT_BAD_INPUT

    terminal_app("plan")(
        result.config, result.device, threshold_pct=result.threshold_pct, limit=max(0, args.options)
    ).run()
    return EXIT_OK
