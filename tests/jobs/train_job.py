"""A small, unmodified-looking CPU training job for the `trainscope watch` tests and benchmark.

It knows nothing about trainscope. Knobs (command line): --load-ms (sleep per sample in the
Dataset, i.e. a slow input pipeline), --compute-ms (target busy time per step, burned by real
matmuls), --workers (DataLoader num_workers), --seconds (run length), --batch.
With load L per sample, batch B, W workers and compute C per step, the engineered data-wait share
is max(0, B·L/W − C) / max(B·L/W, C) for W > 0, and B·L / (B·L + C) for W = 0.
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


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
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        SlowDataset(10**6, a.load_ms), batch_size=a.batch, num_workers=a.workers, persistent_workers=a.workers > 0
    )
    w = torch.randn(256, 256)
    end = time.monotonic() + a.seconds
    steps = 0
    data_s = total_s = 0.0  # the job's own data-time log, like timm's "data_time"
    it = iter(loader)
    t_prev = time.monotonic()
    while True:
        x, y = next(it)
        t0 = time.monotonic()
        if steps:  # the first batch includes start-up (workers spawning); timm skips it too
            data_s += t0 - t_prev
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        # Burn compute time with real matrix products until the step's budget is spent.
        z = w
        if a.matmuls:  # fixed work per step (the benchmark: throughput shows any CPU taken from the job)
            for _ in range(a.matmuls):
                z = torch.tanh(z @ w)
        while time.monotonic() - t0 < a.compute_ms / 1000:
            z = torch.tanh(z @ w)
        steps += 1
        t_next = time.monotonic()
        if steps > 1:
            total_s += t_next - t_prev
        t_prev = t_next
        if t_next >= end:
            break
    print(f"job: steps={steps} data_wait_pct={100 * data_s / total_s if total_s else 0:.2f}", flush=True)


if __name__ == "__main__":
    main()
