"""A tiny real CPU training job, profiled with torch.profiler: the before/after pair for `trainscope diff`.

    python tests/dataloader_job.py OUT_DIR slow fast fast@16   # writes OUT_DIR/<spec>.pt.trace.json

``slow``: the Dataset's ``__getitem__`` sleeps 4 ms (a slow decode) and the DataLoader runs in the
training process (num_workers=0), so every step waits ≈ 8 × 4 ms for its batch. ``fast``: the
same model, data and loop with the samples already in memory. Four active ProfilerSteps after
one wait and one warmup step; shapes are recorded so the diff can compare batch shapes.
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils.data import DataLoader
from torch.utils.data import Dataset

SLEEP_S = 0.004


class Samples(Dataset):
    def __init__(self, slow: bool, n: int = 96) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 512, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.slow = slow

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if self.slow:
            time.sleep(SLEEP_S)
        return self.x[i], self.y[i]


def main(out: str, mode: str, batch: int = 8) -> None:
    # One intra-op thread: on a shared, busy machine a second OpenMP thread waits for a time slice
    # in every parallel region (≈ 8 ms per tiny op here), drowning the effect under test.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # Enough compute (≈ 50 MFLOP per step) that a fast loader's own overhead is a small share of the step.
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=4, repeat=1)
    loader = DataLoader(Samples(slow=mode == "slow"), batch_size=batch, num_workers=0)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched, record_shapes=True
    ) as prof:
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
            if step >= 6:
                break
    prof.export_chrome_trace(out)


if __name__ == "__main__":
    import os

    os.makedirs(sys.argv[1], exist_ok=True)  # `python tests/dataloader_job.py OUTDIR …` as the README runs it
    for spec in sys.argv[2:]:  # one process for all runs: torch imports once
        mode, _, batch = spec.partition("@")
        main(f"{sys.argv[1]}/{spec}.pt.trace.json", mode, int(batch or 8))
