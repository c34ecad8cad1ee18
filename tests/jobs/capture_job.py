"""A small CPU training job for the capture and output tests of `trainscope watch` (knows nothing
about trainscope).

    python capture_job.py --steps 60 --compute-ms 30 --lines 200 --exit 3 [--own-profiler] [--no-torch]

It runs ``--steps`` iterations of a real model over a DataLoader (each iteration burns about
``--compute-ms`` of matmuls), prints ``--lines`` numbered lines spread over the run (``line 1/200``
…), then exits with ``--exit``. ``--own-profiler`` runs the whole loop inside its own
``torch.profiler.profile`` (a capture must then be refused politely); ``--no-torch`` never imports
torch (a plain Python loop); ``--leak-mb`` keeps that many MiB alive per iteration (a leak).
"""

import argparse
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--compute-ms", type=float, default=30.0)
    p.add_argument("--lines", type=int, default=0)
    p.add_argument("--exit", type=int, default=0)
    p.add_argument("--own-profiler", action="store_true")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--leak-mb", type=float, default=0.0, help="MiB kept alive per iteration (a leak)")
    a = p.parse_args()
    printed = 0

    def say(i: int) -> None:
        nonlocal printed
        due = a.lines * (i + 1) // a.steps
        while printed < due:
            printed += 1
            print(f"line {printed}/{a.lines}", flush=True)

    if a.no_torch:
        for i in range(a.steps):
            t0 = time.monotonic()
            while time.monotonic() - t0 < a.compute_ms / 1000:
                sum(range(1000))
            say(i)
        return a.exit

    import contextlib

    import torch
    from torch.utils.data import DataLoader
    from torch.utils.data import TensorDataset

    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(a.steps * 4, 64), torch.randint(0, 10, (a.steps * 4,)))
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    w = torch.randn(128, 128)
    own = (
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        if a.own_profiler
        else contextlib.nullcontext()
    )
    kept = []
    with own:
        for i, (x, y) in enumerate(DataLoader(data, batch_size=4)):
            if a.leak_mb:
                kept.append(bytearray(int(a.leak_mb * 2**20)))  # zero-filled: resident at once
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            t0, z = time.monotonic(), w
            while time.monotonic() - t0 < a.compute_ms / 1000:
                z = torch.tanh(z @ w)
            say(i)
    sys.stdout.flush()
    return a.exit


if __name__ == "__main__":
    sys.exit(main())
