"""The words a finding is told in, chosen by the run's :class:`Context`.

One place for the text that depends on what the run is: the headline of a finding, its one-line
detail, and its fix (title and code). An inference run is not told about training or given an
optimizer snippet; a native CUDA/HIP application gets the runtime-API equivalent rather than a
PyTorch snippet; an all-to-all exchange gets advice on the exchange, not on DDP gradient buckets.

API: :func:`title` and :func:`detail` for a finding's wording, :func:`fix_text` for its fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from trainscope.analyzers.context import TRAINING, Context

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.findings.base import FixWording


@dataclass(frozen=True)
class FixText:
    rec_id: str  # the recommendation's id
    title: str
    change: str  # the concrete code or flag


_SHELL = __import__("re").compile(
    r"^(\$ |nvidia-smi|rocm-smi|nsys |ncu |export |sudo |python -m |trainscope |"
    r"[A-Z_][A-Z0-9_]*=\S+ )",
    __import__("re").M,
)


_CPP_STATEMENT = __import__("re").compile(r";\s*(//.*)?$")


def code_language(change: str) -> str:
    """The language of a fix's code, for a code fence: ``cpp`` for CUDA/HIP runtime code (``//``
    comments), ``shell`` for commands (``nvidia-smi``, ``nsys``), else ``python``."""
    lines = [x for x in change.splitlines() if x.strip()]
    if lines and all(x.lstrip().startswith(("//", "...")) or _CPP_STATEMENT.search(x) for x in lines):
        return "cpp"
    if (
        lines
        and all(_SHELL.search(x) or x.lstrip().startswith("#") for x in lines)
        and any(_SHELL.search(x) for x in lines)
    ):
        return "shell"
    return "python"


def _ctx(ctx: Context | None) -> Context:
    return ctx if ctx is not None else TRAINING


def _loop(ctx: Context) -> str:
    return (
        "training loop" if ctx.training else "loop" if ctx.native else "serving loop" if ctx.inference else "step loop"
    )


def title(finding_id: str, ctx: Context | None, default: str) -> str:
    """A finding's headline in the run's words (``default`` where the wording fits any run)."""
    c = _ctx(ctx)
    if finding_id == "data/input-wait":
        if c.input_source == "communication":
            return "The GPU waits while the host is in the communication library (MPI)"
        return "Training waits on the input pipeline" if c.training else "The pipeline waits on input"
    if finding_id == "comm/unoverlapped" and c.main_collective == "all-to-all":
        return "All-to-all exchange not overlapped with compute"
    return default


def detail(finding_id: str, ctx: Context | None, default: str) -> str:
    """A finding's one-line explanation in the run's words."""
    c = _ctx(ctx)
    if finding_id == "host/sync":
        if c.native:
            return "cudaDeviceSynchronize/cudaStreamSynchronize or blocking cudaMemcpy/hipMemcpy calls inside the step"
        return default
    if finding_id == "host/blocking-sync" and c.native:
        return (
            "each sync drains the GPU queue (cudaDeviceSynchronize, cudaStreamSynchronize, a blocking cudaMemcpy); "
            "the GPU then waits for the host to issue the next kernel"
        )
    if finding_id == "comm/unoverlapped" and c.main_collective == "all-to-all":
        return "the all-to-all exchange (embedding or expert shards) runs while no compute kernel does"
    if finding_id == "data/input-wait" and c.input_source == "communication":
        return (
            "the host sits in MPI_* calls while the GPU idles: communication on the critical path, "
            "not batch loading or preprocessing"
        )
    if finding_id == "cpu/input-wait" and not c.training:
        return "the run is on the CPU here, so every millisecond spent loading a batch adds to the step"
    return default


def fix_text(
    finding_id: str, ctx: Context | None, *, single_loader: bool = False, bf16: bool = True, cold_start: bool = False
) -> FixWording | None:
    """The fix for ``finding_id`` in the run's context, or None when the finding has no code fix.
    ``cold_start``: the launch overhead is first-call code loading, not steady-state launches."""
    c = _ctx(ctx)
    if finding_id == "host/launch-overhead" and cold_start:
        return _cold_start(c)
    from trainscope.analyzers.findings import spec  # the registry names each finding's text function

    s = spec(finding_id)
    f = s.fix.text if s is not None and s.fix is not None else None
    return f(c, single_loader, bf16) if f else None


def _input_wait(c: Context, single: bool, bf16: bool) -> FixText:
    if c.input_source == "communication" and not c.native:
        return FixText(
            "overlap-communication",
            "Overlap the host's communication with GPU work",
            "# the host waits in the communication library (MPI_*), not on input: post it early\n"
            "req = comm.Irecv(buf, source=src)   # mpi4py, non-blocking, before the GPU work\n"
            "out = model(x)                      # work that does not need buf\n"
            "req.Wait()                          # just before buf is used",
        )
    if c.input_source == "communication":
        return FixText(
            "overlap-communication",
            "Overlap the host's communication with GPU work",
            "// the host waits in the communication library (MPI_*), not on input: post it early\n"
            "MPI_Irecv(buf, n, MPI_FLOAT, src, tag, comm, &req);   // non-blocking, before the kernels\n"
            "// ... launch the kernels that do not need buf ...\n"
            "MPI_Wait(&req, MPI_STATUS_IGNORE);                   // just before buf is used",
        )
    if c.input_source == "pipeline" and not c.native:
        return FixText(
            "dataloader-workers",
            "Move the pipeline's preprocessing off the GPU's critical path",
            "# the trace shows the pipeline's own preprocess frames, not a DataLoader:\n"
            "# decode/resize the next inputs on other threads while the GPU runs this batch\n"
            "from concurrent.futures import ThreadPoolExecutor\n"
            "pool = ThreadPoolExecutor(max_workers=4)\n"
            'nxt = pool.submit(processor, next_inputs, return_tensors="pt")  # prepare batch i+1\n'
            "out = model(**batch)                                           # while batch i runs\n"
            "batch = {k: v.to(device, non_blocking=True) for k, v in nxt.result().items()}",
        )
    if c.input_source == "files" and c.native:
        return FixText(
            "dataloader-workers",
            "Read input ahead of the compute loop",
            "// the host blocks in read()/fread() inside the step: read the next chunk on another thread\n"
            "// (or with io_uring / aio) into a pinned buffer while the kernels of this step run",
        )
    if c.native:
        return FixText(
            "dataloader-workers",
            "Prepare input on other threads and keep several batches in flight",
            "// producer threads decode/preprocess into a ring of pinned buffers (cudaHostAlloc / hipHostMalloc)\n"
            "// the compute loop takes the next ready buffer; cudaMemcpyAsync on a copy stream overlaps the kernels",
        )
    return FixText(
        "dataloader-workers",
        "Load batches in parallel worker processes and prefetch them"
        if single
        else "Prefetch more batches and add DataLoader workers",
        "# as many workers as this machine has CPU cores per GPU:\n"
        "workers = max(1, len(os.sched_getaffinity(0)) // max(1, torch.cuda.device_count()))\n"
        "DataLoader(dataset, batch_size=..., num_workers=workers,\n"
        "           pin_memory=True, prefetch_factor=2, persistent_workers=True)"
        + (
            ""
            if c.input_source == "dataloader"
            else "\n# no DataLoader in the trace: wrap the loading code in a Dataset so these workers run it"
        ),
    )


def _copies(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "overlap-copies",
            "Overlap host-to-device copies with compute (pinned buffers, async copies)",
            "cudaHostAlloc(&h_buf, bytes, cudaHostAllocDefault);        // page-locked host buffer\n"
            "cudaMemcpyAsync(d_buf, h_buf, bytes, cudaMemcpyHostToDevice, copy_stream);\n"
            "// double-buffer: compute on buffer i while buffer i+1 is copied",
        )
    return FixText(
        "overlap-copies",
        "Overlap host-to-device copies with compute (pinned memory, non_blocking)",
        _pin_line(c) + "\nx = x.to(device, non_blocking=True)",
    )


def _pin_line(c: Context) -> str:
    """Pinned batches the way this run gets its input: a DataLoader's flag where the trace shows
    one (or shows nothing), else pinning the tensors the pipeline builds."""
    if c.input_source in (None, "dataloader"):
        return "DataLoader(..., pin_memory=True)             # batches land in page-locked memory"
    return "x = x.pin_memory()                           # the pipeline's tensors, page-locked once"


def _pageable(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "pin-memory",
            "Copy from pinned memory, asynchronously",
            "cudaHostAlloc(&h_buf, bytes, cudaHostAllocDefault);  // or cudaHostRegister on an existing buffer\n"
            "cudaMemcpyAsync(d_buf, h_buf, bytes, cudaMemcpyHostToDevice, stream);  // no staging, no host block",
        )
    return FixText(
        "pin-memory",
        "Copy from pinned memory, asynchronously",
        _pin_line(c) + "\n"
        "x = x.to(device, non_blocking=True)          # copy overlaps compute\n"
        "# tensors built on the host each step: t.pin_memory() once, reuse the buffer",
    )


_NATIVE_SYNC = (
    "// replace cudaDeviceSynchronize()/blocking cudaMemcpy inside the loop with stream order and events:\n"
    "cudaEventRecord(done, stream); cudaStreamWaitEvent(other_stream, done);\n"
    "cudaMemcpyAsync(h_out, d_out, bytes, cudaMemcpyDeviceToHost, stream);  // read results a step later"
)


def _blocking_sync(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("remove-blocking-syncs", "Take synchronizations out of the step", _NATIVE_SYNC)
    if c.training:
        change = (
            "running_loss += loss.detach()              # not loss.item() every step\n"
            "if step % 100 == 0: print(running_loss.item() / 100)  # sync rarely\n"
            "# drop torch.cuda.synchronize() and .cpu() from the training loop"
        )
    else:
        change = (
            "# build inputs on the GPU, or copy them from pinned memory without blocking:\n"
            "x = torch.as_tensor(values).pin_memory().to(device, non_blocking=True)  # not torch.tensor(..., device=...)\n"
            "# read results (.item(), .tolist(), .cpu()) once per batch, after the next launch is queued"
        )
    return FixText("remove-blocking-syncs", "Take synchronizations out of the step", change)


def _sync(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("remove-syncs", "Remove host-device synchronizations from the step", _NATIVE_SYNC)
    if c.training:
        change = (
            "# keep metrics on the GPU; read them every N steps, not every step\n"
            "running_loss += loss.detach()        # not loss.item()\n"
            "x = x.to(device, non_blocking=True)  # not a blocking copy"
        )
    else:
        change = (
            "# keep results on the GPU until they are needed; read them in one copy per batch\n"
            "x = x.to(device, non_blocking=True)  # not a blocking copy"
        )
    return FixText("remove-syncs", "Remove host-device synchronizations from the step", change)


def _launch(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "reduce-launch-overhead",
            "Launch fewer, larger kernels (CUDA/HIP graphs, kernel fusion)",
            "cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);  // record the step's launches once\n"
            "... launches ...\ncudaStreamEndCapture(stream, &graph); cudaGraphInstantiate(&exec, graph, 0);\n"
            "cudaGraphLaunch(exec, stream);                               // one launch per step",
        )
    lines = []
    if c.graphs:
        lines.append(
            "# the step already replays CUDA/HIP graphs: the launches left are outside them —\n"
            "# move that work into the captured region, or batch more requests per replay"
        )
    elif c.compiled:
        lines.append('model = torch.compile(model, mode="reduce-overhead")  # already compiled: add CUDA-graph capture')
    else:
        lines.append('model = torch.compile(model, mode="reduce-overhead")  # fuses kernels, captures CUDA graphs')
    opt = _fused_optimizer_line(c)
    if opt:
        lines.append(opt)
    if c.inference and not c.graphs:
        lines.append("# serving: batch more requests per launch (continuous batching in the server)")
    title = (
        "Launch fewer, larger kernels (more work per graph replay)"
        if c.graphs
        else "Launch fewer, larger kernels (CUDA graphs / torch.compile, bigger batches)"
    )
    return FixText("reduce-launch-overhead", title, "\n".join(lines))


def _fused_optimizer_line(c: Context) -> str | None:
    """A fused-optimizer line only for a training run whose trace records an Adam-family optimizer
    that is not already fused (an SGD, Adagrad or FusedAdam run gets none)."""
    if not c.training or c.fused_optimizer:
        return None
    name = c.optimizer
    if name is None or not name.lower().startswith("adam"):
        return None
    return f"optimizer = torch.optim.{name}(params, fused=True)  # one kernel per step, not per tensor"


def _cold_start(c: Context) -> FixText:
    if c.native:
        return FixText(
            "warm-up-kernels",
            "Load kernels before the timed work (warm-up, ahead-of-time code objects)",
            "// launch each kernel once (or cuModuleLoad/hipModuleLoad the code objects) before the loop;\n"
            "// build for the exact GPU architecture so no JIT compilation happens at first launch",
        )
    then = (
        "# then record only the warm steps: torch.cuda.profiler.start()/stop() around them and\n"
        "# nsys profile --capture-range=cudaProfilerApi"
        if c.source_format.startswith("nsys")
        else "# then profile: schedule(wait=1, warmup=2, active=3) in torch.profiler"
    )
    return FixText(
        "warm-up-kernels",
        "Warm up before measuring: the first launches load kernel code",
        "for _ in range(3):          # untimed warm-up iterations load and compile every kernel\n"
        "    step(batch)\n"
        "torch.cuda.synchronize()\n" + then,
    )


def _comm(c: Context, single: bool, bf16: bool) -> FixText:
    kind = c.main_collective
    if kind == "all-to-all":
        return FixText(
            "overlap-communication",
            "Balance and overlap the all-to-all exchange",
            "# balance the shards: every rank sends and receives about the same bytes\n"
            "#   (embedding tables / experts placed by measured size and lookup rate, not by count)\n"
            "# overlap the exchange: split the batch and run the all-to-all of chunk i+1 while chunk i computes\n"
            "#   (an async dist.all_to_all_single(..., async_op=True) on its own stream, wait() just before use)",
        )
    if c.native:
        return FixText(
            "overlap-communication",
            "Overlap communication with compute",
            "// post the exchange early on its own stream, compute what does not depend on it, then wait:\n"
            "ncclGroupStart(); ncclAllReduce(..., comm_stream); ncclGroupEnd();  // or MPI_Iallreduce\n"
            "cudaEventRecord(comm_done, comm_stream); cudaStreamWaitEvent(compute_stream, comm_done);",
        )
    if c.training and kind in (None, "all-reduce"):
        return FixText(
            "overlap-communication",
            "Overlap gradient communication with the backward pass",
            "model = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)\n"
            "# with gradient accumulation: `with model.no_sync():` on all but the last micro-step",
        )
    if c.training and kind in ("all-gather", "reduce-scatter"):
        return FixText(
            "overlap-communication",
            "Prefetch sharded parameters and overlap their gathers",
            "model = FSDP(model, forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,\n"
            "             limit_all_gathers=True)",
        )
    return FixText(
        "overlap-communication",
        "Overlap communication with compute",
        "work = dist.all_reduce(t, async_op=True)  # start the collective early\n"
        "# ... compute that does not need t ...\nwork.wait()                               # wait just before use",
    )


def _mixed_precision(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "mixed-precision",
            "Use tensor cores for the matrix math (reduced precision / TF32)",
            "cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH);  // fp32 GEMMs on tensor cores\n"
            "// or cublasGemmEx with CUDA_R_16BF inputs and CUBLAS_COMPUTE_32F (hipBLASLt likewise)",
        )
    dtype = "torch.bfloat16" if bf16 else "torch.float16"
    if c.training:
        change = f'with torch.autocast(device_type="cuda", dtype={dtype}):\n    loss = loss_fn(model(x), y)' + (
            "" if bf16 else "\nscaler = torch.amp.GradScaler()  # fp16 needs loss scaling"
        )
    else:
        change = f"model = model.to({dtype}).eval()\nwith torch.inference_mode():\n    out = model(x)"
    return FixText("mixed-precision", "Use mixed precision so GEMMs and convolutions run on tensor cores", change)


def _bandwidth(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native and c.decode:
        return FixText(
            "fuse-memory-bound",
            "Read the weights for more tokens: batch, quantize, speculate",
            "// the matrix kernels stream the weights once per step: batch more sequences per step,\n"
            "// quantize the weights (fp8 / int4 GEMMs) and the KV cache, decode speculatively",
        )
    if c.native:
        return FixText(
            "fuse-memory-bound",
            "Fuse memory-bound kernels so data is read once",
            "// merge consecutive elementwise/reduction kernels into one that keeps values in registers;\n"
            "// use vendor fused kernels (cuDNN/MIOpen fused ops, CUTLASS epilogues) where they exist",
        )
    if c.decode:
        return FixText(
            "fuse-memory-bound",
            "Read the weights for more tokens: batch, quantize, speculate",
            "# the matrix kernels stream the weights once per step: more tokens per read, fewer bytes per weight\n"
            "# more sequences per step: raise the server's batch (continuous batching, e.g. max_num_seqs)\n"
            "# fewer bytes: weight quantization (fp8 / int4), and an fp8 KV cache where the server keeps one\n"
            "# more tokens per weight read in autoregressive generation: speculative decoding (a draft model)",
        )
    lines = []
    if not c.compiled:
        lines.append("model = torch.compile(model)  # fuses chains of elementwise/normalization kernels")
    else:
        lines.append(
            "# already compiled: the memory-bound runs left are outside Inductor's fusions —\n"
            "# custom fused kernels (a Triton kernel for the chain), or lower-precision activations"
        )
    # No attention advice here: a trace with no attention (a CNN, DLRM) would be told to call SDPA.
    # Unfused attention is its own finding (machine/unfused-attention) with its own fix, raised only
    # where the trace shows the score matrices going through memory.
    what = "torch.compile" if not c.compiled else "custom kernels"
    return FixText(
        "fuse-memory-bound",
        f"Fuse memory-bound kernels ({what})",
        "\n".join(lines),
    )


def _attention(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "fused-attention",
            "Use a fused attention kernel (FlashAttention / cuDNN fused attention)",
            "// one kernel computes softmax(QK^T)V tile by tile, never writing the score matrix to memory",
        )
    if c.fused_attention:
        return FixText(
            "fused-attention",
            "Send the unfused attention through the fused kernels already in use",
            "# fused attention kernels already run in this trace: the layers that still compute\n"
            "# softmax(QK^T)V kernel by kernel should take the same attention backend (the model's\n"
            "# attention implementation setting), keeping their own mask",
        )
    if c.causal:
        call = "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # the trace records a causal mask"
    else:
        call = (
            "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
            "# keep the model's own mask (None where it attends to every position); no mask is recorded here"
        )
    return FixText(
        "fused-attention",
        "Use fused attention (SDPA / FlashAttention)",
        call + "\n# replaces scores = q @ k.transpose(-2, -1) / sqrt(d); mask; softmax; @ v",
    )


def _compute(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "compute-efficiency",
            "Already on tensor cores: raise arithmetic efficiency",
            "// tune GEMM tile shapes (cuBLASLt/hipBLASLt heuristics, CUTLASS), larger problem sizes per launch",
        )
    lines = []
    if c.inference and not c.compiled and not c.graphs:
        lines.append(
            "# a serving engine: its own compile and graph options (torch.compile inside the server,\n"
            '# CUDA-graph capture of the decode step); a plain script: torch.compile(model, mode="max-autotune")'
        )
    elif not c.compiled and not c.graphs:
        lines.append('model = torch.compile(model, mode="max-autotune")  # autotuned GEMM tiles')
    else:
        lines.append(
            "# already compiled/captured: autotune the GEMMs themselves (TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1, "
            "hipBLASLt/cuBLASLt tuning)"
        )
    if c.training:
        lines.append("# larger batch per GPU if memory allows: fuller tiles on every SM")
    else:
        lines.append("# more requests per batch (the server's batch size): fuller tiles on every SM")
    if not c.fused_attention:
        lines.append("# attention through F.scaled_dot_product_attention (fused kernels)")
    return FixText("compute-efficiency", "Already on tensor cores: raise arithmetic efficiency", "\n".join(lines))


def _capacity(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:  # before training: a native training code gets no PyTorch snippet either
        return FixText(
            "reduce-memory",
            "Cut device memory (smaller working sets, reuse buffers)",
            "// allocate once and reuse; process the problem in tiles that fit; free scratch buffers early",
        )
    if c.training:
        return FixText(
            "reduce-memory",
            "Cut activation memory (checkpointing, mixed precision)",
            "from torch.utils.checkpoint import checkpoint\nout = checkpoint(block, x, use_reentrant=False)",
        )
    return FixText(
        "reduce-memory",
        "Cut inference memory (lower-precision weights, smaller KV cache or batch)",
        "model = model.to(torch.bfloat16)  # or 8-/4-bit weight quantization\n"
        "# cap the batch / KV-cache size (e.g. gpu_memory_utilization, max_num_seqs in the server)",
    )


def __getattr__(name: str) -> dict[str, Callable[[Context, bool, bool], FixWording]]:
    """``_FIXES``: finding id -> its text function, as the registry declares them (read lazily: the
    registry's family modules import this one)."""
    if name == "_FIXES":
        from trainscope.analyzers.findings import REGISTRY

        return {s.id: s.fix.text for s in REGISTRY.values() if s.fix is not None and s.fix.text is not None}
    raise AttributeError(name)


def _record(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native or c.source_format.startswith("nsys"):
        return FixText(
            "record-trace",
            "Record a trace to see what idles the GPU",
            "nsys profile -t cuda,nvtx,osrt -o run ./app && nsys export --type sqlite run.nsys-rep\n"
            "# then: trainscope analyze run.sqlite",
        )
    return FixText(
        "record-trace",
        "Record a trace to see what idles the GPU",
        "with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=2, active=5),\n"
        "        on_trace_ready=torch.profiler.tensorboard_trace_handler('./trace')) as p:\n"
        "    for batch in batches: step(batch); p.step()\n"
        "# then: trainscope analyze ./trace",
    )


def _loader_cpu(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "loader-cpu",
            "Give the input pipeline more CPU, or do less work per sample",
            "// more producer threads for decoding; move decode/augmentation onto the GPU (nvJPEG, NPP, DALI)",
        )
    first = (
        "DataLoader(..., num_workers=<more>, persistent_workers=True)"
        if c.input_source in (None, "dataloader")
        else "# preprocessing runs in the pipeline itself: spread it over more threads or processes"
    )
    return FixText(
        "loader-cpu",
        "Give the input pipeline more CPU, or do less work per sample",
        first + "\n# move decoding/augmentation to the GPU (e.g. NVIDIA DALI, torchvision.transforms.v2 on tensors)",
    )


def _balance(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "balance-ranks",
            "Give every rank the same work",
            "// partition work by measured cost, not by count (rows, cells, tokens); re-partition\n"
            "// when per-rank kernel time drifts apart",
        )
    lines = ["# the late rank's extra kernel time per class (the rank imbalance line) says what to even out"]
    if c.embeddings:
        lines.append("# embedding tables: TorchRec EmbeddingShardingPlanner with per-table cost estimates")
    lines.append("# equal tokens per rank (bucket or pack sequences of similar length); equal pipeline stages")
    return FixText("balance-ranks", "Give every rank the same work", "\n".join(lines))
