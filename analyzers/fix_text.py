"""The words a finding is told in, chosen by the run's :class:`Context`.

One place for the text that depends on what the run is: the headline of a finding, its one-line
detail, and its fix (title and code). An inference run is not told about training or given an
optimizer snippet; a native CUDA/HIP application gets the runtime-API equivalent rather than a
PyTorch snippet; an all-to-all exchange gets advice on the exchange, not on DDP gradient buckets.

API: :func:`title` and :func:`detail` for a finding's wording, :func:`fix_text` for its fix.
"""
from __future__ import annotations

from dataclasses import dataclass

from trainscope.analyzers.context import TRAINING, Context


@dataclass(frozen=True)
class FixText:
    rec_id: str  # the recommendation's id
    title: str
    change: str  # the concrete code or flag


def _ctx(ctx: Context | None) -> Context:
    return ctx if ctx is not None else TRAINING


def _loop(ctx: Context) -> str:
    return "training loop" if ctx.training else "loop" if ctx.native else "serving loop" if ctx.inference else "step loop"


def title(finding_id: str, ctx: Context | None, default: str) -> str:
    """A finding's headline in the run's words (``default`` where the wording fits any run)."""
    c = _ctx(ctx)
    if finding_id == "data/input-wait":
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
        return ("each sync drains the GPU queue (cudaDeviceSynchronize, cudaStreamSynchronize, a blocking cudaMemcpy); "
                "the GPU then waits for the host to issue the next kernel")
    if finding_id == "comm/unoverlapped" and c.main_collective == "all-to-all":
        return "the all-to-all exchange (embedding or expert shards) runs while no compute kernel does"
    if finding_id == "cpu/input-wait" and not c.training:
        return "the run is on the CPU here, so every millisecond spent loading a batch adds to the step"
    return default


def fix_text(finding_id: str, ctx: Context | None, *, single_loader: bool = False, bf16: bool = True,
             cold_start: bool = False) -> FixText | None:
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
    if c.native:
        return FixText("dataloader-workers", "Prepare input on other threads and keep several batches in flight",
                       "// producer threads decode/preprocess into a ring of pinned buffers (cudaHostAlloc / hipHostMalloc)\n"
                       "// the compute loop takes the next ready buffer; cudaMemcpyAsync on a copy stream overlaps the kernels")
    return FixText("dataloader-workers",
                   "Load batches in parallel worker processes and prefetch them" if single else
                   "Prefetch more batches and add DataLoader workers",
                   "DataLoader(dataset, batch_size=..., num_workers=8,  # ≈ CPU cores per GPU\n"
                   "           pin_memory=True, prefetch_factor=2, persistent_workers=True)"
                   + ("" if c.training else
                      "\n# preprocessing outside a DataLoader (a pipeline's processor): run it in those workers, or on the GPU"))


def _copies(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("overlap-copies", "Overlap host-to-device copies with compute (pinned buffers, async copies)",
                       "cudaHostAlloc(&h_buf, bytes, cudaHostAllocDefault);        // page-locked host buffer\n"
                       "cudaMemcpyAsync(d_buf, h_buf, bytes, cudaMemcpyHostToDevice, copy_stream);\n"
                       "// double-buffer: compute on buffer i while buffer i+1 is copied")
    return FixText("overlap-copies", "Overlap host-to-device copies with compute (pinned memory, non_blocking)",
                   "DataLoader(..., pin_memory=True)\nx = x.to(device, non_blocking=True)")


def _pageable(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("pin-memory", "Copy from pinned memory, asynchronously",
                       "cudaHostAlloc(&h_buf, bytes, cudaHostAllocDefault);  // or cudaHostRegister on an existing buffer\n"
                       "cudaMemcpyAsync(d_buf, h_buf, bytes, cudaMemcpyHostToDevice, stream);  // no staging, no host block")
    return FixText("pin-memory", "Copy from pinned memory, asynchronously",
                   "DataLoader(..., pin_memory=True)             # batches land in page-locked memory\n"
                   "x = x.to(device, non_blocking=True)          # copy overlaps compute\n"
                   "# tensors built on the host each step: t.pin_memory() once, reuse the buffer")


_NATIVE_SYNC = ("// replace cudaDeviceSynchronize()/blocking cudaMemcpy inside the loop with stream order and events:\n"
                "cudaEventRecord(done, stream); cudaStreamWaitEvent(other_stream, done);\n"
                "cudaMemcpyAsync(h_out, d_out, bytes, cudaMemcpyDeviceToHost, stream);  // read results a step later")


def _blocking_sync(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("remove-blocking-syncs", "Take synchronizations out of the step", _NATIVE_SYNC)
    if c.training:
        change = ("running_loss += loss.detach()              # not loss.item() every step\n"
                  "if step % 100 == 0: print(running_loss.item() / 100)  # sync rarely\n"
                  "# drop torch.cuda.synchronize() and .cpu() from the training loop")
    else:
        change = ("# build inputs on the GPU, or copy them from pinned memory without blocking:\n"
                  "x = torch.as_tensor(values).pin_memory().to(device, non_blocking=True)  # not torch.tensor(..., device=...)\n"
                  "# read results (.item(), .tolist(), .cpu()) once per batch, after the next launch is queued")
    return FixText("remove-blocking-syncs", "Take synchronizations out of the step", change)


def _sync(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("remove-syncs", "Remove host-device synchronizations from the step", _NATIVE_SYNC)
    if c.training:
        change = ("# keep metrics on the GPU; read them every N steps, not every step\n"
                  "running_loss += loss.detach()        # not loss.item()\n"
                  "x = x.to(device, non_blocking=True)  # not a blocking copy")
    else:
        change = ("# keep results on the GPU until they are needed; read them in one copy per batch\n"
                  "x = x.to(device, non_blocking=True)  # not a blocking copy")
    return FixText("remove-syncs", "Remove host-device synchronizations from the step", change)


def _launch(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("reduce-launch-overhead", "Launch fewer, larger kernels (CUDA/HIP graphs, kernel fusion)",
                       "cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);  // record the step's launches once\n"
                       "... launches ...\ncudaStreamEndCapture(stream, &graph); cudaGraphInstantiate(&exec, graph, 0);\n"
                       "cudaGraphLaunch(exec, stream);                               // one launch per step")
    change = 'model = torch.compile(model, mode="reduce-overhead")  # captures CUDA graphs'
    if c.training:
        change += "\noptimizer = torch.optim.AdamW(params, fused=True)     # one kernel per step, not per tensor"
    else:
        change += "\n# serving: capture the decode step in a CUDA graph per batch size; batch more requests per launch"
    return FixText("reduce-launch-overhead", "Launch fewer, larger kernels (CUDA graphs / torch.compile, bigger batches)", change)


def _cold_start(c: Context) -> FixText:
    if c.native:
        return FixText("warm-up-kernels", "Load kernels before the timed work (warm-up, ahead-of-time code objects)",
                       "// launch each kernel once (or cuModuleLoad/hipModuleLoad the code objects) before the loop;\n"
                       "// build for the exact GPU architecture so no JIT compilation happens at first launch")
    return FixText("warm-up-kernels", "Warm up before measuring: the first launches load kernel code",
                   "for _ in range(3):          # untimed warm-up iterations load and compile every kernel\n"
                   "    step(batch)\n"
                   "torch.cuda.synchronize()\n# then profile: schedule(wait=1, warmup=2, active=3) in torch.profiler")


def _comm(c: Context, single: bool, bf16: bool) -> FixText:
    kind = c.main_collective
    if kind == "all-to-all":
        return FixText("overlap-communication", "Balance and overlap the all-to-all exchange",
                       "# balance the shards: every rank sends and receives about the same bytes\n"
                       "#   (embedding tables / experts placed by measured size and lookup rate, not by count)\n"
                       "# overlap the exchange: split the batch and run the all-to-all of chunk i+1 while chunk i computes\n"
                       "#   (an async dist.all_to_all_single(..., async_op=True) on its own stream, wait() just before use)")
    if c.native:
        return FixText("overlap-communication", "Overlap communication with compute",
                       "// post the exchange early on its own stream, compute what does not depend on it, then wait:\n"
                       "ncclGroupStart(); ncclAllReduce(..., comm_stream); ncclGroupEnd();  // or MPI_Iallreduce\n"
                       "cudaEventRecord(comm_done, comm_stream); cudaStreamWaitEvent(compute_stream, comm_done);")
    if c.training and kind in (None, "all-reduce"):
        return FixText("overlap-communication", "Overlap gradient communication with the backward pass",
                       "model = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)\n"
                       "# with gradient accumulation: `with model.no_sync():` on all but the last micro-step")
    if c.training and kind in ("all-gather", "reduce-scatter"):
        return FixText("overlap-communication", "Prefetch sharded parameters and overlap their gathers",
                       "model = FSDP(model, forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,\n"
                       "             limit_all_gathers=True)")
    return FixText("overlap-communication", "Overlap communication with compute",
                   "work = dist.all_reduce(t, async_op=True)  # start the collective early\n"
                   "# ... compute that does not need t ...\nwork.wait()                               # wait just before use")


def _mixed_precision(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("mixed-precision", "Use tensor cores for the matrix math (reduced precision / TF32)",
                       "cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH);  // fp32 GEMMs on tensor cores\n"
                       "// or cublasGemmEx with CUDA_R_16BF inputs and CUBLAS_COMPUTE_32F (hipBLASLt likewise)")
    dtype = "torch.bfloat16" if bf16 else "torch.float16"
    if c.training:
        change = (f'with torch.autocast(device_type="cuda", dtype={dtype}):\n    loss = model(x).loss'
                  + ("" if bf16 else "\nscaler = torch.amp.GradScaler()  # fp16 needs loss scaling"))
    else:
        change = f"model = model.to({dtype}).eval()\nwith torch.inference_mode():\n    out = model(x)"
    return FixText("mixed-precision", "Use mixed precision so GEMMs and convolutions run on tensor cores", change)


def _bandwidth(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("fuse-memory-bound", "Fuse memory-bound kernels so data is read once",
                       "// merge consecutive elementwise/reduction kernels into one that keeps values in registers;\n"
                       "// use vendor fused kernels (cuDNN/MIOpen fused ops, CUTLASS epilogues) where they exist")
    change = "model = torch.compile(model)\nF.scaled_dot_product_attention(q, k, v)  # fused attention instead of softmax(QK^T)V"
    return FixText("fuse-memory-bound",
                   "Fuse memory-bound kernels (torch.compile; fused optimizers and attention)" if c.training else
                   "Fuse memory-bound kernels (torch.compile; fused attention)", change)


def _attention(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("fused-attention", "Use a fused attention kernel (FlashAttention / cuDNN fused attention)",
                       "// one kernel computes softmax(QK^T)V tile by tile, never writing the score matrix to memory")
    return FixText("fused-attention", "Use fused attention (SDPA / FlashAttention)",
                   "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
                   "# replaces scores = q @ k.transpose(-2, -1) / sqrt(d); mask; softmax; @ v")


def _compute(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("compute-efficiency", "Already on tensor cores: raise arithmetic efficiency",
                       "// tune GEMM tile shapes (cuBLASLt/hipBLASLt heuristics, CUTLASS), larger problem sizes per launch")
    return FixText("compute-efficiency", "Already on tensor cores: raise arithmetic efficiency",
                   "model = torch.compile(model, mode=\"max-autotune\")\n# larger batch per GPU if memory allows; FlashAttention via SDPA")


def _capacity(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:  # before training: a native training code gets no PyTorch snippet either
        return FixText("reduce-memory", "Cut device memory (smaller working sets, reuse buffers)",
                       "// allocate once and reuse; process the problem in tiles that fit; free scratch buffers early")
    if c.training:
        return FixText("reduce-memory", "Cut activation memory (checkpointing, mixed precision)",
                       "from torch.utils.checkpoint import checkpoint\nout = checkpoint(block, x, use_reentrant=False)")
    return FixText("reduce-memory", "Cut inference memory (lower-precision weights, smaller KV cache or batch)",
                   "model = model.to(torch.bfloat16)  # or 8-/4-bit weight quantization\n"
                   "# cap the batch / KV-cache size (e.g. gpu_memory_utilization, max_num_seqs in the server)")


def __getattr__(name: str):
    """``_FIXES``: finding id -> its text function, as the registry declares them (read lazily: the
    registry's family modules import this one)."""
    if name == "_FIXES":
        from trainscope.analyzers.findings import REGISTRY

        return {s.id: s.fix.text for s in REGISTRY.values() if s.fix is not None and s.fix.text is not None}
    raise AttributeError(name)
