"""The training-memory ledger: what one GPU holds during a training step, from a model description.

``ledger(config)`` adds up weights, gradients, the FP32 master copy, optimizer state and
activations per GPU; ``fit(ledger, device)`` says whether that fits a device. Everything is in
the sources' unit, decimal gigabytes (1 GB = 10⁹ bytes): "1.5 B parameters × 4 bytes = 6 GB".

Bytes per parameter come from the table below, each row with its source. Activations are either
a *measured* figure the user passes (the way the GPT-2 walkthrough of Machine Learning Systems
(mlsysbook.ai), Model Training chapter, §GPT-2 Optimization Walkthrough, passes "65 GB in
FP32 at batch 32"), scaled to the plan's micro-batch and precision, or *estimated* from a
Transformer's shape with the per-layer formula of Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", §4), the accounting the Ultra-Scale Playbook
(Hugging Face) is built on. Why that formula and not the others the sources use: see
``ACTIVATION_FORMULA`` and docs/memory.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace

GB = 1e9

# ── bytes per parameter ─────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Precision:
    key: str
    label: str
    weight_bytes: int  # the weights the forward/backward pass reads
    grad_bytes: int  # gradient buffers (16-bit grads plus an FP32 accumulation buffer where kept)
    master_bytes: int  # FP32 master copy the optimizer updates (0 when the weights are FP32)
    activation_bytes: int  # bytes per stored activation value
    source: str


PRECISIONS: dict[str, Precision] = {
    p.key: p
    for p in (
        Precision(
            "fp32",
            "FP32",
            4,
            4,
            0,
            4,
            "Machine Learning Systems (mlsysbook.ai), Model Training chapter, §Optimization Algorithm System Implications (GPT-2: 1.5 B × 4 bytes = 6 GB weights, 6 GB gradients)",
        ),
        Precision(
            "mixed",
            "FP16/BF16 mixed, FP32 master weights",
            2,
            2,
            4,
            2,
            "ZeRO (Rajbhandari et al. 2020): 16Ψ = 2Ψ fp16 weights + 2Ψ fp16 gradients + 12Ψ fp32 master and Adam state; "
            "Machine Learning Systems (mlsysbook.ai), Model Training chapter, §GPT-2 Optimization Walkthrough (AMP: FP16 weights and gradients, FP32 master copy)",
        ),
        Precision(
            "mixed-fp32-grads",
            "FP16/BF16 mixed, FP32 master weights and FP32 gradient accumulation",
            2,
            6,
            4,
            2,
            "the Ultra-Scale Playbook (Hugging Face): 20Ψ = 2Ψ bf16 weights + (2 + 4)Ψ gradients incl. FP32 accumulation + 12Ψ master and state",
        ),
    )
}


@dataclass(frozen=True)
class Optimizer:
    key: str
    label: str
    state_bytes: float  # per parameter, held in FP32 unless the optimizer quantizes it
    state: str
    source: str


OPTIMIZERS: dict[str, Optimizer] = {
    o.key: o
    for o in (
        Optimizer(
            "sgd",
            "SGD",
            0,
            "none",
            "Machine Learning Systems (mlsysbook.ai), Model Training chapter, §Optimization Algorithm System Implications (SGD: 1× model size, no state)",
        ),
        Optimizer(
            "momentum",
            "SGD with momentum",
            4,
            "velocity (FP32)",
            "Machine Learning Systems (mlsysbook.ai), Model Training chapter, §Optimization Algorithm System Implications (momentum: 2×, one velocity per parameter)",
        ),
        Optimizer(
            "adam",
            "Adam/AdamW",
            8,
            "m and v (FP32)",
            "Machine Learning Systems (mlsysbook.ai), Model Training chapter, §Optimization Algorithm System Implications (Adam state: 1.5 B × 8 bytes = 12 GB; 3× SGD; AdamW adds no memory)",
        ),
        Optimizer(
            "adam8bit",
            "8-bit Adam",
            2,
            "m and v quantized to 8 bits",
            "Dettmers et al. 2022, 8-bit Optimizers via Block-wise Quantization (1 byte per state value; "
            "block constants ≈ 0.2 % more, ignored); the textbook names 8-bit Adam for its 4× smaller state",
        ),
    )
}
OPTIMIZER_ALIASES = {"adamw": "adam", "adam-8bit": "adam8bit", "8bit-adam": "adam8bit", "sgd-momentum": "momentum"}
PRECISION_ALIASES = {"fp16": "mixed", "bf16": "mixed", "amp": "mixed", "mixed-fp32grad": "mixed-fp32-grads"}

# ── recomputation and sharding costs ───────────────────────────────────────────────────────

RECOMPUTE_FULL_PCT = 33.0
RECOMPUTE_FULL_SOURCE = "Machine Learning Systems (mlsysbook.ai), Model Training chapter, §GPT-2 Optimization Walkthrough (checkpointing costs 33 % more compute); the Ultra-Scale Playbook (Hugging Face): 30–40 %"
RECOMPUTE_SELECTIVE_PCT = 2.7
RECOMPUTE_SELECTIVE_SOURCE = "Korthikanti et al. 2022 via the Ultra-Scale Playbook (selective recomputation: +2.7 % compute, −70 % activation memory)"
# With a measured activation total the layer structure is unknown, so checkpointing applies the
# sources' own reduction factors to it.
MEASURED_EVERY_K_SOURCE = "Machine Learning Systems (mlsysbook.ai), Model Training chapter, §GPT-2 Optimization Walkthrough (checkpointing every 4 layers → 4× less activation memory)"
MEASURED_SELECTIVE_KEEP = 0.30
MEASURED_SELECTIVE_SOURCE = (
    "the Ultra-Scale Playbook; Korthikanti et al. 2022 (selective recomputation cuts activation memory by about 70 %)"
)
SGD_STEPS_FACTOR = 3.0
SGD_STEPS_SOURCE = "Machine Learning Systems (mlsysbook.ai), Model Training chapter, §Optimization Algorithm System Implications (GPT-2 converges in ~50K steps with Adam vs ~150K+ with SGD+momentum)"
ZERO_SOURCE = (
    "ZeRO (Rajbhandari et al. 2020); the Ultra-Scale Playbook (Hugging Face) (ZeRO-1 shards optimizer state, ZeRO-2 adds gradients, ZeRO-3/FSDP adds parameters, "
    "each to 1/N); the FP32 master copy is part of the optimizer state (ZeRO: 12Ψ)"
)

ACTIVATION_FORMULA = (
    "per layer s·b·h·(16e + 2d) + a·s²·b·(e + d·(e + 1)) bytes [+ the s²-term only for eager attention], "
    "plus e·s·b·h·2 + d·s·b·h + 4·s·b·v for the final norm, output projection input, embedding dropout mask and "
    "FP32 logits; e = bytes per activation, d = 1 with dropout (1-byte masks)"
)
ACTIVATION_SOURCE = (
    "Korthikanti et al. 2022 §4 (34·s·b·h + 5·a·s²·b bytes per layer at 16 bit), the accounting of the Ultra-Scale "
    "Playbook, generalized to e bytes per value; followed because it counts every tensor a "
    "Transformer layer saves for backward and models heads and selective recomputation. The textbook's callout "
    "(Machine Learning Systems (mlsysbook.ai), Model Training chapter, §Activation Memory Requirements: attention + MLP outputs + 10 MB per layer) omits the attention scores, norms and masks, and the "
    "~60 GB for GPT-2 at batch 32 is the ZeRO paper's 12·h·b·s·L coarse count"
)


# ── the configuration ──────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class PlanConfig:
    """A model and a training setup. Either ``params`` or the Transformer shape (layers, hidden,
    vocab) gives the parameter count; activations need the shape (plus ``seq``) or a measured
    ``activations_gb``."""

    params: float | None = None
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    vocab: int | None = None
    seq: int | None = None
    batch: int = 1  # samples per GPU per optimizer step
    optimizer: str = "adam"
    precision: str = "mixed"
    checkpoint: str = "none"  # "none" | "selective" | "every:K"
    grad_accum: int = 1  # micro-batches per optimizer step: micro-batch = batch / grad_accum
    gpus: int = 1  # data-parallel ranks
    zero: int = 0  # 0 none, 1 optimizer state, 2 + gradients, 3 + parameters (FSDP)
    attention: str = "flash"  # "flash" (SDPA/FlashAttention: no s² scores kept) | "eager"
    dropout: bool = True
    activations_gb: float | None = None  # measured activation memory…
    activations_batch: int | None = None  # …at this batch (default: ``batch``)…
    activations_precision: str | None = None  # …with values in this precision: "fp32" | "fp16" | "bf16"

    @property
    def micro_batch(self) -> int:
        return self.batch // self.grad_accum

    @property
    def checkpoint_every(self) -> int | None:
        m = re.fullmatch(r"every:(\d+)", self.checkpoint)
        return int(m.group(1)) if m else None


def normalize(cfg: PlanConfig) -> PlanConfig:
    """Canonical keys, and a ``ValueError`` with a user-facing message for anything inconsistent."""
    opt = OPTIMIZER_ALIASES.get(cfg.optimizer.lower(), cfg.optimizer.lower())
    prec = PRECISION_ALIASES.get(cfg.precision.lower(), cfg.precision.lower())
    if opt not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {cfg.optimizer!r} (one of: sgd, momentum, adam, adamw, adam8bit)")
    if prec not in PRECISIONS:
        raise ValueError(
            f"unknown precision {cfg.precision!r} (one of: fp32, mixed, mixed-fp32-grads; fp16/bf16 mean mixed)"
        )
    ck = cfg.checkpoint.lower().replace("=", ":")
    if ck in ("full", "all"):
        ck = "every:1"
    if ck not in ("none", "selective") and not re.fullmatch(r"every:[1-9]\d*", ck):
        raise ValueError(f"checkpoint must be none, selective, full or every:K, got {cfg.checkpoint!r}")
    cfg = replace(cfg, optimizer=opt, precision=prec, checkpoint=ck)
    for name in ("layers", "hidden", "heads", "vocab", "seq", "activations_batch"):
        v = getattr(cfg, name)
        if v is not None and v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v}")
    if cfg.params is not None and not cfg.params > 0:
        raise ValueError(f"params must be positive, got {cfg.params}")
    if cfg.batch <= 0 or cfg.grad_accum <= 0 or cfg.gpus <= 0:
        raise ValueError("batch, grad_accum and gpus must be positive")
    if cfg.batch % cfg.grad_accum:
        raise ValueError(f"batch {cfg.batch} is not divisible by grad_accum {cfg.grad_accum}")
    if cfg.zero not in (0, 1, 2, 3):
        raise ValueError(f"zero stage must be 0, 1, 2 or 3, got {cfg.zero}")
    if cfg.attention not in ("flash", "eager"):
        raise ValueError(f"attention must be flash or eager, got {cfg.attention!r}")
    if cfg.activations_gb is not None and cfg.activations_gb < 0:
        raise ValueError("activations_gb must be ≥ 0")
    if cfg.activations_precision is not None and cfg.activations_precision.lower() not in _ELEMENT_BYTES:
        raise ValueError(f"activations_precision must be fp32, fp16 or bf16, got {cfg.activations_precision!r}")
    if cfg.params is None and not (cfg.layers and cfg.hidden and cfg.vocab):
        raise ValueError("give the parameter count (params) or the Transformer shape (layers, hidden, vocab)")
    every = cfg.checkpoint_every
    if every is not None and cfg.layers and every > cfg.layers:
        raise ValueError(f"checkpoint every:{every} exceeds the {cfg.layers} layers")
    return cfg


_ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def transformer_params(layers: int, hidden: int, vocab: int) -> float:
    """h·v + L·(12h² + 13h) + 2h: embeddings (tied with the output), per layer attention (4h² + 4h),
    MLP (8h² + 5h) and two norms (4h), and the final norm (the Ultra-Scale Playbook)."""
    return float(hidden * vocab + layers * (12 * hidden**2 + 13 * hidden) + 2 * hidden)


# ── the ledger ─────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class LedgerItem:
    key: str  # weights | gradients | master | optimizer | activations
    label: str
    bytes: float | None  # per GPU; None when unknown (activations without shape or measurement)
    formula: str
    source: str


@dataclass(frozen=True)
class Activations:
    bytes: float | None
    method: str  # "measured" | "estimated" | "unknown"
    formula: str
    source: str
    full_bytes: float | None = None  # before checkpointing, for comparison


@dataclass(frozen=True)
class Ledger:
    config: PlanConfig
    params: float
    params_source: str
    items: list[LedgerItem]
    activations: Activations
    recompute_pct: float  # extra compute of the chosen checkpointing
    recompute_source: str
    notes: list[str] = field(default_factory=list)

    def item(self, key: str) -> LedgerItem:
        return next(i for i in self.items if i.key == key)

    @property
    def static_bytes(self) -> float:
        """Weights, gradients, master copy and optimizer state: the floor no batch size removes."""
        return sum(i.bytes or 0.0 for i in self.items if i.key != "activations")

    @property
    def total_bytes(self) -> float:
        return self.static_bytes + (self.activations.bytes or 0.0)

    @property
    def complete(self) -> bool:
        return self.activations.bytes is not None


def ledger(config: PlanConfig) -> Ledger:
    """The per-GPU memory of one training step under ``config`` (pure; raises ValueError)."""
    cfg = normalize(config)
    prec, opt = PRECISIONS[cfg.precision], OPTIMIZERS[cfg.optimizer]
    if cfg.params is not None:
        n, n_src = float(cfg.params), "given"
    else:
        assert cfg.layers and cfg.hidden and cfg.vocab  # normalize() requires the shape where params is not given
        n = transformer_params(cfg.layers, cfg.hidden, cfg.vocab)
        n_src = (
            f"h·v + L·(12h² + 13h) + 2h with L={cfg.layers}, h={cfg.hidden}, v={cfg.vocab} (the Ultra-Scale Playbook)"
        )
    N = cfg.gpus
    shard_opt = N if cfg.zero >= 1 else 1
    shard_grad = N if cfg.zero >= 2 else 1
    shard_w = N if cfg.zero >= 3 else 1
    notes: list[str] = []
    if cfg.zero and N == 1:
        notes.append(f"ZeRO-{cfg.zero} over 1 GPU shards nothing")
    if cfg.zero >= 3 and N > 1:
        notes.append("ZeRO-3/FSDP also holds one layer's gathered parameters at a time (not counted)")

    def shard(s: int) -> str:
        return f" / {s} GPUs" if s > 1 else ""

    items = [
        LedgerItem(
            "weights",
            f"weights ({'FP32' if prec.weight_bytes == 4 else '16-bit'})",
            n * prec.weight_bytes / shard_w,
            f"{n / 1e9:g} B × {prec.weight_bytes} bytes{shard(shard_w)}",
            prec.source,
        ),
        LedgerItem(
            "gradients",
            "gradients"
            + (
                " (16-bit + FP32 accumulation)"
                if prec.grad_bytes == 6
                else " (FP32)"
                if prec.grad_bytes == 4
                else " (16-bit)"
            ),
            n * prec.grad_bytes / shard_grad,
            f"{n / 1e9:g} B × {prec.grad_bytes} bytes{shard(shard_grad)}",
            prec.source,
        ),
        LedgerItem(
            "master",
            "FP32 master weights",
            n * prec.master_bytes / shard_opt,
            f"{n / 1e9:g} B × {prec.master_bytes} bytes{shard(shard_opt)}"
            if prec.master_bytes
            else "weights are FP32: no copy",
            prec.source,
        ),
        LedgerItem(
            "optimizer",
            f"optimizer state ({opt.label}: {opt.state})",
            n * opt.state_bytes / shard_opt,
            f"{n / 1e9:g} B × {opt.state_bytes:g} bytes{shard(shard_opt)}",
            opt.source,
        ),
    ]
    if cfg.zero:
        items = [replace(i, source=f"{i.source}; {ZERO_SOURCE}") if i.formula.endswith("GPUs") else i for i in items]
    act = activation_memory(cfg)
    items.append(LedgerItem("activations", f"activations ({act.method})", act.bytes, act.formula, act.source))
    every = cfg.checkpoint_every
    if every is not None:
        rpct, rsrc = RECOMPUTE_FULL_PCT, RECOMPUTE_FULL_SOURCE
    elif cfg.checkpoint == "selective":
        rpct, rsrc = RECOMPUTE_SELECTIVE_PCT, RECOMPUTE_SELECTIVE_SOURCE
    else:
        rpct, rsrc = 0.0, ""
    if cfg.checkpoint == "selective" and act.method == "estimated" and cfg.attention == "flash":
        notes.append(
            "selective recomputation saves nothing with FlashAttention/SDPA: the attention scores are "
            "never stored (the Ultra-Scale Playbook: FlashAttention is selective recomputation)"
        )
        rpct, rsrc = 0.0, "FlashAttention already recomputes the attention core"
    return Ledger(cfg, n, n_src, items, act, rpct, rsrc, notes)


def activation_memory(cfg: PlanConfig) -> Activations:
    """Activation memory per GPU for one micro-batch, after checkpointing."""
    e = PRECISIONS[cfg.precision].activation_bytes
    mb = cfg.micro_batch
    every = cfg.checkpoint_every
    if cfg.activations_gb is not None:
        at_b = cfg.activations_batch or cfg.batch
        at_e = _ELEMENT_BYTES[(cfg.activations_precision or ("fp32" if e == 4 else "fp16")).lower()]
        full = cfg.activations_gb * GB * (mb / at_b) * (e / at_e)
        formula = f"measured {cfg.activations_gb:g} GB at batch {at_b}, {at_e}-byte values"
        if mb != at_b:
            formula += f" × micro-batch {mb}/{at_b}"
        if e != at_e:
            formula += f" × {e}/{at_e} bytes"
        src = "given (measured); activations scale linearly with micro-batch and bytes per value"
        if every is not None:
            return Activations(
                full / every,
                "measured",
                f"{formula} ÷ {every} (checkpoint every {every} layers)",
                f"{src}; {MEASURED_EVERY_K_SOURCE}",
                full,
            )
        if cfg.checkpoint == "selective":
            return Activations(
                full * MEASURED_SELECTIVE_KEEP,
                "measured",
                f"{formula} × {MEASURED_SELECTIVE_KEEP:g} (selective)",
                f"{src}; {MEASURED_SELECTIVE_SOURCE}",
                full,
            )
        return Activations(full, "measured", formula, src, full)

    if not (cfg.layers and cfg.hidden and cfg.seq):
        return Activations(
            None,
            "unknown",
            "not estimated: give the Transformer shape (layers, hidden, seq) or a measured activations_gb",
            "",
            None,
        )
    if cfg.attention == "eager" and not cfg.heads:
        raise ValueError("eager attention needs the number of heads (the s² attention scores are kept per head)")
    L, h, s, d = cfg.layers, cfg.hidden, cfg.seq, 1 if cfg.dropout else 0
    a = cfg.heads or 0
    sbh = s * mb * h
    scores = a * s * s * mb * (e + d * (e + 1)) if cfg.attention == "eager" else 0.0
    per_layer_no_scores = sbh * (16 * e + 2 * d)
    per_layer = per_layer_no_scores + scores
    v = cfg.vocab or 0
    head = 2 * e * sbh + d * sbh + 4 * s * mb * v  # final norm + output projection inputs, dropout mask, FP32 logits
    full = L * per_layer + head
    if every is not None:
        segments = math.ceil(L / every)
        body = segments * e * sbh + every * per_layer
        formula = (
            f"{segments} checkpointed layer inputs × e·s·b·h + {every} layers recomputed at a time × per-layer "
            f"({per_layer / GB:.3g} GB) + output head ({head / GB:.3g} GB)"
        )
        return Activations(body + head, "estimated", formula, ACTIVATION_SOURCE, full)
    if cfg.checkpoint == "selective":
        formula = f"{L} layers × {per_layer_no_scores / GB:.3g} GB (attention core recomputed) + output head {head / GB:.3g} GB"
        return Activations(L * per_layer_no_scores + head, "estimated", formula, ACTIVATION_SOURCE, full)
    formula = f"{L} layers × {per_layer / GB:.3g} GB + output head {head / GB:.3g} GB (s={s}, b={mb}, h={h}, e={e}" + (
        f", a={a}, eager attention)" if scores else ", fused attention)"
    )
    return Activations(full, "estimated", formula, ACTIVATION_SOURCE, full)


# ── fitting a device ───────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Fit:
    device: str
    capacity_bytes: float
    used_bytes: float
    fits: bool
    tight: bool  # fits, but at or above the ``memory.capacity`` threshold
    pct: float
    threshold_pct: float
    static_only: bool  # activations unknown: only the static floor was checked


def fit(lg: Ledger, device_name: str, capacity_bytes: float, threshold_pct: float = 90.0) -> Fit:
    used = lg.total_bytes
    pct = 100.0 * used / capacity_bytes
    return Fit(
        device_name,
        capacity_bytes,
        used,
        used <= capacity_bytes,
        used <= capacity_bytes and pct >= threshold_pct,
        pct,
        threshold_pct,
        not lg.complete,
    )


# ── what-if: the cheapest changes that make it fit ─────────────────────────────────────────


@dataclass(frozen=True)
class Change:
    lever: str  # precision | optimizer | checkpoint | attention | grad_accum | zero | gpus
    before: str
    after: str
    description: str


@dataclass(frozen=True)
class Cost:
    recompute_pct: float = 0.0  # extra compute per step
    micro_steps: int = 1  # forward/backward passes per optimizer step
    extra_gpus: int = 0
    convergence: str | None = None  # e.g. SGD needs ~3× the steps
    numerics: str | None = None  # approximations that change what is computed
    communication: str | None = None

    @property
    def summary(self) -> str:
        parts = []
        if self.extra_gpus:
            parts.append(f"{self.extra_gpus} more GPU{'s' * (self.extra_gpus > 1)}")
        if self.convergence:
            parts.append(self.convergence)
        if self.recompute_pct:
            parts.append(f"+{self.recompute_pct:g} % compute (recomputation)")
        if self.micro_steps > 1:
            parts.append(f"{self.micro_steps} micro-steps per optimizer step")
        if self.numerics:
            parts.append(self.numerics)
        if self.communication:
            parts.append(self.communication)
        return "; ".join(parts) or "no compute cost"

    def key(self) -> tuple[int, bool, bool, float, bool, int]:
        # Cheapest first: no new hardware, no slower convergence, exact numerics, least recompute,
        # no extra communication, fewest micro-steps.
        return (
            self.extra_gpus,
            self.convergence is not None,
            self.numerics is not None,
            self.recompute_pct,
            self.communication is not None,
            self.micro_steps,
        )


@dataclass(frozen=True)
class FitOption:
    changes: list[Change]
    ledger: Ledger
    fit: Fit
    cost: Cost


def _levers(cfg: PlanConfig, estimated: bool) -> dict[str, list[str]]:
    """Values each lever can move to that can only lower memory, the current value first."""
    prec = {"fp32": ["fp32", "mixed"], "mixed-fp32-grads": ["mixed-fp32-grads", "mixed"]}.get(
        cfg.precision, [cfg.precision]
    )
    opt_order = ["adam", "adam8bit", "momentum", "sgd"]
    opts = [cfg.optimizer] + [o for o in opt_order if OPTIMIZERS[o].state_bytes < OPTIMIZERS[cfg.optimizer].state_bytes]
    ck = [cfg.checkpoint]
    if estimated:
        if cfg.checkpoint == "none" and cfg.attention == "eager":
            ck.append("selective")
        best = _best_every(cfg)
        if best and f"every:{best}" != cfg.checkpoint:
            ck.append(f"every:{best}")
    else:
        if cfg.checkpoint == "none":
            ck += ["selective", "every:4"]
        elif cfg.checkpoint == "selective":
            ck.append("every:4")
    attn = [cfg.attention] + (["flash"] if estimated and cfg.attention == "eager" else [])
    accum = [g for g in range(cfg.grad_accum, cfg.batch + 1) if cfg.batch % g == 0 and g % cfg.grad_accum == 0]
    zero = list(range(cfg.zero, 4)) if cfg.gpus > 1 else [cfg.zero]
    return {
        "precision": prec,
        "optimizer": opts,
        "checkpoint": ck,
        "attention": attn,
        "grad_accum": [str(g) for g in accum],
        "zero": [str(z) for z in zero],
    }


def _best_every(cfg: PlanConfig) -> int | None:
    """The checkpoint interval K that minimizes estimated activations (all cost one extra forward)."""
    if not cfg.layers:
        return None
    best = min(
        range(1, cfg.layers + 1), key=lambda k: (activation_memory(replace(cfg, checkpoint=f"every:{k}")).bytes, k)
    )
    return best


_DESCRIBE: dict[str, Callable[[str, str], str]] = {  # a lever's change (from, to) in words
    "precision": lambda a, b: f"precision {PRECISIONS[a].label} → {PRECISIONS[b].label}",
    "optimizer": lambda a, b: f"optimizer {OPTIMIZERS[a].label} → {OPTIMIZERS[b].label}",
    "checkpoint": lambda a, b: {
        "selective": "selective activation recomputation (attention core)",
        "every:1": "activation checkpointing of every layer",
    }.get(b, f"activation checkpointing every {b.split(':')[-1]} layers"),
    "attention": lambda a, b: "fused attention (SDPA/FlashAttention): no s² scores stored",
    "grad_accum": lambda a, b: f"gradient accumulation over {b} micro-batches (was {a})",
    "zero": lambda a, b: f"ZeRO-{b}"
    + {
        "1": " (shard optimizer state)",
        "2": " (shard optimizer state + gradients)",
        "3": "/FSDP (shard optimizer state, gradients and parameters)",
    }[b],
}


def _cost(cfg: PlanConfig, new: PlanConfig, lg: Ledger, extra_gpus: int = 0) -> Cost:
    conv = numerics = comm = None
    if new.optimizer != cfg.optimizer:
        if new.optimizer in ("sgd", "momentum") and cfg.optimizer in ("adam", "adam8bit"):
            conv = f"~{SGD_STEPS_FACTOR:g}× more steps to converge (the textbook: Adam ~50K vs SGD+momentum ~150K+)"
        elif new.optimizer == "sgd":
            conv = "no momentum: slower convergence"
        elif new.optimizer == "adam8bit":
            numerics = "optimizer state quantized to 8 bits (bitsandbytes)"
    if new.precision != cfg.precision and cfg.precision == "mixed-fp32-grads":
        numerics = ((numerics + "; ") if numerics else "") + "gradients accumulate in 16 bits"
    if new.zero == 3 and cfg.zero < 3 and new.gpus > 1:
        comm = "1.5× data-parallel communication"
    return Cost(
        recompute_pct=lg.recompute_pct,
        micro_steps=new.grad_accum,
        extra_gpus=extra_gpus,
        convergence=conv,
        numerics=numerics,
        communication=comm,
    )


def fit_options(
    config: PlanConfig,
    device_name: str,
    capacity_bytes: float,
    threshold_pct: float = 90.0,
    limit: int = 6,
    max_gpus: int = 1024,
) -> list[FitOption]:
    """The cheapest sets of changes that make ``config`` fit ``capacity_bytes``, cheapest first.

    Every combination of the levers is tried; for each set of levers changed, the cheapest fitting
    values are kept, and a set is dropped when a smaller set already fits. Sharding over more GPUs
    (ZeRO-3, the fewest GPUs that fit) is offered last: it needs hardware, not a setting.
    """
    base = normalize(config)
    base_lg = ledger(base)
    if fit(base_lg, device_name, capacity_bytes, threshold_pct).fits:
        return []
    estimated = base_lg.activations.method == "estimated"
    levers = _levers(base, estimated)
    names = list(levers)
    best: dict[frozenset[str], FitOption] = {}

    def combos(i: int, cur: dict[str, str]) -> Iterator[dict[str, str]]:
        if i == len(names):
            yield dict(cur)
            return
        for v in levers[names[i]]:
            cur[names[i]] = v
            yield from combos(i + 1, cur)

    for combo in combos(0, {}):
        new = replace(
            base,
            precision=combo["precision"],
            optimizer=combo["optimizer"],
            checkpoint=combo["checkpoint"],
            attention=combo["attention"],
            grad_accum=int(combo["grad_accum"]),
            zero=int(combo["zero"]),
        )
        changed = [k for k in names if combo[k] != str(getattr(base, k))]
        if not changed:
            continue
        try:
            lg = ledger(new)
        except ValueError:
            continue
        f = fit(lg, device_name, capacity_bytes, threshold_pct)
        if not f.fits:
            continue
        changes = [
            Change(k, str(getattr(base, k)), combo[k], _DESCRIBE[k](str(getattr(base, k)), combo[k])) for k in changed
        ]
        opt = FitOption(changes, lg, f, _cost(base, new, lg))
        key = frozenset(changed)
        if key not in best or (_rank(opt), lg.total_bytes) < (_rank(best[key]), best[key].ledger.total_bytes):
            best[key] = opt
    minimal = [o for k, o in best.items() if not any(other < k for other in best)]
    minimal.sort(key=lambda o: (_rank(o), len(o.changes), o.ledger.total_bytes))
    out = minimal[:limit]

    # More hardware: the fewest data-parallel GPUs that fit with some ZeRO stage (the lowest
    # stage at that count), everything else unchanged.
    for n in range(max(2, base.gpus + 1), max_gpus + 1):
        hit = None
        for stage in (1, 2, 3):
            new = replace(base, gpus=n, zero=max(stage, base.zero))
            lg = ledger(new)
            f = fit(lg, device_name, capacity_bytes, threshold_pct)
            if f.fits:
                hit = (new, lg, f)
                break
        if hit:
            new, lg, f = hit
            ch = [
                Change(
                    "gpus",
                    str(base.gpus),
                    str(n),
                    f"shard over {n} data-parallel GPUs with {_DESCRIBE['zero']('0', str(new.zero))}",
                )
            ]
            out.append(
                FitOption(
                    ch,
                    lg,
                    f,
                    Cost(
                        recompute_pct=lg.recompute_pct,
                        micro_steps=base.grad_accum,
                        extra_gpus=n - base.gpus,
                        communication="1.5× data-parallel communication" if new.zero == 3 else None,
                    ),
                )
            )
            break
    return out


def _rank(o: FitOption) -> tuple[int, bool, bool, bool, float, bool, int]:
    # A plan that fits only above the capacity threshold is a risk (fragmentation, workspace,
    # the ZeRO paper): it ranks after exact plans with headroom but before slower convergence.
    k = o.cost.key()
    return (k[0], k[1], o.fit.tight) + k[2:]
