"""Data axis: the step waits on input (loader waits, host preprocessing) or on host-device copies."""

from __future__ import annotations

from trainscope.analyzers.findings.base import (
    DiffMeasure,
    Evidence,
    Finding,
    FindingSpec,
    Fix,
    by_stake,
    ms_per_step,
    stake_ms,
    stake_pct,
)
from trainscope.analyzers.findings.observations import DiagnosisInput
from trainscope.analyzers.findings.common import ctx, ev, raised, sink_line
from trainscope.analyzers import fix_text
from trainscope.analyzers.rules import Rules

_INPUT_SEV = by_stake("data_wait.moderate", "data_wait.high")


def _input_wait(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    if not obs.has_gpu or obs.sinks is None or not raised(obs, rules, "input", _INPUT_SEV):
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
        fix_text.detail(INPUT_WAIT.id, obs.context, detail),
        rules,
        title=fix_text.title(INPUT_WAIT.id, obs.context, ""),
    )


_COPY_SEV = by_stake("copy.moderate", "copy.high")


def _copies(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    if not obs.has_gpu or obs.sinks is None or not raised(obs, rules, "copies", _COPY_SEV):
        return None
    stake = obs.sinks.pct("copies")
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
    t = rules["pageable_copy.moderate"]

    return PAGEABLE_COPIES.finding(
        p.share_pct,
        [
            Evidence(
                "GPU time in pageable host-to-device copies",
                round(p.share_pct, 2),
                t.unit,
                f"≥ {t.value:g}",
                t.source,
                p.share_pct >= t.value,
            ),
            Evidence(
                "pageable host-to-device copies in the steps", p.count, "copies", "", "trace: memcpy srcKind pageable"
            ),
            Evidence("bytes copied from pageable memory", round(p.bytes / 2**20, 2), "MiB", "", "measured"),
            *_flow_lines(obs),
        ],
        "each copy is staged through a driver bounce buffer: the host blocks and the copy cannot overlap compute",
        rules,
    )


_LOADER_FIX = Fix(
    "dataloader-workers",
    "Load batches in parallel worker processes and prefetch them",
    "# as many workers as this machine has CPU cores per GPU:\n"
    "workers = max(1, len(os.sched_getaffinity(0)) // max(1, torch.cuda.device_count()))\n"
    "DataLoader(dataset, batch_size=..., num_workers=workers,\n"
    "           pin_memory=True, prefetch_factor=2, persistent_workers=True)\n"
    "# preprocessing outside a DataLoader (a pipeline's decode/resize): move it into the dataset's\n"
    "# __getitem__ so the workers run it, or onto the GPU",
    "// a producer thread pool fills a ring of pinned host buffers while the GPU computes:\n"
    "// decode/preprocess batch i+1 on the CPU, cudaMemcpyAsync it on a copy stream, record an event,\n"
    "// cudaStreamWaitEvent(compute_stream, ready[i+1]) before the kernels that read it",
    projection="data-wait",
    basis="removing the {wait:.1f} % data wait",
    whatif_label="data loading fully overlapped with compute",
    text=fix_text._input_wait,
)

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
    critical_path="data",
    headline="DATA-BOUND",
    label_class="input",
    sink="input",
    breakdown=("idle_data_wait",),
    describes="GPU idle while the host waits on the DataLoader or preprocesses input",
    live=True,
)

COPIES = FindingSpec(
    id="data/copies",
    axis="data",
    title="Memory copies not overlapped with compute",
    measure=_copies,
    can_be_primary=True,
    severity=_COPY_SEV,
    fix=Fix(
        "overlap-copies",
        "Overlap host-to-device copies with compute (pinned memory, non_blocking)",
        "DataLoader(..., pin_memory=True)\nx = x.to(device, non_blocking=True)",
        "cudaHostAlloc(&h_buf, bytes, cudaHostAllocDefault);          // pinned staging buffer\n"
        "cudaMemcpyAsync(d_buf, h_buf, bytes, cudaMemcpyHostToDevice, copy_stream);\n"
        "// kernels on another stream wait on an event recorded after the copy",
        projection="busy",
        basis="hiding the {stake:.1f} % copy-only time",
        whatif_label="host-to-device copies hidden behind compute",
        text=fix_text._copies,
    ),
    whatif_pool="copies",
    diff_measure=DiffMeasure("GPU busy only with memory copies", "ms per step", ms_per_step("copy")),
    critical_path="data",
    headline="COPY-BOUND",
    label_class="copies",
    sink="copies",
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
    fix=Fix(
        "pin-memory",
        "Copy from pinned memory, asynchronously",
        "DataLoader(..., pin_memory=True)             # batches land in page-locked memory\n"
        "x = x.to(device, non_blocking=True)          # copy overlaps compute\n"
        "# tensors built on the host each step: t.pin_memory() once, reuse the buffer",
        "cudaHostAlloc(&h_buf, bytes, cudaHostAllocDefault);  // or cudaHostRegister an existing buffer\n"
        "cudaMemcpyAsync(d_buf, h_buf, bytes, cudaMemcpyHostToDevice, stream);  // not cudaMemcpy from malloc'd memory",
        projection="busy",
        basis="if the {stake:.1f} % pageable-copy time were hidden behind compute",
        whatif_label="pageable copies hidden behind compute",
        text=fix_text._pageable,
    ),
    whatif_pool="copies",
    diff_measure=DiffMeasure(
        "GPU time in pageable host-to-device copies", "ms per step", stake_ms("data/pageable-copies")
    ),
    critical_path="data",
    headline="COPY-BOUND (pageable memory)",
    label_class="copies",
    sink="copies",
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
    fix=Fix(
        "loader-cpu",
        "Give the input pipeline more CPU, or do less work per sample",
        "DataLoader(..., num_workers=<more>, persistent_workers=True)\n"
        "# move decoding/augmentation to the GPU (e.g. NVIDIA DALI, torchvision.transforms.v2 on tensors)",
        "// more producer threads for decoding; move decode/augmentation onto the GPU (nvJPEG, NPP, DALI)",
        projection="none",
        basis="no projection from sampled counters",
        text=fix_text._loader_cpu,
    ),
    whatif_pool=None,
    diff_measure=DiffMeasure("samples starved while the CPU saturates", "%", stake_pct("data/loader-cpu")),
    critical_path="data",
    headline="DATA-BOUND (loader CPU)",
    label_class="input",
    sink="input",
    describes="share of samples with the GPU near idle while the loader CPU saturates (live)",
    live=True,
    offline=False,
)

IO_WAIT = FindingSpec(
    id="data/io-wait",
    axis="data",
    title="GPU starved while the host waits on storage",
    measure=None,
    can_be_primary=True,
    severity=by_stake("live.starved_share"),
    fix=Fix(
        "io-wait",
        "Read the data faster: local SSD, larger sequential reads, a cache",
        "# copy the data set to local NVMe, use a sharded/streaming format (WebDataset, MosaicML streaming)",
        "// read large sequential shards (O_DIRECT / io_uring, GPUDirect Storage: cuFileRead) from local NVMe",
        projection="none",
        basis="no projection from sampled counters",
    ),
    whatif_pool=None,
    diff_measure=DiffMeasure("samples starved while I/O wait saturates", "%", stake_pct("data/io-wait")),
    critical_path="data",
    headline="DATA-BOUND (I/O wait)",
    label_class="input",
    sink="input",
    describes="share of samples with the GPU near idle while I/O wait saturates (live)",
    live=True,
    offline=False,
)

SPECS = (INPUT_WAIT, COPIES, PAGEABLE_COPIES, LOADER_CPU, IO_WAIT)
