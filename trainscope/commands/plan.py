"""``trainscope plan``: the training-memory ledger of a model and setup, against a GPU, with what-ifs."""
from __future__ import annotations

import argparse
import re
import sys

from trainscope.common import EXIT_BAD_INPUT, EXIT_OK, to_json, write_atomic

_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def count_arg(text: str) -> float:
    """``1.5B``, ``350M``, ``1.5e9``: a parameter count."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbgt]?)\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"expected a count such as 1.5B, 350M or 1.5e9, got {text!r}")
    v = float(m.group(1)) * _SUFFIX[m.group(2)]
    if v <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return v


def _pos_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return v


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError("must be ≥ 0")
    return v


# The model description: (flag, PlanConfig field, type, help). Shared with `analyze --model`.
MODEL_FIELDS = (
    ("--params", "params", count_arg, "parameter count (1.5B, 350M, 1.5e9)"),
    ("--layers", "layers", _pos_int, "Transformer layers"),
    ("--hidden", "hidden", _pos_int, "hidden size"),
    ("--heads", "heads", _pos_int, "attention heads (needed with --attention eager)"),
    ("--vocab", "vocab", _pos_int, "vocabulary size"),
    ("--seq", "seq", _pos_int, "sequence length"),
    ("--batch", "batch", _pos_int, "samples per GPU per optimizer step (default 1)"),
    ("--optimizer", "optimizer", str, "sgd | momentum | adam | adamw | adam8bit (default adam)"),
    ("--precision", "precision", str, "fp32 | mixed (fp16/bf16 with FP32 master) | mixed-fp32-grads (default mixed)"),
    ("--checkpoint", "checkpoint", str, "activation checkpointing: none | selective | full | every:K (default none)"),
    ("--grad-accum", "grad_accum", _pos_int, "micro-batches per optimizer step (default 1)"),
    ("--gpus", "gpus", _pos_int, "data-parallel GPUs (default 1)"),
    ("--zero", "zero", int, "sharding: 0 none, 1 optimizer state, 2 + gradients, 3 + parameters (FSDP)"),
    ("--attention", "attention", str, "flash (SDPA/FlashAttention, default) | eager (keeps the s² scores)"),
    ("--activations-gb", "activations_gb", _nonneg_float, "measured activation memory in GB, instead of the estimate"),
    ("--activations-batch", "activations_batch", _pos_int, "batch the measured activations were taken at (default --batch)"),
    ("--activations-precision", "activations_precision", str, "fp32 | fp16 | bf16: the measured activations' precision"),
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan", help="will this training setup fit a GPU? the memory ledger and the cheapest changes that fit",
        description="Add up what one GPU holds while training — weights, gradients, FP32 master copy, optimizer "
                    "state, activations — for a model and setup, say whether it fits the GPU, and list the cheapest "
                    "changes that make it fit (mixed precision, 8-bit Adam, checkpointing, gradient accumulation, "
                    "ZeRO sharding) with what each costs. GB are 10⁹ bytes, as in the sources.",
        epilog="examples:\n"
               "  trainscope plan --params 1.5B --optimizer adam --precision fp32          # 24 GB static\n"
               "  trainscope plan --params 1.5B --precision fp32 --batch 32 --activations-gb 65 \\\n"
               "                  --activations-precision fp32 --gpu v100-32                  # the GPT-2 walkthrough\n"
               "  trainscope plan --layers 48 --hidden 1600 --heads 25 --vocab 50257 --seq 1024 --batch 8 --gpu a100-80\n"
               "  trainscope plan --params 7B --gpus 8 --zero 3 --format json\n\n"
               f"GPUs (--gpu): {', '.join(_gpu_keys())}\n\n"
               "In a terminal, plan opens an app with live toggles (o optimizer, p precision, c checkpointing,\n"
               "b/B batch, a/A accumulation, g/G GPUs, z ZeRO, d device, Enter applies an option; ? every key).\n\n"
               "exit codes: 0 planned (fits or not), 2 bad input or usage",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for flag, dest, typ, hlp in MODEL_FIELDS:
        p.add_argument(flag, dest=dest, type=typ, help=hlp, default=None)
    p.add_argument("--no-dropout", action="store_true", help="the model has no dropout (no 1-byte masks stored)")
    p.add_argument("--gpu", default="h100-80", help="device to fit (default h100-80; see the list below)")
    p.add_argument("--gpu-memory", metavar="SIZE", help="a device by size instead: 24GiB, 24GB (a bare number is GiB)")
    p.add_argument("--options", type=int, default=6, metavar="N", help="how many what-if options to list (default 6)")
    p.add_argument("--format", choices=("text", "json", "markdown"), default=None,
                   help="print this instead of opening the terminal app (default in a terminal: the app; otherwise: text)")
    p.add_argument("--no-tui", action="store_true", help="print the text plan instead of opening the terminal app")
    p.add_argument("--json", metavar="FILE", dest="json_out", help="also write the JSON document to FILE")
    p.set_defaults(run=run)


def _gpu_keys() -> list[str]:
    from trainscope.analyzers.memory_devices import GPU_MEMORY

    return [g.key for g in GPU_MEMORY]


def config_from(values: dict, no_dropout: bool = False):
    """A PlanConfig from parsed flag values (None = default)."""
    from trainscope.analyzers.ledger import PlanConfig

    kw = {k: v for k, v in values.items() if v is not None}
    if no_dropout:
        kw["dropout"] = False
    return PlanConfig(**kw)


def parse_model_spec(text: str):
    """``params=1.5B,optimizer=adam,batch=32`` (the plan flags without dashes) → PlanConfig."""
    by_key = {dest: typ for _, dest, typ, _ in MODEL_FIELDS}
    values: dict = {}
    no_dropout = False
    for part in filter(None, re.split(r"[,\s]+", text.strip())):
        key, sep, val = part.partition("=")
        key = key.strip().lower().replace("-", "_")
        if key in ("no_dropout", "dropout"):
            no_dropout = (key == "no_dropout") or val.lower() in ("0", "false", "no", "off")
            continue
        if not sep or key not in by_key:
            raise ValueError(f"--model: expected KEY=VALUE with KEY one of {', '.join(sorted(by_key))}, got {part!r}")
        try:
            values[key] = by_key[key](val)
        except (argparse.ArgumentTypeError, ValueError) as e:
            raise ValueError(f"--model: {key}: {e}") from None
    return config_from(values, no_dropout)


def resolve_gpu(gpu: str | None, gpu_memory: str | None):
    from trainscope.analyzers.memory_devices import custom_gpu, gpu_memory as lookup

    if gpu_memory:
        return custom_gpu(gpu_memory)
    dev = lookup(gpu or "h100-80")
    if dev is None:
        raise ValueError(f"unknown GPU {gpu!r} (one of: {', '.join(_gpu_keys())}; or give --gpu-memory SIZE)")
    return dev


def run(args: argparse.Namespace) -> int:
    from trainscope.commands.analyze import use_tui  # the same rule: a person at a terminal who asked for nothing else
    from trainscope.analyzers.ledger import fit, fit_options, ledger
    from trainscope.analyzers.rules import Rules
    from trainscope.reports.plan import build_plan_document, render_plan_markdown, render_plan_text

    try:
        cfg = config_from({dest: getattr(args, dest) for _, dest, _, _ in MODEL_FIELDS}, args.no_dropout)
        dev = resolve_gpu(args.gpu, args.gpu_memory)
        lg = ledger(cfg)
    except ValueError as e:
        sys.stderr.write(f"trainscope: plan: {e}\n")
        return EXIT_BAD_INPUT
    threshold = Rules().value("memory.capacity")
    f = fit(lg, dev.name, dev.capacity_bytes, threshold)
    options = fit_options(lg.config, dev.name, dev.capacity_bytes, threshold, limit=max(0, args.options)) if args.options else []
    doc = build_plan_document(lg, dev, f, options)
    if args.json_out:
        try:
            write_atomic(args.json_out, to_json(doc))
        except OSError as e:
            sys.stderr.write(f"trainscope: cannot write {args.json_out}: {e.strerror or e}\n")
            return EXIT_BAD_INPUT
    if use_tui(args):
        from trainscope.tui.plan_app import PlanApp

        PlanApp(cfg, dev, threshold_pct=threshold, limit=max(0, args.options)).run()
        return EXIT_OK
    if args.format == "json":
        sys.stdout.write(to_json(doc))
    elif args.format == "markdown":
        sys.stdout.write(render_plan_markdown(doc))
    else:
        sys.stdout.write(render_plan_text(doc))
    return EXIT_OK
