"""The roofline on real traces, against rates computed independently from the raw events, the device
table's name matching, and the verdict/MFU it feeds."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import CPU_ONLY
from tests.conftest import KINETO
from tests.conftest import analysis
from tests.conftest import load
from tests.conftest import raw_document
from trainscope.analyzers.devices import DEVICE_TABLE
from trainscope.analyzers.devices import PRECISIONS
from trainscope.analyzers.devices import lookup
from trainscope.analyzers.devices import lookup_device
from trainscope.traces.model import Device

TIMESFORMER = "tl_h100_timesformer_k400_infer.json.gz"
SGLANG = "tl_mi300x_sglang_qwen3-8b_prefilldecode.json.gz"
GPTOSS = "tl_mi300x_vllm_gptoss_decode_fullgraph_bs32.json.gz"


def test_timesformer_busy_time_is_memory_bound_on_the_unfused_softmax():
    a = analysis(TIMESFORMER)
    roof = a.roofline
    assert roof.device == "H100 SXM" and roof.bandwidth_gbps == 3350.0
    assert roof.share_pct("memory") > 80
    top = roof.rows[0]
    assert "cunn_SoftMaxForward" in top.name and top.bound == "memory" and top.precision == "bf16"
    # independent reference from the raw events: kernel time and bytes of the softmax over the
    # [8, 12, 3137, 3137] bf16 score tensors (read once, written once)
    ev = raw_document(TIMESFORMER)["traceEvents"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    total_us = sum(e["dur"] for e in kernels)
    soft = [e for e in kernels if "cunn_SoftMaxForward" in e["name"]]
    soft_us = sum(e["dur"] for e in soft)
    assert 100 * soft_us / total_us == pytest.approx(44, abs=2)
    assert top.share_pct == pytest.approx(100 * soft_us / total_us, abs=0.1)
    calls = sum(
        1
        for e in ev
        if e.get("cat") == "cpu_op"
        and e["name"] == "aten::_softmax"
        and e["args"]["Input Dims"][0] == [8, 12, 3137, 3137]
    )
    assert calls == len(soft)
    tbps = calls * 2 * (8 * 12 * 3137 * 3137 * 2) / (soft_us * 1e-6) / 1e12
    assert tbps == pytest.approx(0.66, abs=0.03)
    assert top.gbps / 1e3 == pytest.approx(tbps, rel=1e-3)
    assert top.pct_of_roof == pytest.approx(100 * tbps * 1e3 / 3350, abs=0.5)
    assert top.pct_of_roof == pytest.approx(20, abs=2)
    line = roof.evidence_line("memory")
    assert line.startswith(
        "cunn_SoftMaxForward 44 % of kernel time: 1.25 FLOP/B, 660 GB/s = 20 % of the H100 SXM's 3.35 TB/s"
    )
    # the verdict's memory-bound finding reads the roofline and quotes the line
    f = next(f for f in a.findings if f.id == "machine/bandwidth")
    assert any(e.metric == line for e in f.evidence)
    assert f.evidence[0].metric.startswith("memory-bound kernel time")  # the sink, then the roofline line


def test_sglang_large_gemms_are_compute_bound():
    roof = analysis(SGLANG).roofline
    assert roof.device == "MI300X"  # kernels on device 9, described under id 0
    mms = [r for r in roof.rows if r.source.startswith("shapes: aten::mm")]
    gemms = [r for r in mms if r.share_pct > 1]  # the prefill projections: [15360, K] x [K, N]
    share = sum(r.share_pct for r in gemms)
    assert share == pytest.approx(85, abs=3)
    # the LM head on the 15 sampled tokens ([15, 4096] x [4096, 151936]) is a skinny GEMM: ~15 FLOP/B
    (head,) = [r for r in mms if r.share_pct <= 1]
    assert head.bound == "memory" and head.intensity == pytest.approx(15, abs=1)
    for r in gemms:
        assert r.bound == "compute" and r.precision == "bf16" and r.tensor_cores
        assert r.intensity > 2 * roof.ridge("bf16")  # [15360, K] × [K, N]: thousands of FLOP per byte
        assert 20 < r.pct_of_roof < 100
    assert roof.share_pct("compute") > 80


def test_decode_moe_gemms_are_bandwidth_bound_by_their_skinny_tile():
    roof = analysis(GPTOSS).roofline  # full graph replay: no shapes reach these kernels
    ogs = [r for r in roof.rows if "_matmul_ogs" in r.name]
    assert sum(r.share_pct for r in ogs) == pytest.approx(66, abs=3)
    assert all(r.bound == "memory" and r.source.startswith("name (last resort)") for r in ogs)
    assert roof.share_pct("memory") > roof.share_pct("compute")


def test_gpu_traces_with_shapes_get_an_mfu_estimated_from_shapes():
    with_shapes = []
    for path in sorted(KINETO.glob("*.json.gz")):
        if path.name in CPU_ONLY:
            continue
        t = load(path.name)
        if not (t.op_inputs.cpu_signature >= 0).any():
            continue
        with_shapes.append(path.name)
        a = analysis(path.name)
        if a.device_spec is None:
            continue
        assert a.mfu.value_pct is not None, path.name
        assert 0 <= a.mfu.value_pct < 100
        assert a.mfu.basis == "estimated from shapes" and a.mfu.reason.startswith("estimated from shapes")
        law = a.mfu.iron_law
        if law is None:  # no matrix FLOPs in the window (normalization kernels only): nothing to close
            assert a.mfu.value_pct == 0.0
            continue
        assert law.step_s * 1e3 == pytest.approx(a.breakdown.step_ms.mean, rel=1e-6)
        # the Iron Law closes: FLOPs/step = step time × GPUs × peak × η
        assert law.flops_per_step == pytest.approx(
            law.step_s * law.gpus * law.peak_tflops * 1e12 * law.efficiency_pct / 100
        )
    assert {TIMESFORMER, SGLANG, "resnet50_v100_num_workers_0.pt.trace.json.gz"} <= set(with_shapes)


def test_mfu_from_shapes_by_hand_on_sglang():
    a = analysis(SGLANG)
    ev = raw_document(SGLANG)["traceEvents"]
    # every aten::mm of the step, 2·M·K·N from its dims; the step is the analyzed window
    flops = sum(
        2 * d[0][0] * d[0][1] * d[1][1]
        for d in (e["args"]["Input Dims"] for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::mm")
    )
    assert a.roofline.matrix_flops == pytest.approx(flops, rel=0.01)
    assert len(a.segmentation.steps) == 1
    step_s = a.breakdown.step_ms.mean / 1e3
    assert a.mfu.value_pct == pytest.approx(100 * flops / step_s / 1307.4e12, rel=0.01)


@pytest.mark.parametrize(
    "name,key",
    [
        ("NVIDIA A100-PG509-200", "A100 40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("Tesla V100-DGXS-32GB", "V100"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("Tesla T4", "T4"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A10G", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 2080 Ti", "RTX 2080 Ti"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI250X", "MI250X"),
    ],
)
def test_device_names_match(name, key):
    assert lookup(name).key == key


def test_device_table_is_complete_and_sourced():
    for spec in DEVICE_TABLE:
        assert spec.source and spec.memory_gbps > 0
        assert set(spec.peaks) <= set(PRECISIONS) and spec.peaks["fp32"] >= spec.vector["fp32"] > 0
        assert spec.tensor_tflops == spec.peaks.get("fp16", spec.peaks.get("bf16", spec.fp32_tflops))
    # no tensor cores where the part has none: fp64 on a T4, bf16 on a V100
    t4, v100 = lookup("Tesla T4"), lookup("Tesla V100-SXM2-16GB")
    assert t4.peak("fp64", True) == (0.25, False) and not t4.has_tensor_cores("fp64")
    assert not v100.has_tensor_cores("bf16")
    assert lookup("NVIDIA A100-SXM4-40GB").peak("fp64", True) == (19.5, True)  # FP64 tensor cores (DMMA)
    # seed figures: ridge points ≈ 153 (A100 80 GB) and ≈ 295 (H100) FLOP per byte
    assert lookup("NVIDIA A100-SXM4-80GB").ridge == pytest.approx(153, abs=1)
    assert lookup("NVIDIA H100 80GB HBM3").ridge == pytest.approx(295, abs=1)


def test_amd_devices_without_a_name_match_by_compute_units():
    t = load(GPTOSS)
    assert t.devices[0].name == "" and t.devices[0].sm_count == 304
    assert lookup_device(t.devices[0]).key == "MI300X"
    mi250 = load("hta_mi250_minitoy_train.json.gz").devices[0]  # "AMD Radeon Graphics", 104 CUs: one MI250 GCD
    assert lookup_device(mi250).key == "MI250"
    assert lookup_device(Device(0, "", "amd", None, 999)) is None


def test_fp32_xmma_kernels_are_not_tensor_core():
    from trainscope.analyzers.trace.kernels import uses_tensor_cores

    assert not uses_tensor_cores("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3", "gemm")
    assert uses_tensor_cores("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16", "gemm")
    assert uses_tensor_cores("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm")


def test_tensor_core_advice_only_where_the_precision_has_tensor_cores():
    # fp32 cuDNN convolutions on a V100: mixed precision (fp16 tensor cores) applies
    a = analysis("resnet50_v100_num_workers_0.pt.trace.json.gz")
    assert a.roofline.tensor_core_pct_of_matrix == 0.0 and a.roofline.tensor_core_candidate_ms > 0
    assert any(f.id == "algorithm/no-tensor-cores" for f in a.findings)
    # the same kernels on a device table entry without fp16/bf16/tf32 tensor cores get no advice
    from trainscope.analyzers.devices import DeviceSpec
    from trainscope.analyzers.trace.roofline import roofline

    t = load("resnet50_v100_num_workers_0.pt.trace.json.gz")
    no_tc = DeviceSpec("no-TC", "", 15.7, 15.7, 900.0, "test", {"fp32": 15.7, "fp64": 7.8}, {"fp32": 15.7, "fp64": 7.8})
    r = roofline(t, t.kernels.device == 0, no_tc)
    assert r.matrix_ms > 0 and r.tensor_core_candidate_ms == 0.0


def test_peak_bandwidth_override_moves_the_roof():
    from trainscope.analyzers.trace.analysis import analyze_trace

    a = analyze_trace(load(TIMESFORMER), peak_bandwidth=1320.0)
    top = a.roofline.rows[0]
    assert a.roofline.bandwidth_gbps == 1320.0
    assert top.pct_of_roof == pytest.approx(50, abs=1)  # 660 GB/s of 1320
    assert np.isclose(top.gbps, analysis(TIMESFORMER).roofline.rows[0].gbps)


def test_roofline_chart_places_the_heaviest_kernels():
    from trainscope.tui.roofline_plot import roofline_chart

    lines = roofline_chart(analysis(TIMESFORMER).roofline, 100, 18)
    assert any("cunn_SoftMaxForward 44 % memory" in ln and ln.startswith("A ") for ln in lines)
    plot = [ln.split("│", 1)[1] for ln in lines if "│" in ln]
    # A (softmax, 1.25 FLOP/B) sits left of D (the bf16 addmm GEMM, ~533 FLOP/B) and below it
    (ra, ca), (rd, cd) = [next((i, ln.index(ch)) for i, ln in enumerate(plot) if ch in ln) for ch in "AD"]
    assert ca < cd and ra > rd
    assert roofline_chart(None, 80, 18)[0].startswith("roofline: no device peaks known")


def test_kernel_table_tensor_core_flag_comes_from_the_precision():
    # fp32 matrix products whose cuBLAS/CUTLASS kernels say TF32 (s1688gemm) run on A100 tensor cores
    a = analysis("hta_a100_control.json.gz")
    tf32 = [k for k in a.kernels.top if "s1688gemm" in k.name]
    assert tf32 and all(k.tensor_core for k in tf32)
    # bf16 GEMMs on an H100: tensor cores; the softmax next to them: not
    t = analysis(TIMESFORMER)
    flags = {k.name: k.tensor_core for k in t.kernels.top}
    assert all(v for n, v in flags.items() if "gemm" in n.lower())
    assert not any(v for n, v in flags.items() if "SoftMax" in n)


def test_tensor_core_candidates_are_compute_bound_fp32_matrix_math_only():
    """Mixed precision helps matrix math the roofline calls compute-bound, at a known fp32 precision:
    the same ResNet-50 convolutions made bandwidth-bound (GEMV-like intensity) or of unknown
    precision are no candidates."""
    import dataclasses

    from trainscope.analyzers.devices import lookup
    from trainscope.analyzers.trace.cost import PRECISIONS as CP
    from trainscope.analyzers.trace.cost import kernel_costs
    from trainscope.analyzers.trace.cost import name_precision
    from trainscope.analyzers.trace.roofline import roofline

    t = load("resnet50_v100_num_workers_0.pt.trace.json.gz")
    spec = lookup("Tesla V100-SXM2-16GB")
    c = kernel_costs(t)
    on = t.kernels.device == 0
    base = roofline(t, on, spec, c)
    assert base.tensor_core_candidate_ms > 0.5 * base.matrix_ms  # fp32 convolutions, compute-bound
    fp32 = c.precision == CP.index("fp32")
    # 0.25 FLOP/B, a GEMV's intensity, below any ridge point; kernels known only by name read as
    # GEMVs (bandwidth-bound by name) too
    gemv_like = dataclasses.replace(
        c,
        flops=np.where(c.matrix, c.bytes * 0.25, c.flops),
        name_bound=np.where(c.name_bound == 2, 1, c.name_bound).astype(np.int8),
    )
    r = roofline(t, on, spec, gemv_like)
    assert r.share_pct("compute") < base.share_pct("compute")
    assert r.tensor_core_candidate_ms < 0.05 * base.tensor_core_candidate_ms
    unknown = dataclasses.replace(c, precision=np.where(fp32, CP.index("unknown"), c.precision).astype(np.int8))
    r = roofline(t, on, spec, unknown)
    # only kernels whose names state fp32 (sgemm, scudnn, <float, …>) stay candidates
    named = sum(row.total_ms for row in base.rows if row.bound == "compute" and name_precision(row.name) == "fp32")
    assert r.tensor_core_candidate_ms == pytest.approx(named, rel=0.02)
    nameless = dataclasses.replace(unknown, matrix=c.matrix)
    t2 = dataclasses.replace(
        t, strings=[s.replace("float", "T").replace("sgemm", "gemm").replace("scudnn", "cudnn") for s in t.strings]
    )
    r = roofline(t2, on, spec, nameless)
    assert r.tensor_core_candidate_ms == 0.0 and r.matrix_ms == pytest.approx(base.matrix_ms, rel=0.01)


def test_each_kernel_is_held_to_the_peak_of_its_own_precision():
    """The bf16 GEMM of the Qwen H100 trace: some launches have shapes, some not. Its roof is the
    H100's bf16 tensor-core peak (989.5 TFLOP/s), not a time-average with the fp32 CUDA-core peak
    (which gave 89 %)."""
    a = analysis("tracelens_h100_qwen_inference.json.gz")
    row = next(r for r in a.roofline.rows if r.name.startswith("sm90_xmma_gemm_bf16bf16"))
    assert row.precision == "bf16" and row.tensor_cores and row.roof_tflops == 989.5
    assert row.pct_of_roof == pytest.approx(100 * row.tflops / 989.5, rel=0.02)  # compute-bound: I·B above the peak
    assert row.pct_of_roof == pytest.approx(63, abs=1.5)
    # sorted by % of roof: lowest first, rows without one last
    rows = a.roofline.rows_by("pct_of_roof")
    pcts = [r.pct_of_roof for r in rows if r.pct_of_roof is not None]
    assert pcts == sorted(pcts) and rows[-1].pct_of_roof is None or len(pcts) == len(rows)
    with pytest.raises(ValueError):
        a.roofline.rows_by("name")


def test_a_kernel_faster_than_its_roof_is_flagged_not_shown():
    """Winograd convolutions on a V100 do fewer FLOPs than the direct formula counts: the model,
    not the GPU, is wrong, so the row carries over_roof_pct and no % of roof, and a note says so."""
    a = analysis("resnet50_v100_num_workers_0.pt.trace.json.gz")
    over = [r for r in a.roofline.rows if r.over_roof_pct is not None]
    assert over and all(r.pct_of_roof is None and r.over_roof_pct > 105 for r in over)
    assert all(r.pct_of_roof is None or r.pct_of_roof <= 105 for r in a.roofline.rows)
    assert any("faster than" in n and "FLOPs or bytes are wrong" in n for n in a.roofline.notes)


def test_api_kernel_table_sorts_by_pct_of_roof():
    from tests.conftest import KINETO
    from trainscope import api
    from trainscope.api.errors import BadInput

    rep = api.analyze(str(KINETO / "tracelens_h100_qwen_inference.json.gz"))
    t = api.kernel_table(rep, sort="pct_of_roof", limit=1000)
    pcts = [k["pct_of_roof"] for k in t["kernels"]]
    known = [p for p in pcts if p is not None]
    assert len(known) >= 10 and known == sorted(known)
    assert pcts[: len(known)] == known  # kernels without a roof come last
    gemm = next(k for k in t["kernels"] if k["name"].startswith("sm90_xmma_gemm_bf16bf16"))
    assert gemm["pct_of_roof"] == pytest.approx(62.9, abs=0.5) and gemm["bound"] == "compute"
    assert gemm["family"] == "cuBLAS GEMM/GEMV"
    by_total = api.kernel_table(rep, limit=1000)["kernels"]
    assert [k["total_ms"] for k in by_total] == sorted((k["total_ms"] for k in by_total), reverse=True)
    with pytest.raises(BadInput):
        api.kernel_table(rep, sort="name")
