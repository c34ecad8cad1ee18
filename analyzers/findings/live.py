"""Findings only the live rules raise (``trainscope watch``, counter-only recordings): utilization
patterns from sampled counters. Their rules live in :mod:`trainscope.analyzers.live`; the other
live findings (input wait, loader CPU, I/O wait, capacity, compute-/memory-bound, throttling) are
declared with their families."""

from __future__ import annotations

from trainscope.analyzers.context import Context

from trainscope.analyzers.findings.base import DiffMeasure, FindingSpec, Fix, FixText, fixed, stake_pct

# --- wording: the fix in the run's words (its Context) ----------------------------------------


def _record_words(c: Context, single: bool, bf16: bool) -> FixText:
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


_RECORD = Fix(
    "record-trace",
    "Record a trace to see what idles the GPU",
    "with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=2, active=5),\n"
    "        on_trace_ready=torch.profiler.tensorboard_trace_handler('./trace')) as p:\n"
    "    for batch in loader: step(batch); p.step()\n"
    "# then: trainscope analyze ./trace",
    "nsys profile -t cuda,nvtx,osrt -o run ./app && nsys export --type sqlite run.nsys-rep\n"
    "# then: trainscope analyze run.sqlite",
    projection="none",
    basis="no projection: counters cannot tell launch overhead, syncs and communication apart",
    text=_record_words,
)

UNDERUTILIZED = FindingSpec(
    id="gpu/underutilized",
    axis="insufficient_evidence",
    title="GPU underutilized",
    measure=None,
    can_be_primary=False,
    severity=fixed("info"),
    fix=_RECORD,
    whatif_pool=None,
    diff_measure=DiffMeasure("GPU idle, share of samples", "%", stake_pct("gpu/underutilized")),
    critical_path="none",
    headline="UNDERUTILIZED",
    label_class=None,
    describes="p95 GPU utilization below the live threshold",
    live=True,
    offline=False,
)

FLUCTUATING = FindingSpec(
    id="gpu/fluctuating",
    axis="insufficient_evidence",
    title="GPU utilization fluctuates",
    measure=None,
    can_be_primary=False,
    severity=fixed("info"),
    fix=_RECORD,
    whatif_pool=None,
    diff_measure=DiffMeasure("GPU idle, share of samples", "%", stake_pct("gpu/fluctuating")),
    critical_path="none",
    headline="FLUCTUATING",
    label_class=None,
    describes="busy bursts alternating with idle gaps (p95 high, p5 low)",
    live=True,
    offline=False,
)

MEMORY_CREEP = FindingSpec(
    id="machine/memory-creep",
    axis="machine",
    title="Memory grows steadily over the run",
    measure=None,
    can_be_primary=False,
    severity=fixed("moderate"),
    fix=Fix(
        "find-the-leak",
        "Find what keeps memory alive from one iteration to the next",
        "running_total += value.item()   # keep numbers, not tensors: a kept tensor holds its iteration's graph\n"
        "# GPU: torch.cuda.memory._record_memory_history(max_entries=100_000) ... then\n"
        "#      torch.cuda.memory._dump_snapshot('mem.pickle') and `trainscope memory mem.pickle`\n"
        "# host: tracemalloc.start(); compare tracemalloc.take_snapshot() between two iterations",
        "// a growing pool or cache: cap it, or free per iteration; check with the allocator's statistics\n"
        "// (cudaMemGetInfo over time) and a heap profiler on the host (heaptrack, valgrind massif)",
        projection="none",
        basis="no speed projection: the job runs out of memory at the projected time",
    ),
    whatif_pool=None,
    diff_measure=DiffMeasure("memory growth, share of capacity per window", "%", stake_pct("machine/memory-creep")),
    critical_path="none",
    headline="MEMORY CREEP",
    label_class=None,
    describes="host RSS of a process or a GPU's memory rising steadily (a slope over the window, with the time "
    "left until capacity)",
    live=True,
    offline=False,
)

SPECS = (UNDERUTILIZED, FLUCTUATING, MEMORY_CREEP)
