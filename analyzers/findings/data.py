"""Data axis: the step waits on input (loader waits, host preprocessing) or on host-device copies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainscope.analyzers.findings.base import DiffMeasure
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import FindingSpec
from trainscope.analyzers.findings.base import FixText
from trainscope.analyzers.findings.base import LiveMeasure
from trainscope.analyzers.findings.base import by_stake
from trainscope.analyzers.findings.base import ms_per_step
from trainscope.analyzers.findings.base import stake_ms
from trainscope.analyzers.findings.base import stake_pct
from trainscope.analyzers.findings.base import verdict_class
from trainscope.analyzers.findings.catalog import catalog_fix
from trainscope.analyzers.findings.catalog import catalog_words
from trainscope.analyzers.findings.common import ctx
from trainscope.analyzers.findings.common import ev
from trainscope.analyzers.findings.common import live_ev
from trainscope.analyzers.findings.common import raised
from trainscope.analyzers.findings.common import raised_stake
from trainscope.analyzers.findings.common import sink_line
from trainscope.analyzers.findings.observations import DiagnosisInput
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.context import Context

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.live.window_stats import WindowStats
    from trainscope.traces.samples import Snapshot

_INPUT_SEV = by_stake("data_wait.moderate", "data_wait.high")


def _input_wait(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    if not obs.has_gpu:
        return _cpu_input_wait(obs, rules)
    if obs.sinks is None or not raised(obs, rules, "input", _INPUT_SEV):
        return None
    b = obs.breakdown
    stake = obs.sinks.pct("input")
    idle_data = b.share_pct("idle_data_wait")
    sev = _INPUT_SEV.grade(stake, rules)
    lines = []
    if b.data_wait_pct > 0:
        lines.append(
            ev(
                rules,
                "data_wait.high" if sev == "high" else "data_wait.moderate",
                "host waiting on DataLoader __next__",
                b.data_wait_pct,
            )
        )
        lines.append(ev(rules, "data_wait.moderate", "GPU idle while waiting for data", idle_data))
    pre = stake - idle_data
    if pre >= 0.05:  # below what the report shows (0.0 %): the input sink is the DataLoader wait alone
        lines.append(ev(rules, "data_wait.moderate", "GPU idle while the host preprocesses input", pre))
        lines.extend(obs.host_evidence.get("input", ())[1:])  # the frames and calls behind it
    lines.append(ev(rules, "gpu_busy.saturated", "GPU busy", b.gpu_busy_pct, "<"))
    lines.append(sink_line(obs, "input"))
    detail = "the input pipeline cannot keep the GPU fed"
    if pre > idle_data:
        detail = "the host prepares each batch (decoding, preprocessing) in the process while the GPU idles"
    if obs.single_process_loader:
        lines.append(
            ctx("DataLoader runs in the main process (num_workers=0)", None, "", "trace: _SingleProcessDataLoaderIter")
        )
        detail += "; batches are loaded in the main process itself (num_workers=0)"
    return INPUT_WAIT.finding(
        stake,
        lines,
        INPUT_WAIT.detail_for(obs.context, detail),
        rules,
        title=INPUT_WAIT.title_for(obs.context),
    )


def _cpu_input_wait(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    """No GPU in the trace (training on the CPU, or a CPU-side rank): time the training loop spends
    inside DataLoader ``__next__`` is positive evidence by itself — with no accelerator to overlap
    it, it lengthens every step one for one."""
    b = obs.breakdown
    if obs.segmentation.method == "whole_trace" or not b.total_ns:
        return None  # without step boundaries there is no step time to take a share of
    p = b.data_wait_pct
    sev = (
        "high" if p >= rules.value("data_wait.high") else "moderate" if p >= rules.value("data_wait.moderate") else None
    )
    if not sev:
        return None
    lines = [
        ev(
            rules, "data_wait.high" if sev == "high" else "data_wait.moderate", "host waiting on DataLoader __next__", p
        ),
        ctx("GPU kernels in trace", 0, "kernels", "trace: no GPU activity (runs on the CPU)"),
    ]
    detail = cpu_input_wait_detail(
        obs.context,
        "training runs on the CPU here, so every millisecond spent loading a batch adds to the step",
    )
    if obs.single_process_loader:
        lines.append(
            ctx(
                "DataLoader runs in the training process (num_workers=0)",
                None,
                "",
                "trace: _SingleProcessDataLoaderIter",
            )
        )
        detail += "; batches are loaded in the training process itself (num_workers=0)"
    return INPUT_WAIT.finding(p, lines, detail, rules, severity=sev, title=INPUT_WAIT.title_for(obs.context, ""))


_COPY_SEV = by_stake("copy.moderate", "copy.high")


def _copies(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    stake = raised_stake(obs, rules, "copies", _COPY_SEV)
    if stake is None:
        return None
    lines = [ev(rules, "copy.moderate", "GPU busy only with memory copies", stake), sink_line(obs, "copies")]
    if obs.pageable_htod_copies:
        lines.append(
            ctx(
                "host-to-device copies from pageable memory",
                obs.pageable_htod_copies,
                "copies",
                "trace: Memcpy HtoD (Pageable -> Device)",
            )
        )
    lines += _flow_lines(obs)
    return COPIES.finding(stake, lines, "copies run while no kernel does", rules)


def _flow_lines(obs: DiagnosisInput) -> list[Evidence]:
    """The copies by direction and host memory: count, bytes, GPU time and the bandwidth reached
    (a copy-dominated window is judged on these)."""
    ct = obs.copy_traffic
    if ct is None:
        return []
    return [
        ctx(
            f"{f.direction} copies, {f.host_memory} host memory: {f.count} copies, {f.bytes / 2**20:.1f} MiB, "
            f"{f.gpu_ns / 1e6:.2f} ms on the GPU",
            round(f.gb_per_s, 2) if f.gb_per_s is not None else None,
            "GB/s",
            "trace: memcpy kind, memory kinds, bytes, duration",
        )
        for f in ct.flows[:4]
    ]


_PAGEABLE_SEV = by_stake("pageable_copy.moderate", "copy.high")


def _pageable(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    p = obs.pageable
    if not obs.has_gpu or p is None or not p.count:
        return None
    return PAGEABLE_COPIES.finding(
        p.share_pct,
        [
            ev(rules, "pageable_copy.moderate", "GPU time in pageable host-to-device copies", p.share_pct),
            ctx("pageable host-to-device copies in the steps", p.count, "copies", "trace: memcpy srcKind pageable"),
            ctx("bytes copied from pageable memory", p.bytes / 2**20, "MiB"),
            *_flow_lines(obs),
        ],
        "each copy is staged through a driver bounce buffer: the host blocks and the copy cannot overlap compute",
        rules,
    )


# --- live measures (trainscope watch, counters-only inputs) ------------------------------------------


def _live_input_wait(s: WindowStats, _snaps: Sequence[Snapshot], r: Rules) -> Finding | None:
    if s.data_wait_pct is None or not s.enough_steps(r):
        return None
    p = s.data_wait_pct
    sev = "high" if p >= r.value("data_wait.high") else "moderate" if p >= r.value("data_wait.moderate") else None
    if sev is None:
        return None
    lines = [
        live_ev(r, f"data_wait.{sev}", "training loop waiting in DataLoader __next__ (step-exact)", p),
        ctx("steps measured in the window", s.steps, "steps", "step hook"),
    ]
    if s.workers is not None:
        lines.append(ctx("DataLoader worker processes", s.workers, "processes", "process tree"))
    detail = "the input pipeline cannot keep the training step fed"
    if not s.workers:
        detail += "; batches are loaded in the training process itself (no DataLoader workers seen)"
    return INPUT_WAIT.finding(p, lines, detail, r, title="Training waits on the input pipeline", severity=sev)


def _live_loader_cpu(s: WindowStats, _snaps: Sequence[Snapshot], r: Rules) -> Finding | None:
    if s.starved_cpu_pct is None or s.starved_cpu_pct <= r.value("live.starved_share"):
        return None
    lines = [
        live_ev(
            r,
            "live.starved_share",
            f"samples with GPU < {r.value('live.gpu_idle'):g} % while CPU/loader ≥ {r.value('live.cpu_saturated'):g} %",
            s.starved_cpu_pct,
        ),
        ctx("host CPU", s.cpu_pct, "%"),
        ctx("CPU per DataLoader worker", s.worker_cpu_pct, "% of a core"),
    ]
    return LOADER_CPU.finding(
        s.starved_cpu_pct,
        lines,
        "the data loader cannot produce batches as fast as the GPU consumes them",
        r,
        severity="high",
    )


def _live_io_wait(s: WindowStats, _snaps: Sequence[Snapshot], r: Rules) -> Finding | None:
    if s.starved_io_pct is None or s.starved_io_pct <= r.value("live.starved_share"):
        return None
    lines = [
        live_ev(
            r,
            "live.starved_share",
            f"samples with GPU < {r.value('live.gpu_idle'):g} % while I/O wait ≥ "
            f"{r.value('live.iowait_saturated'):g} %",
            s.starved_io_pct,
        ),
        ctx("I/O wait", s.iowait_pct, "%"),
    ]
    return IO_WAIT.finding(s.starved_io_pct, lines, "reading the data set is the bottleneck", r, severity="high")


# --- wording: the fix in the run's words (its Context) ----------------------------------------


def _input_wait_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.input_source == "communication" and not c.native:
        return FixText(
            "overlap-communication",
            "Overlap the host's communication with GPU work",
            "# the host waits in the communication library (MPI_*), not on input: post it early\n"
            "req = comm.Irecv(buf, source=src)   # mpi4py, non-blocking, before the GPU work\n"
            "out = model(x)                      # work that does not need buf\n"
            "req.Wait()                          # just before buf is used",
        )
    if c.input_source == "communication":
        return FixText(
            "overlap-communication",
            "Overlap the host's communication with GPU work",
            "// the host waits in the communication library (MPI_*), not on input: post it early\n"
            "MPI_Irecv(buf, n, MPI_FLOAT, src, tag, comm, &req);   // non-blocking, before the kernels\n"
            "// ... launch the kernels that do not need buf ...\n"
            "MPI_Wait(&req, MPI_STATUS_IGNORE);                   // just before buf is used",
        )
    if c.input_source == "pipeline" and not c.native:
        return FixText(
            "dataloader-workers",
            "Move the pipeline's preprocessing off the GPU's critical path",
            "# the trace shows the pipeline's own preprocess frames, not a DataLoader:\n"
            "# decode/resize the next inputs on other threads while the GPU runs this batch\n"
            "from concurrent.futures import ThreadPoolExecutor\n"
            "pool = ThreadPoolExecutor(max_workers=4)\n"
            'nxt = pool.submit(processor, next_inputs, return_tensors="pt")  # prepare batch i+1\n'
            "out = model(**batch)                                           # while batch i runs\n"
            "batch = {k: v.to(device, non_blocking=True) for k, v in nxt.result().items()}",
        )
    if c.input_source == "files" and c.native:
        return FixText(
            "dataloader-workers",
            "Read input ahead of the compute loop",
            "// the host blocks in read()/fread() inside the step: read the next chunk on another thread\n"
            "// (or with io_uring / aio) into a pinned buffer while the kernels of this step run",
        )
    if c.native:
        return FixText(
            "dataloader-workers",
            "Prepare input on other threads and keep several batches in flight",
            "// producer threads decode/preprocess into a ring of pinned buffers (cudaHostAlloc / hipHostMalloc)\n"
            "// the compute loop takes the next ready buffer; cudaMemcpyAsync on a copy stream overlaps the kernels",
        )
    return FixText(
        "dataloader-workers",
        "Load batches in parallel worker processes and prefetch them"
        if single
        else "Prefetch more batches and add DataLoader workers",
        "# as many workers as this machine has CPU cores per GPU:\n"
        "workers = max(1, len(os.sched_getaffinity(0)) // max(1, torch.cuda.device_count()))\n"
        "DataLoader(dataset, batch_size=..., num_workers=workers,\n"
        "           pin_memory=True, prefetch_factor=2, persistent_workers=True)"
        + (
            ""
            if c.input_source == "dataloader"
            else "\n# no DataLoader in the trace: wrap the loading code in a Dataset so these workers run it"
        ),
    )


def _copies_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "overlap-copies",
            "Overlap host-to-device copies with compute (pinned buffers, async copies)",
            "cudaHostAlloc(&h_buf, bytes, cudaHostAllocDefault);        // page-locked host buffer\n"
            "cudaMemcpyAsync(d_buf, h_buf, bytes, cudaMemcpyHostToDevice, copy_stream);\n"
            "// double-buffer: compute on buffer i while buffer i+1 is copied",
        )
    return FixText(
        "overlap-copies",
        "Overlap host-to-device copies with compute (pinned memory, non_blocking)",
        _pin_line(c) + "\nx = x.to(device, non_blocking=True)",
    )


def _pin_line(c: Context) -> str:
    """Pinned batches the way this run gets its input: a DataLoader's flag where the trace shows
    one (or shows nothing), else pinning the tensors the pipeline builds."""
    if c.input_source in (None, "dataloader"):
        return "DataLoader(..., pin_memory=True)             # batches land in page-locked memory"
    return "x = x.pin_memory()                           # the pipeline's tensors, page-locked once"


def _pageable_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "pin-memory",
            "Copy from pinned memory, asynchronously",
            "cudaHostAlloc(&h_buf, bytes, cudaHostAllocDefault);  // or cudaHostRegister on an existing buffer\n"
            "cudaMemcpyAsync(d_buf, h_buf, bytes, cudaMemcpyHostToDevice, stream);  // no staging, no host block",
        )
    return FixText(
        "pin-memory",
        "Copy from pinned memory, asynchronously",
        _pin_line(c) + "\n"
        "x = x.to(device, non_blocking=True)          # copy overlaps compute\n"
        "# tensors built on the host each step: t.pin_memory() once, reuse the buffer",
    )


def _loader_cpu_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native or c.input_source in (None, "dataloader"):
        return catalog_words("loader-cpu", c.native)
    return FixText(
        "loader-cpu",
        "Give the input pipeline more CPU, or do less work per sample",
        "# preprocessing runs in the pipeline itself: spread it over more threads or processes\n"
        "# move decoding/augmentation to the GPU (e.g. NVIDIA DALI, torchvision.transforms.v2 on tensors)",
    )


def _input_wait_title(c: Context, default: str) -> str:
    if c.input_source == "communication":
        return "The GPU waits while the host is in the communication library (MPI)"
    return "Training waits on the input pipeline" if c.training else "The pipeline waits on input"


def _input_wait_detail(c: Context, default: str) -> str:
    if c.input_source == "communication":
        return (
            "the host sits in MPI_* calls while the GPU idles: communication on the critical path, "
            "not batch loading or preprocessing"
        )
    return default


def cpu_input_wait_detail(ctx: Context | None, default: str) -> str:
    """The input wait's detail for a run on the CPU (the verdict's CPU rule)."""
    if ctx is not None and not ctx.training:
        return "the run is on the CPU here, so every millisecond spent loading a batch adds to the step"
    return default


_LOADER_FIX = catalog_fix("dataloader-workers", projection="data-wait", text=_input_wait_words)

INPUT_WAIT = FindingSpec(
    id="data/input-wait",
    axis="data",
    title="The step waits on the input pipeline",
    measure=_input_wait,
    can_be_primary=True,
    severity=_INPUT_SEV,
    fix=_LOADER_FIX,
    whatif_pool="input",
    diff_measure=DiffMeasure(
        "host waiting on DataLoader __next__",
        "ms per step",
        lambda a: a.breakdown.host_data_wait_ns / 1e6 / max(1, len(a.breakdown.steps)),
    ),
    **verdict_class("input"),
    breakdown=("idle_data_wait",),
    describes="GPU idle while the host waits on the DataLoader or preprocesses input",
    title_words=_input_wait_title,
    detail_words=_input_wait_detail,
    live=LiveMeasure(
        "data",
        "step-exact DataLoader wait share",
        _live_input_wait,
        ("data_wait.moderate", "data_wait.high", "live.min_steps", "live.min_step_seconds", "live.startup_steps"),
        gpu=False,
    ),
    thresholds=("gpu_busy.saturated",),
)

COPIES = FindingSpec(
    id="data/copies",
    axis="data",
    title="Memory copies not overlapped with compute",
    measure=_copies,
    can_be_primary=True,
    severity=_COPY_SEV,
    fix=catalog_fix("overlap-copies", projection="busy", text=_copies_words),
    whatif_pool="copies",
    diff_measure=DiffMeasure("GPU busy only with memory copies", "ms per step", ms_per_step("copy")),
    **verdict_class("copies"),
    breakdown=("copy",),
    describes="GPU busy with copies only, no kernel beside them",
)

PAGEABLE_COPIES = FindingSpec(
    id="data/pageable-copies",
    axis="data",
    title="Host-to-device copies from pageable memory",
    measure=_pageable,
    can_be_primary=True,
    severity=_PAGEABLE_SEV,
    fix=catalog_fix("pin-memory", projection="busy", text=_pageable_words),
    whatif_pool="copies",
    diff_measure=DiffMeasure(
        "GPU time in pageable host-to-device copies", "ms per step", stake_ms("data/pageable-copies")
    ),
    **verdict_class("copies", "pageable memory"),
    breakdown=("copy",),
    describes="GPU time in host-to-device copies from pageable memory",
    refines="data/copies",
)

LOADER_CPU = FindingSpec(
    id="data/loader-cpu",
    axis="data",
    title="GPU starved while the input pipeline's CPU is saturated",
    measure=None,
    can_be_primary=True,
    severity=by_stake("live.starved_share"),
    fix=catalog_fix("loader-cpu", projection="none", text=_loader_cpu_words),
    diff_measure=DiffMeasure("samples starved while the CPU saturates", "%", stake_pct("data/loader-cpu")),
    **verdict_class("input", "loader CPU"),
    describes="share of samples with the GPU near idle while the loader CPU saturates (live)",
    live=LiveMeasure(
        "data",
        "GPU utilization × host/loader CPU per sample",
        _live_loader_cpu,
        ("live.starved_share", "live.gpu_idle", "live.cpu_saturated"),
    ),
)

IO_WAIT = FindingSpec(
    id="data/io-wait",
    axis="data",
    title="GPU starved while the host waits on storage",
    measure=None,
    can_be_primary=True,
    severity=by_stake("live.starved_share"),
    fix=catalog_fix("io-wait", projection="none"),
    diff_measure=DiffMeasure("samples starved while I/O wait saturates", "%", stake_pct("data/io-wait")),
    **verdict_class("input", "I/O wait"),
    describes="share of samples with the GPU near idle while I/O wait saturates (live)",
    live=LiveMeasure(
        "data",
        "GPU utilization × I/O wait per sample",
        _live_io_wait,
        ("live.starved_share", "live.gpu_idle", "live.iowait_saturated"),
    ),
)

SPECS = (INPUT_WAIT, COPIES, PAGEABLE_COPIES, LOADER_CPU, IO_WAIT)
