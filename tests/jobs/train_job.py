"""A small, unmodified-looking CPU training job for the `trainscope watch` tests and benchmark.

It knows nothing about trainscope. Knobs (command line): --load-ms (sleep per sample in the
Dataset, i.e. a slow input pipeline), --compute-ms (target busy time per step, burned by real
matmuls outside the model: "other" in watch's split), --workers (DataLoader num_workers),
--seconds (run length), --batch.
With load L per sample, batch B, W workers and compute C per step, the engineered data-wait share
is max(0, B·L/W − C) / max(B·L/W, C) for W > 0, and B·L / (B·L + C) for W = 0.

Where in the step (watch's split): --fwd-ms burns matmuls inside the model's forward (a module),
--bwd-ms inside its backward (a custom autograd Function), --opt-ms inside the optimizer's step
(an SGD subclass). The job times each part itself around its own calls (next(it), model(x),
loss.backward(), opt.step()) and prints the totals over the steps after the first:
``job: fwd_ms=… bwd_ms=… opt_ms=… data_ms=… step_ms=… steps=…`` (with ``rank=R`` under torchrun).

--ddp runs it as one rank of a data-parallel job (gloo, under torchrun, for --steps iterations,
so every rank runs as many); --slow-rank R with --slow-fwd-ms X makes rank R's forward X ms longer.
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader
from torch.utils.data import Dataset

W = torch.randn(256, 256)


def burn(ms: float) -> None:
    """Busy for ``ms`` of wall time with real matrix products (a time budget: it holds on a loaded machine)."""
    if ms <= 0:
        return
    t0, z = time.monotonic(), W
    while time.monotonic() - t0 < ms / 1000:
        z = torch.tanh(z @ W)


class SlowBackward(torch.autograd.Function):
    """Identity forward; its backward burns ``ms`` (autograd calls it inside loss.backward())."""

    @staticmethod
    def forward(ctx, x, ms):
        ctx.ms = ms
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        burn(ctx.ms)
        return g, None


class Burn(torch.nn.Module):
    """A layer that costs ``fwd_ms`` in the forward and ``bwd_ms`` in the backward."""

    def __init__(self, fwd_ms: float, bwd_ms: float) -> None:
        super().__init__()
        self.fwd_ms, self.bwd_ms = fwd_ms, bwd_ms

    def forward(self, x):
        burn(self.fwd_ms)
        return SlowBackward.apply(x, self.bwd_ms) if self.bwd_ms > 0 else x


class SlowSGD(torch.optim.SGD):
    def __init__(self, params, lr: float, opt_ms: float) -> None:
        super().__init__(params, lr=lr)
        self.opt_ms = opt_ms

    def step(self, closure=None):
        out = super().step(closure)
        burn(self.opt_ms)
        return out


class SlowDataset(Dataset):
    def __init__(self, n: int, load_ms: float) -> None:
        self.n, self.load_s = n, load_ms / 1000

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.load_s:
            time.sleep(self.load_s)  # stands for decoding/augmentation/remote reads
        return torch.full((64,), float(i % 7)), i % 10


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--load-ms", type=float, default=0.0)
    p.add_argument("--compute-ms", type=float, default=5.0)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--matmuls", type=int, default=0, help="fixed number of 256×256 matmuls per step")
    p.add_argument("--fwd-ms", type=float, default=0.0, help="burned inside the model's forward")
    p.add_argument("--bwd-ms", type=float, default=0.0, help="burned inside the model's backward")
    p.add_argument("--opt-ms", type=float, default=0.0, help="burned inside the optimizer's step")
    p.add_argument("--ddp", action="store_true", help="one rank of a data-parallel job (under torchrun, gloo)")
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (else after --seconds)")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-fwd-ms", type=float, default=0.0, help="extra forward time of --slow-rank")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    rank = -1
    if a.ddp:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
    fwd_ms = a.fwd_ms + (a.slow_fwd_ms if rank == a.slow_rank else 0.0)
    model: torch.nn.Module = torch.nn.Sequential(
        torch.nn.Linear(64, 256), Burn(fwd_ms, a.bwd_ms), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    if a.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
    opt = SlowSGD(model.parameters(), lr=0.01, opt_ms=a.opt_ms)
    loader = DataLoader(
        SlowDataset(10**6, a.load_ms), batch_size=a.batch, num_workers=a.workers, persistent_workers=a.workers > 0
    )
    w = W
    end = time.monotonic() + a.seconds
    steps = 0
    data_s = total_s = 0.0  # the job's own data-time log, like timm's "data_time"
    part = {"data": 0.0, "fwd": 0.0, "bwd": 0.0, "opt": 0.0}  # the job's own per-part timers (after step 1)
    clock = time.monotonic
    it = iter(loader)
    t_prev = clock()
    while True:
        x, y = next(it)
        t0 = clock()
        out = model(x)
        t1 = clock()
        loss = torch.nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        t2 = clock()
        loss.backward()
        t3 = clock()
        opt.step()
        t4 = clock()
        if steps:  # the first batch includes start-up (workers spawning); timm skips it too
            data_s += t0 - t_prev
            part["data"] += t0 - t_prev
            part["fwd"] += t1 - t0
            part["bwd"] += t3 - t2
            part["opt"] += t4 - t3
        # Burn compute time with real matrix products until the step's budget is spent.
        z = w
        if a.matmuls:  # fixed work per step (the benchmark: throughput shows any CPU taken from the job)
            for _ in range(a.matmuls):
                z = torch.tanh(z @ w)
        while clock() - t0 < a.compute_ms / 1000:
            z = torch.tanh(z @ w)
        steps += 1
        t_next = clock()
        if steps > 1:
            total_s += t_next - t_prev
        t_prev = t_next
        if (a.steps and steps >= a.steps) or (not a.steps and t_next >= end):
            break
    who = f"rank={rank} " if rank >= 0 else ""
    print(f"job: steps={steps} data_wait_pct={100 * data_s / total_s if total_s else 0:.2f}", flush=True)
    print(
        f"job: {who}fwd_ms={part['fwd'] * 1e3:.1f} bwd_ms={part['bwd'] * 1e3:.1f} opt_ms={part['opt'] * 1e3:.1f} "
        f"data_ms={part['data'] * 1e3:.1f} step_ms={total_s * 1e3:.1f} steps={steps - 1}",
        flush=True,
    )
    if a.ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
