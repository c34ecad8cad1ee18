"""What kind of run a trace records, detected once and handed to every finding.

Wording and fixes must fit the run: an inference trace is not told "training waits on the input
pipeline", a C++/MPI application gets no ``loss.item()`` snippet, an all-to-all embedding exchange
gets no DDP gradient-bucket advice. The evidence is read from the trace itself:

- **training vs inference**: autograd (``autograd::engine``, ``*Backward0``, ``aten::*_backward``),
  backward/optimizer ranges (``Optimizer.step#``, ``## backward ##``, NVTX "backward pass"), or
  backward/optimizer kernels (``flash_bwd``, ``*_backward_*``, multi-tensor Adam). A PyTorch trace
  with operators or PyTorch kernels and none of those is inference; a native application without
  them is ``unknown`` (its code names no phases we can trust).
- **graphs**: ``cudaGraphLaunch`` / ``hipGraphLaunch`` runtime calls (one call replays many kernels).
- **compiled**: ``torch.compile`` regions (``CompiledFunction``, ``Torch-Compiled Region``) or
  Triton/Inductor kernels (``triton_*``).
- **framework**: ``pytorch`` when the trace holds ATen operators, PyTorch's own kernels
  (``at::native::``), Python frames or ``torch``-named ranges; otherwise ``native`` (a CUDA/HIP/MPI
  application).
- **recording format**: ``kineto`` (torch.profiler) or ``nsys-sqlite`` (Nsight Systems): recording
  advice names the options of the tool the user has.
- **attention**: fused attention kernels already running (``flash``, ``fmha``, memory-efficient,
  unified attention), and the mask where the trace records one (``tril``/``triu`` operators, an
  ``is_causal``/``causal`` kernel or operator): ``causal`` is True only with that evidence.
- **optimizer**: the optimizer class the trace names (``Optimizer.step#SGD.step``), else the
  optimizer kernels' family (``multi_tensor_adam`` → Adam); ``fused_optimizer`` when its step
  already runs as multi-tensor or fused kernels.
- **input source**: what feeds the steps, by the host events: a ``DataLoader`` (ranges or frames),
  a pipeline's ``preprocess`` frames, file reads (``read``/``fread``/``pread`` OS calls), or host
  time in a communication library (``MPI_*``), which is communication, not input.
- **decode** (:func:`refine`, after the roofline): an inference run whose matrix kernels are mostly
  memory-bound streams its weights per token — a decode step — whatever the engine is called.
- **collectives**: NCCL/RCCL kernel time by kind (all-reduce, all-to-all, all-gather,
  reduce-scatter, broadcast). Point-to-point ``SendRecv`` kernels are how NCCL runs all-to-all
  (and pipeline sends); they count as ``all-to-all``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Protocol

import numpy as np

from trainscope.analyzers import codes
from trainscope.analyzers.trace.kernels import HIGH_INTENSITY
from trainscope.analyzers.trace.kernels import classify_kernel
from trainscope.traces.model import Column
from trainscope.traces.model import Trace

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.trace.roofline import Roofline

MODES = ("training", "inference", "unknown")
FRAMEWORKS = ("pytorch", "native")
COLLECTIVE_KINDS = ("all-reduce", "all-to-all", "all-gather", "reduce-scatter", "broadcast")

# Host operators / ranges that only a backward pass or an optimizer step records.
_BACKWARD_OP = re.compile(
    r"^autograd::|Backward\d*$|^aten::\w+_backward$|(^|[^a-z])(backward|bwd)([^a-z]|$)|"
    r"(Post|Pre)_?Backward",
    re.I,
)  # FSDP registers backward hooks only when training
_OPTIMIZER_RANGE = re.compile(r"^Optimizer\.(step|zero_grad)#|(^|[^a-z])optimi[sz]er([^a-z]|$)", re.I)
# Kernels that only a backward pass or an optimizer launches.
_BACKWARD_KERNEL = re.compile(r"(^|[^a-z])(bwd|backward)([^a-z]|$)|_backward_|Backward|dgrad|wgrad", re.I)
_OPTIMIZER_KERNEL = re.compile(r"adam|multi_tensor_apply|(^|[^a-z])(lamb|sgd)([^a-z]|$)", re.I)
_GRAPH_LAUNCH = re.compile(r"^(cuda|hip)GraphLaunch")
# Operators and ranges that choose the next token from the logits: an autoregressive decode loop runs
# one per generated token (greedy argmax, top-k/top-p sampling, multinomial draws, an engine's sampler).
_TOKEN_CHOICE = re.compile(r"(^|[^a-z])(argmax|multinomial|topk|top_k|top_p|sampl(e|er|ing))([^a-z]|$)", re.I)
_COMPILED = re.compile(r"CompiledFunction|Torch-Compiled Region|^triton_|TorchDynamo|inductor", re.I)
_PYTORCH_OP = re.compile(r"^aten::|^torch\.|^c10d::|ProfilerStep#|^autograd::")
_PYTORCH_KERNEL = re.compile(r"at::native::|at_cuda_detail|c10::")
_COMM = re.compile(r"nccl|rccl", re.I)
_FUSED_ATTENTION = re.compile(
    r"flash|fmha|efficient_attention|mem_eff|unified_attention|attn_fwd|fused_attention|"
    r"cudnn.*sdpa|paged_attention",
    re.I,
)
_CAUSAL = re.compile(r"causal|^aten::(tril|triu)(_)?$", re.I)
_OPT_CLASS = re.compile(r"^Optimizer\.step#(\w+)\.step")
_OPT_FAMILY = (
    ("Adam", re.compile(r"adam", re.I)),
    ("LAMB", re.compile(r"lamb", re.I)),
    ("Adagrad", re.compile(r"adagrad", re.I)),
    ("SGD", re.compile(r"sgd|momentum", re.I)),
)
_FUSED_OPT = re.compile(r"multi_tensor|fused_?adam|FusedAdam|_fused_", re.I)
_DATALOADER = re.compile(r"DataLoader|_MultiProcessingDataLoaderIter|_SingleProcessDataLoaderIter", re.I)
_PREPROCESS = re.compile(r"\(\d+\): (preprocess|_preprocess\w*|__call__ of \w*Processor)", re.I)
_FILE_READ = re.compile(r"^(read|pread64|pread|fread|readv|__read_chk)$")
_MPI = re.compile(r"^MPI_|^PMPI_")
_EMBEDDING = re.compile(r"embedding_(forward|backward)|split_embedding|EmbeddingBag|embedding_bag", re.I)
_COLLECTIVE = (
    ("all-reduce", re.compile(r"all_?reduce", re.I)),
    ("all-to-all", re.compile(r"all_?to_?all|sendrecv|(^|[^a-z])(send|recv)([^a-z]|$)", re.I)),
    ("all-gather", re.compile(r"all_?gather", re.I)),
    ("reduce-scatter", re.compile(r"reduce_?scatter", re.I)),
    ("broadcast", re.compile(r"broadcast", re.I)),
)


@dataclass(frozen=True)
class Context:
    mode: str = "unknown"  # "training" | "inference" | "unknown"
    graphs: bool = False  # CUDA/HIP graph replays (cudaGraphLaunch / hipGraphLaunch)
    compiled: bool = False  # torch.compile regions or Triton kernels
    framework: str = "pytorch"  # "pytorch" | "native" (no ATen ops: a C++/MPI/CUDA application)
    collectives: dict[str, float] = field(default_factory=dict)  # kind -> kernel ms, largest first
    evidence: list[str] = field(default_factory=list)
    source_format: str = "kineto"  # "kineto" | "nsys-sqlite" | other trace formats
    fused_attention: bool = False  # flash / fmha / memory-efficient attention kernels already run
    causal: bool | None = None  # True: a causal mask is recorded; None: no mask recorded
    optimizer: str | None = None  # the optimizer the trace names ("SGD", "AdamW", "FusedAdam", …)
    fused_optimizer: bool = False  # the optimizer step runs as multi-tensor / fused kernels
    input_source: str | None = None  # "dataloader" | "pipeline" | "files" | "communication" | None
    decode: bool = False  # inference whose matrix kernels stream weights (memory-bound): a decode step
    embeddings: bool = False  # sharded embedding-table kernels (FBGEMM/TorchRec split_embedding_*) run
    # Whether the roofline calls most matrix-kernel time compute-bound (None: no roofline): tensor
    # cores speed up arithmetic, so mixed-precision advice is for compute-bound matrix math only.
    matmul_compute_bound: bool | None = None
    # The trace shows a loop that generates tokens: operators choosing the next token called more than
    # once, or CUDA/HIP graph replays (serving engines capture the decode step and replay it per token).
    # Without it no run is a decode step, whatever its matrix kernels (context.refine).
    decode_loop: bool = False

    @property
    def training(self) -> bool:
        return self.mode == "training"

    @property
    def inference(self) -> bool:
        return self.mode == "inference"

    @property
    def native(self) -> bool:
        return self.framework == "native"

    @property
    def main_collective(self) -> str | None:
        """The collective kind with the most kernel time, or None without collectives."""
        return max(self.collectives, key=lambda k: self.collectives[k]) if self.collectives else None


# The context assumed when none was detected (live sessions, callers that pass none): a PyTorch
# training job, which is what trainscope's advice was first written for.
TRAINING = Context(mode="training", framework="pytorch")


class _NamedRows(Protocol):
    """A trace table with a name column (kernels, runtime calls, operators, ranges, frames)."""

    name: Column

    def __len__(self) -> int: ...


def _names(trace: Trace, table: _NamedRows) -> list[str]:
    if not len(table):
        return []
    return [trace.strings[i] for i in codes.distinct(table.name).tolist()]  # counted, not hashed: 5 M operators


def _first(names: list[str], rx: re.Pattern[str]) -> str | None:
    return next((n for n in names if rx.search(n)), None)


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def detect_context(trace: Trace) -> Context:
    """The run's context with one evidence line per decision."""
    ops = _names(trace, trace.cpu_ops)
    host_ranges = _names(trace, trace.annotations)
    kernels = _names(trace, trace.kernels)
    runtime = _names(trace, trace.runtime)
    frames = getattr(trace, "python_frames", None)
    python = frames is not None and len(frames) > 0
    evidence: list[str] = []

    # Framework first: which wording applies to the rest.
    hit = _first(ops, _PYTORCH_OP) or _first(host_ranges, _PYTORCH_OP) or _first(kernels, _PYTORCH_KERNEL)
    if hit is not None or python:
        framework = "pytorch"
        evidence.append(f"PyTorch: {_short(hit) if hit else 'Python frames'} in the trace")
    else:
        framework = "native"
        evidence.append("native application: no ATen operators, PyTorch kernels or Python frames in the trace")

    bwd = _first(ops, _BACKWARD_OP) or _first(host_ranges, _BACKWARD_OP)
    opt = _first(host_ranges, _OPTIMIZER_RANGE) or _first(ops, _OPTIMIZER_RANGE)
    kbwd = _first(kernels, _BACKWARD_KERNEL)
    kopt = _first(kernels, _OPTIMIZER_KERNEL) if framework == "pytorch" else None
    # Optimizer-like kernels alone (multi_tensor_apply runs any foreach op) are no training evidence
    # without a backward pass or an optimizer range: an inference engine uses foreach ops too.
    found = bwd or opt or kbwd or (kopt if (bwd or kbwd or opt) else None)
    if found is not None:
        mode = "training"
        what = "backward pass" if (bwd or kbwd) else "optimizer step"
        evidence.append(f"training: {what} recorded ({_short(found)})")
    elif framework == "pytorch" and (ops or kernels):
        mode = "inference"
        evidence.append("inference: no backward pass or optimizer step in the trace")
    else:
        mode = "unknown"
        evidence.append("training or inference: no backward or optimizer evidence, and no framework to tell")

    g = _first(runtime, _GRAPH_LAUNCH)
    graphs = g is not None
    if g is not None:  # graphs
        n = int(np.isin(trace.runtime.name, [trace.strings.index(g)]).sum())
        evidence.append(f"graph replays: {n} {g} call{'s' * (n != 1)}")

    c = _first(ops, _COMPILED) or _first(host_ranges, _COMPILED) or _first(kernels, _COMPILED)
    compiled = c is not None
    if c is not None:  # compiled
        evidence.append(f"compiled: {_short(c)}")

    collectives = collective_ms(trace)
    if collectives:
        evidence.append("collectives: " + ", ".join(f"{k} {v:.1f} ms" for k, v in collectives.items()))

    fa = _first(kernels, _FUSED_ATTENTION)
    if fa is not None:
        evidence.append(f"fused attention: {_short(fa)}")
    cm = _first(ops, _CAUSAL) or _first(kernels, _CAUSAL)
    if cm is not None:
        evidence.append(f"causal mask: {_short(cm)}")
    opt_name = next((m.group(1) for n in host_ranges + ops if (m := _OPT_CLASS.search(n))), None)
    kopt_all = [n for n in kernels if _OPTIMIZER_KERNEL.search(n)]
    if opt_name is None and kopt_all:
        opt_name = next((fam for fam, rx in _OPT_FAMILY for n in kopt_all if rx.search(n)), None)
    fused_opt = any(_FUSED_OPT.search(n) for n in kopt_all) or bool(opt_name and opt_name.startswith("Fused"))
    if opt_name is not None:
        evidence.append(f"optimizer: {opt_name}{' (fused kernels)' if fused_opt else ''}")
    frame_names = _names(trace, frames) if frames is not None and python else []
    os_runtime = getattr(trace, "os_runtime", None)
    os_calls = _names(trace, os_runtime) if os_runtime is not None else []
    source = None
    if _first(host_ranges, _DATALOADER) or _first(ops, _DATALOADER) or _first(frame_names, _DATALOADER):
        source = "dataloader"
    elif _first(frame_names, _PREPROCESS):
        source = "pipeline"
    elif _first(host_ranges + ops + runtime + os_calls, _MPI):
        source = "communication"
    elif _first(os_calls, _FILE_READ):
        source = "files"
    if source is not None:
        evidence.append(f"input: {source}")
    emb = _first(kernels, _EMBEDDING)
    if emb is not None:
        evidence.append(f"embedding tables: {_short(emb)}")
    token_ids = [i for i, n in enumerate(trace.strings) if _TOKEN_CHOICE.search(n)]
    token_calls = sum(
        int(np.isin(t.name, token_ids).sum()) for t in (trace.cpu_ops, trace.annotations) if len(t) and token_ids
    )
    decode_loop = mode == "inference" and (graphs or token_calls >= 2)
    if decode_loop:
        evidence.append(
            "decode loop: " + ("graph replays" if graphs else f"{token_calls} calls choosing the next token")
        )
    return Context(
        mode,
        graphs,
        compiled,
        framework,
        collectives,
        evidence,
        getattr(trace, "format", "kineto"),
        fa is not None,
        True if cm is not None else None,
        opt_name,
        fused_opt,
        source,
        embeddings=emb is not None,
        decode_loop=decode_loop,
    )


def refine(ctx: Context, roof: Roofline | None) -> Context:
    """The context with what the roofline adds: an inference run whose matrix-kernel time is mostly
    memory-bound (operands — the weights — streamed per token) is a decode step."""
    if roof is None:
        return ctx
    from dataclasses import replace

    mem = comp = mat_mem = mat_comp = 0.0
    for r in roof.rows:
        cls = classify_kernel(r.name)
        if cls in HIGH_INTENSITY:
            mat_mem += r.total_ms if r.bound == "memory" else 0.0
            mat_comp += r.total_ms if r.bound == "compute" else 0.0
        if cls == "gemm":
            if r.bound == "memory":
                mem += r.total_ms
            elif r.bound == "compute":
                comp += r.total_ms
    if mat_mem + mat_comp > 0:
        ctx = replace(ctx, matmul_compute_bound=mat_comp >= mat_mem)
    if not ctx.inference or mem <= comp or mem <= 0 or not ctx.decode_loop:
        return ctx  # memory-bound matrix kernels alone are small-batch inference, not token generation

    return replace(
        ctx,
        decode=True,
        evidence=[
            *ctx.evidence,
            f"decode: matrix kernels memory-bound {mem:.1f} ms "
            f"against compute-bound {comp:.1f} ms (weights streamed per token)",
        ],
    )


def collective_ms(trace: Trace) -> dict[str, float]:
    """NCCL/RCCL kernel time per collective kind (ms, summed over the trace's kernels), largest first."""
    k = trace.kernels
    if not len(k):
        return {}
    ids, inverse = codes.unique_inverse(k.name)
    per_name = np.bincount(inverse, weights=k.dur.astype(np.float64), minlength=len(ids))
    out: dict[str, float] = {}
    for i, total in zip(ids.tolist(), per_name.tolist()):
        name = trace.strings[i]
        if not _COMM.search(name):
            continue
        kind = next((kd for kd, rx in _COLLECTIVE if rx.search(name)), None)
        if kind is not None:
            out[kind] = out.get(kind, 0.0) + total / 1e6
    return dict(sorted(((k, round(v, 3)) for k, v in out.items()), key=lambda kv: -kv[1]))
