"""Real GPU workloads recorded with the PyTorch profiler (Kineto) for trainscope's labeled traces.

Each workload is a small, self-contained program of a kind the diagnosis must read from the GPU
timeline (issue: GPU gaps explained without host frames): host-launch-bound tiny kernels, a GEMV
loop that copies its result to pageable host memory and writes it to a file every iteration, a
copy-dominated window of pageable host-to-device copies, a cold start with JIT compilation, CUDA
graph replays, an embedding-heavy recommender step, a DataLoader-bound CNN, and a transformer
training step recorded with shapes for the cost model.

    python workloads.py OUT_DIR [NAME ...]     # every workload when no NAME is given

Run on a CUDA machine; each writes OUT_DIR/NAME.pt.trace.json.gz and a line of facts to
OUT_DIR/facts.jsonl (measured with CUDA events and wall clocks while recording).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import time

import torch
from torch.profiler import ProfilerActivity
from torch.profiler import profile
from torch.profiler import record_function
from torch.profiler import schedule

DEV = "cuda"


def _save(prof, out: str, name: str) -> str:
    """Gzip the trace the profiler wrote at the end of its cycle (``on_trace_ready``), or export it
    now (a profile without a schedule)."""
    raw = os.path.join(out, f"{name}.pt.trace.json")
    if not os.path.exists(raw):
        prof.export_chrome_trace(raw)
    path = raw + ".gz"
    with open(raw, "rb") as f, gzip.open(path, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.unlink(raw)
    return path


def _cuda_ms(fn, n: int, warm: int = 3) -> float:
    """``fn``'s mean GPU time per call over ``n`` calls after ``warm`` warm-up calls (CUDA events)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n):
        fn()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / n


def _facts(out: str, name: str, **facts) -> None:
    facts["name"] = name
    facts["torch"] = torch.__version__
    facts["device"] = torch.cuda.get_device_name(0)
    with open(os.path.join(out, "facts.jsonl"), "a") as f:
        f.write(json.dumps(facts) + "\n")
    print(name, json.dumps(facts), flush=True)


def _profiler(steps: int, out: str, name: str, **kw):
    """One cycle: a warm-up step, then ``steps`` recorded steps, written when the cycle ends."""
    raw = os.path.join(out, f"{name}.pt.trace.json")
    return profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(raw),
        **kw,
    )


class Block(torch.nn.Module):
    """A pre-norm transformer block with causal SDPA attention."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


def transformer(d=1024, heads=16, layers=4, vocab=32000):
    emb = torch.nn.Embedding(vocab, d)
    blocks = [Block(d, heads) for _ in range(layers)]
    return torch.nn.Sequential(emb, *blocks, torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab)).to(DEV)


def w_transformer_bf16_train(out: str) -> None:
    """A bf16-autocast transformer LM training step (AdamW), shapes and FLOPs recorded: the cost
    model's reference (GEMMs, flash attention, layer norms, elementwise, the optimizer)."""
    torch.manual_seed(0)
    model = transformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 32000, (8, 1024), device=DEV)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]).float(), x.view(-1))
        loss.backward()
        opt.step()

    step_ms = _cuda_ms(step, 5)
    with _profiler(3, out, "h100_transformer_bf16_train", record_shapes=True, with_flops=True) as prof:
        for _ in range(4):
            step()
            prof.step()
    _save(prof, out, "h100_transformer_bf16_train")
    _facts(
        out,
        "h100_transformer_bf16_train",
        step_ms_cuda_events=round(step_ms, 3),
        params=sum(p.numel() for p in model.parameters()),
        tokens_per_step=8 * 1024,
    )


def w_tiny_kernels_launch(out: str) -> None:
    """Host-launch-bound: an MLP of width 64 on a batch of 32, 12 layers, SGD — thousands of kernels
    of a few µs each; the host cannot issue them as fast as the GPU runs them."""
    torch.manual_seed(0)
    layers = []
    for _ in range(12):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
    x = torch.randn(32, 64, device=DEV)

    def step():
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / 20
    with _profiler(5, out, "h100_tiny_mlp_launch_bound") as prof:
        for _ in range(6):
            step()
            prof.step()
    _save(prof, out, "h100_tiny_mlp_launch_bound")
    _facts(out, "h100_tiny_mlp_launch_bound", step_ms_wall=round(wall * 1e3, 3))


def w_gemv_sync_io(out: str) -> None:
    """fp64 GEMV y = A·x in a loop; every iteration copies y to pageable host memory (a blocking
    device-to-host copy) and writes it to a file inside a named range ("IO n")."""
    torch.manual_seed(0)
    n = 16384
    a = torch.randn(n, n, device=DEV, dtype=torch.float64)  # 2 GiB: GEMV streams it once per call
    x = torch.randn(n, device=DEV, dtype=torch.float64)
    path = os.path.join(out, "gemv_out.bin")
    gemv_ms = _cuda_ms(lambda: a @ x, 10)
    with _profiler(4, out, "h100_fp64_gemv_sync_copy_io") as prof, open(path, "wb") as f:
        for i in range(5):
            for _ in range(40):
                y = a @ x
                x = y / y.norm()
            host = y.cpu()  # pageable: blocks the host until the GPU is done
            with record_function(f"IO {i}"):
                for _ in range(2):
                    f.write(host.numpy().tobytes())
                    f.flush()
                    os.fsync(f.fileno())
            prof.step()
    os.unlink(path)
    _save(prof, out, "h100_fp64_gemv_sync_copy_io")
    _facts(
        out,
        "h100_fp64_gemv_sync_copy_io",
        gemv_ms_cuda_events=round(gemv_ms, 4),
        gemv_gbps=round(n * n * 8 / (gemv_ms / 1e3) / 1e9, 1),
        matrix_bytes=n * n * 8,
    )


def w_pageable_h2d(out: str) -> None:
    """Copy-dominated: each step copies 512 MiB from pageable host memory to the GPU and runs two
    small kernels on it."""
    host = torch.randn(128 << 20)  # 512 MiB fp32, pageable
    for _ in range(2):
        d = host.to(DEV)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    d = host.to(DEV)
    e1.record()
    torch.cuda.synchronize()
    copy_ms = e0.elapsed_time(e1)
    with _profiler(4, out, "h100_pageable_h2d_copies") as prof:
        for _ in range(5):
            d = host.to(DEV)
            s = d.sum()
            d.mul_(0.5)
            prof.step()
    torch.cuda.synchronize()
    del s
    _save(prof, out, "h100_pageable_h2d_copies")
    _facts(
        out,
        "h100_pageable_h2d_copies",
        copy_bytes=host.numel() * 4,
        copy_ms_cuda_events=round(copy_ms, 3),
        copy_gbps=round(host.numel() * 4 / (copy_ms / 1e3) / 1e9, 2),
    )


def w_cold_start_compile(out: str) -> None:
    """Cold start: the first calls of a torch.compile'd function (Triton JIT) and cuBLAS
    initialisation, profiled from the first call — the GPU waits while the host compiles."""
    torch._dynamo.reset()

    def f(x, w):
        return torch.nn.functional.gelu(x @ w).softmax(-1) * 2 + 1

    g = torch.compile(f)
    x = torch.randn(2048, 2048, device=DEV)
    w = torch.randn(2048, 2048, device=DEV)
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, record_function("ProfilerStep#0"):
        for _ in range(3):
            y = g(x, w)
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    del y
    _save(prof, out, "h100_cold_start_torch_compile")
    _facts(out, "h100_cold_start_torch_compile", wall_s=round(wall, 3))


def w_cuda_graph_replay(out: str) -> None:
    """CUDA graph replays (torch.cuda.CUDAGraph) of a small bf16 MLP inference step: one launch per
    step replays every kernel; the GPU runs back to back inside each replay."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(16)]).to(DEV).to(torch.bfloat16).eval()
    static = torch.randn(64, 2048, device=DEV, dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        y = model(static)
    replay_ms = _cuda_ms(graph.replay, 20)
    with _profiler(4, out, "h100_cuda_graph_replay_mlp_bf16") as prof:
        for _ in range(5):
            static.copy_(torch.randn_like(static))
            for _ in range(10):
                graph.replay()
            prof.step()
    torch.cuda.synchronize()
    del y
    _save(prof, out, "h100_cuda_graph_replay_mlp_bf16")
    _facts(out, "h100_cuda_graph_replay_mlp_bf16", replay_ms_cuda_events=round(replay_ms, 4), kernels_per_replay=16)


def w_embedding_bag(out: str) -> None:
    """An embedding-heavy recommender training step: 8 EmbeddingBag tables of 2 M rows × 128 (fp32,
    sum pooling, 40 lookups per bag, batch 4096) feeding a small MLP, SGD with sparse gradients."""
    torch.manual_seed(0)
    tables = torch.nn.ModuleList([torch.nn.EmbeddingBag(2_000_000, 128, mode="sum", sparse=True) for _ in range(8)]).to(
        DEV
    )
    mlp = torch.nn.Sequential(torch.nn.Linear(8 * 128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1)).to(DEV)
    opt = torch.optim.SGD(list(tables.parameters()) + list(mlp.parameters()), lr=0.01)
    batch, bag = 4096, 40
    idx = [torch.randint(0, 2_000_000, (batch * bag,), device=DEV) for _ in tables]
    offsets = torch.arange(0, batch * bag, bag, device=DEV)
    target = torch.rand(batch, 1, device=DEV)

    def step():
        opt.zero_grad()
        feats = torch.cat([t(i, offsets) for t, i in zip(tables, idx)], dim=1)
        torch.nn.functional.mse_loss(mlp(feats), target).backward()
        opt.step()

    step_ms = _cuda_ms(step, 5)
    with _profiler(3, out, "h100_embedding_bag_recsys_train", record_shapes=True) as prof:
        for _ in range(4):
            step()
            prof.step()
    _save(prof, out, "h100_embedding_bag_recsys_train")
    _facts(out, "h100_embedding_bag_recsys_train", step_ms_cuda_events=round(step_ms, 3))


class SlowImages(torch.utils.data.Dataset):
    """Decoding stand-in: each item costs ~4 ms of Python/numpy work on the host."""

    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        import numpy as np

        rng = np.random.default_rng(i)
        img = rng.random((3, 224, 224), dtype=np.float32)
        for _ in range(3):
            img = np.sqrt(img * img + 1e-3)
        return torch.from_numpy(img), i % 1000


def w_dataloader_bound(out: str) -> None:
    """Input-bound: a ResNet-ish CNN in bf16 autocast fed by a DataLoader with num_workers=0 whose
    items cost host time; the GPU waits for every batch."""
    torch.manual_seed(0)
    import torch.nn as nn

    model = nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
        nn.Conv2d(64, 128, 3, 2, 1),
        nn.BatchNorm2d(128),
        nn.ReLU(),
        nn.Conv2d(128, 256, 3, 2, 1),
        nn.BatchNorm2d(256),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(256, 1000),
    ).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = torch.utils.data.DataLoader(SlowImages(), batch_size=32, num_workers=0)
    it = iter(loader)
    with _profiler(4, out, "h100_dataloader_bound_cnn") as prof:
        for _ in range(5):
            xb, yb = next(it)
            xb, yb = xb.to(DEV), yb.to(DEV)
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            prof.step()
    _save(prof, out, "h100_dataloader_bound_cnn")
    _facts(out, "h100_dataloader_bound_cnn", batch=32, num_workers=0)


WORKLOADS = {name[2:]: fn for name, fn in globals().items() if name.startswith("w_")}


def main() -> int:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    names = sys.argv[2:] or list(WORKLOADS)
    failed = 0
    for name in names:
        t0 = time.perf_counter()
        try:
            WORKLOADS[name](out)
        except Exception as e:  # one workload failing must not lose the others
            failed += 1
            print(f"{name}: FAILED {type(e).__name__}: {e}", flush=True)
        print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)
        torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
