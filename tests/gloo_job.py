"""Record a real two-rank data-parallel training job on the CPU (torch.distributed, backend gloo)
under torch.profiler: one Kineto trace per rank, ``rank<R>.pt.trace.json.gz`` in OUTDIR.

Rank ``--slow-rank`` sleeps ``--delay-ms`` in each step's forward pass (a straggler: a slow input
shard, a noisy neighbour), so the other rank waits for it in the gradient all_reduce.

    python -m tests.gloo_job OUTDIR [--steps 6] [--slow-rank 1] [--delay-ms 30]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import socket
import sys
import tempfile
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, outdir: str, steps: int, slow_rank: int, delay_ms: float) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    tmp = tempfile.mkdtemp()
    sched = torch.profiler.schedule(wait=0, warmup=1, active=steps)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(tmp, "t.json")),
    ) as prof:
        for _ in range(steps + 1):
            if rank == slow_rank:
                time.sleep(delay_ms / 1000)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    with (
        open(os.path.join(tmp, "t.json"), "rb") as f,
        gzip.open(os.path.join(outdir, f"rank{rank}.pt.trace.json.gz"), "wb") as g,
    ):
        shutil.copyfileobj(f, g)
    shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()
    dist.destroy_process_group()


def record(outdir: str, steps: int = 6, slow_rank: int = 1, delay_ms: float = 30.0, world: int = 2) -> None:
    import torch.multiprocessing as mp

    os.makedirs(outdir, exist_ok=True)
    mp.spawn(_worker, args=(world, _free_port(), outdir, steps, slow_rank, delay_ms), nprocs=world, join=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("outdir")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--delay-ms", type=float, default=30.0)
    a = p.parse_args(argv)
    record(a.outdir, a.steps, a.slow_rank, a.delay_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
