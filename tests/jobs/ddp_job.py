"""A two-rank data-parallel CPU training job for `watch -- torchrun …` (gloo backend), knowing
nothing about trainscope. Rank ``--slow-rank`` loads each sample ``--load-ms`` slower (a slow input
shard); the other ranks then wait for it inside the gradient all_reduce.

    torchrun --standalone --nproc-per-node 2 ddp_job.py --seconds 6 --slow-rank 1 --load-ms 5
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from train_job import SlowDataset  # the sibling job's slow input (this folder is on sys.path)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--load-ms", type=float, default=5.0)
    p.add_argument("--leak-mb", type=float, default=0.0, help="MB kept per iteration on every rank (a leak)")
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    load_ms = a.load_ms if rank == a.slow_rank else 0.0
    kept = []
    steps = 0
    # Every rank runs the same number of iterations: rank 0 decides when to stop, all ranks learn it.
    stop = torch.zeros(1)
    end = time.monotonic() + a.seconds
    for x, y in DataLoader(SlowDataset(10**6, load_ms), batch_size=8):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if a.leak_mb:
            kept.append(bytearray(int(a.leak_mb * 2**20)))
        steps += 1
        stop[0] = 1.0 if rank == 0 and time.monotonic() > end else 0.0
        dist.all_reduce(stop)
        if stop[0] > 0:
            break
    print(f"rank {rank}: steps={steps}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
