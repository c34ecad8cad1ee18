"""The model and device a memory plan is about: parameter counts (``1.5B``), the model fields shared
by ``trainscope plan`` flags, ``analyze --model`` specs and :func:`trainscope.api.plan`, and GPU lookup."""

from __future__ import annotations

import argparse
import re
from typing import Any

from trainscope.analyzers.plan.gpu_memory import GPU_MEMORY
from trainscope.analyzers.plan.gpu_memory import GpuMemory
from trainscope.analyzers.plan.gpu_memory import custom_gpu
from trainscope.analyzers.plan.gpu_memory import gpu_memory as lookup
from trainscope.analyzers.plan.ledger import PlanConfig
from trainscope.argtypes import non_negative_float
from trainscope.argtypes import number

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


_pos_int = number(int, lambda v: v > 0, "must be > 0", "an integer")


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
    (
        "--activations-gb",
        "activations_gb",
        non_negative_float,
        "measured activation memory in GB, instead of the estimate",
    ),
    (
        "--activations-batch",
        "activations_batch",
        _pos_int,
        "batch the measured activations were taken at (default --batch)",
    ),
    (
        "--activations-precision",
        "activations_precision",
        str,
        "fp32 | fp16 | bf16: the measured activations' precision",
    ),
)


def _gpu_keys() -> list[str]:
    return [g.key for g in GPU_MEMORY]


def config_from(values: dict[str, Any], no_dropout: bool = False) -> PlanConfig:
    """A PlanConfig from parsed flag values (None = default)."""

    kw = {k: v for k, v in values.items() if v is not None}
    if no_dropout:
        kw["dropout"] = False
    return PlanConfig(**kw)


def parse_model_spec(text: str) -> PlanConfig:
    """``params=1.5B,optimizer=adam,batch=32`` (the plan flags without dashes) → PlanConfig."""
    by_key = {dest: typ for _, dest, typ, _ in MODEL_FIELDS}
    values: dict[str, Any] = {}
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


def resolve_gpu(gpu: str | None, gpu_memory: str | None) -> GpuMemory:
    if gpu_memory:
        return custom_gpu(gpu_memory)
    dev = lookup(gpu or "h100-80")
    if dev is None:
        raise ValueError(f"unknown GPU {gpu!r} (one of: {', '.join(_gpu_keys())}; or give --gpu-memory SIZE)")
    return dev
