"""Fixes for the findings, ranked by projected gain computed from the measured breakdown.

Every projection is an upper bound and says so. Removing a cause that idles the GPU cannot make
the step shorter than the GPU's own busy time, so idle-cause projections are
``T / max(T − removed, T_busy)``. Mixed precision on a GEMM share ``g`` with tensor-core speedup
``s`` gives ``1 / ((1 − g) + g / s)`` (DIAGNOSIS.md §4, Amdahl's law).
"""
from __future__ import annotations

from dataclasses import dataclass

from trainscope.analyzers.breakdown import Breakdown
from trainscope.analyzers.devices import DeviceSpec
from trainscope.analyzers.verdict import Finding


@dataclass(frozen=True)
class Recommendation:
    id: str
    finding: str
    title: str
    change: str  # the concrete code or flag
    projected_speedup: float | None  # upper bound, ×; None when no projection is possible
    projected_step_ms: float | None
    basis: str  # the formula with the measured numbers

    @property
    def projection_text(self) -> str:
        if self.projected_speedup is None:
            return "no projection"
        return f"up to {self.projected_speedup:.2f}× faster (step ≥ {self.projected_step_ms:.1f} ms)"


def _remove(b: Breakdown, removed_frac: float, busy_time: bool = False) -> tuple[float, str]:
    """Speedup bound when ``removed_frac`` of the step disappears. Idle time removed leaves the
    GPU's busy time as a floor; busy time removed (``busy_time``) lowers that floor with it."""
    busy = b.gpu_busy_pct / 100
    floor = busy - removed_frac if busy_time else busy
    left = max(1.0 - removed_frac, floor, 1e-9)
    if busy_time:
        return 1.0 / left, f"1 / (1 − {removed_frac:.3f})"
    return 1.0 / left, f"1 / max(1 − {removed_frac:.3f}, GPU busy {busy:.3f})"


def recommend(found: list[Finding], b: Breakdown, spec: DeviceSpec | None, device_name: str | None) -> list[Recommendation]:
    by_id = {f.id: f for f in found}
    step = b.step_ms.mean
    recs: list[Recommendation] = []

    def add(rid: str, fid: str, title: str, change: str, speedup: float | None, basis: str) -> None:
        recs.append(Recommendation(rid, fid, title, change, None if speedup is None else round(speedup, 3),
                                   None if speedup is None else round(step / speedup, 2), basis))

    if f := by_id.get("data/input-wait"):
        s, basis = _remove(b, b.data_wait_pct / 100)
        single = any("num_workers=0" in e.metric for e in f.evidence)
        add("dataloader-workers", f.id,
            "Load batches in parallel worker processes and prefetch them" if single else
            "Prefetch more batches and add DataLoader workers",
            "DataLoader(dataset, batch_size=..., num_workers=8,  # ≈ CPU cores per GPU\n"
            "           pin_memory=True, prefetch_factor=2, persistent_workers=True)",
            s, f"removing the {b.data_wait_pct:.1f} % data wait: {basis}")
    if f := by_id.get("data/copies"):
        s, basis = _remove(b, f.stake_pct / 100, busy_time=True)
        add("overlap-copies", f.id, "Overlap host-to-device copies with compute (pinned memory, non_blocking)",
            "DataLoader(..., pin_memory=True)\nx = x.to(device, non_blocking=True)", s,
            f"hiding the {f.stake_pct:.1f} % copy-only time: {basis}")
    if f := by_id.get("data/pageable-copies"):
        s, basis = _remove(b, f.stake_pct / 100, busy_time=True)
        add("pin-memory", f.id, "Copy from pinned memory, asynchronously",
            "DataLoader(..., pin_memory=True)             # batches land in page-locked memory\n"
            "x = x.to(device, non_blocking=True)          # copy overlaps compute\n"
            "# tensors built on the host each step: t.pin_memory() once, reuse the buffer",
            s, f"if the {f.stake_pct:.1f} % pageable-copy time were hidden behind compute: {basis}")
    if f := by_id.get("host/blocking-sync"):
        s, basis = _remove(b, f.stake_pct / 100)
        add("remove-blocking-syncs", f.id, "Take synchronizations out of the step",
            "running_loss += loss.detach()              # not loss.item() every step\n"
            "if step % 100 == 0: print(running_loss.item() / 100)  # sync rarely\n"
            "# drop torch.cuda.synchronize() and .cpu() from the training loop",
            s, f"removing the {f.stake_pct:.1f} % GPU idle after syncs: {basis}")
    if f := by_id.get("machine/unfused-attention"):
        s, basis = _remove(b, f.stake_pct / 100, busy_time=True)
        add("fused-attention", f.id, "Use fused attention (SDPA / FlashAttention)",
            "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
            "# replaces scores = q @ k.transpose(-2, -1) / sqrt(d); mask; softmax; @ v",
            s, f"if the {f.stake_pct:.1f} % memory-bound attention time vanished (fused kernels still do the "
               f"matmuls, so real gains are smaller): {basis}")
    if f := by_id.get("host/launch-overhead"):
        s, basis = _remove(b, f.stake_pct / 100)
        add("reduce-launch-overhead", f.id, "Launch fewer, larger kernels (CUDA graphs / torch.compile, bigger batches)",
            'model = torch.compile(model, mode="reduce-overhead")  # captures CUDA graphs\n'
            "optimizer = torch.optim.AdamW(params, fused=True)     # one kernel per step, not per tensor",
            s, f"removing the {f.stake_pct:.1f} % GPU idle during host work: {basis}")
    if f := by_id.get("host/sync"):
        s, basis = _remove(b, f.stake_pct / 100)
        add("remove-syncs", f.id, "Remove host-device synchronizations from the step",
            "# keep metrics on the GPU; read them every N steps, not every step\n"
            "running_loss += loss.detach()        # not loss.item()\n"
            "x = x.to(device, non_blocking=True)  # not a blocking copy",
            s, f"removing the {f.stake_pct:.1f} % GPU idle during syncs: {basis}")
    if f := by_id.get("comm/unoverlapped"):
        s, basis = _remove(b, f.stake_pct / 100, busy_time=True)
        add("overlap-communication", f.id, "Overlap gradient communication with the backward pass",
            "model = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)\n"
            "# with gradient accumulation: `with model.no_sync():` on all but the last micro-step",
            s, f"hiding the {f.stake_pct:.1f} % unoverlapped communication: {basis}")
    if f := by_id.get("algorithm/no-tensor-cores"):
        g = f.stake_pct / 100
        bf16 = spec is not None and spec.has_tensor_cores("bf16")  # no bf16 tensor cores on V100, T4, Turing
        dtype = "torch.bfloat16" if bf16 else "torch.float16"
        change = (f'with torch.autocast(device_type="cuda", dtype={dtype}):\n    loss = model(x).loss'
                  + ("" if bf16 else "\nscaler = torch.amp.GradScaler()  # fp16 needs loss scaling"))
        if spec is not None:
            ratio = spec.tensor_tflops / spec.fp32_tflops
            s = 1.0 / ((1 - g) + g / ratio)
            basis = (f"1 / ((1 − g) + g / s) with g = {g:.3f} (non-tensor-core GEMM/conv share of step time) and "
                     f"s = {spec.tensor_tflops:g} / {spec.fp32_tflops:g} TFLOP/s = {ratio:.1f} ({spec.key} peaks)")
        else:
            s, basis = None, f"no projection: {device_name or 'the device'} is not in the device table"
        add("mixed-precision", f.id, "Use mixed precision so GEMMs and convolutions run on tensor cores", change, s, basis)
    if f := by_id.get("machine/bandwidth"):
        s, basis = _remove(b, f.stake_pct / 100, busy_time=True)
        add("fuse-memory-bound", f.id, "Fuse memory-bound kernels (torch.compile; fused optimizers and attention)",
            "model = torch.compile(model)\n"
            "F.scaled_dot_product_attention(q, k, v)  # fused attention instead of softmax(QK^T)V",
            s, f"if the {f.stake_pct:.1f} % memory-bound kernel time vanished entirely (fusion shrinks it, "
               f"so real gains are smaller): {basis}")
    if f := by_id.get("algorithm/compute-bound"):
        if "algorithm/no-tensor-cores" not in by_id:
            add("compute-efficiency", f.id, "Already on tensor cores: raise arithmetic efficiency",
                "model = torch.compile(model, mode=\"max-autotune\")\n# larger batch per GPU if memory allows; FlashAttention via SDPA",
                None, "no projection: compute-bound on tensor cores; gains depend on kernel efficiency (see MFU)")
    if f := by_id.get("machine/capacity"):
        add("reduce-memory", f.id, "Cut activation memory (checkpointing, mixed precision)",
            "from torch.utils.checkpoint import checkpoint\nout = checkpoint(block, x, use_reentrant=False)",
            None, "no speed projection: frees memory for larger batches (recomputation costs ~⅓ more forward time)")
    recs.sort(key=lambda r: -(r.projected_speedup or 0.0))
    return recs
