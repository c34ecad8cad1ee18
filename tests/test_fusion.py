"""analyzers/trace/fusion.py: repeated back-to-back kernel sequences (fusion candidates), their time and the
intermediate traffic fusing them removes, bounded by the roofline — on synthetic traces with known
counts, times and bytes, and on a bundled trace against a hand count from its raw events."""

from __future__ import annotations

import dataclasses
import gzip
import json
import pathlib

import numpy as np
import pytest

from trainscope.analyzers.devices import lookup_device
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.analysis import analyze_trace
from trainscope.analyzers.trace.cost import kernel_costs
from trainscope.analyzers.trace.fusion import _by_pattern
from trainscope.analyzers.trace.fusion import _without_overlap
from trainscope.analyzers.trace.fusion import fusion_candidates
from trainscope.analyzers.trace.roofline import roofline
from trainscope.collectors import open_traces
from trainscope.reports.document import build_document
from trainscope.reports.html import render_html
from trainscope.reports.markdown import render_markdown
from trainscope.reports.text import render_text
from trainscope.traces.builder import TraceBuilder

ROOT = pathlib.Path(__file__).parent.parent
NORM = ROOT / "tests" / "data" / "kineto" / "tl_mi300x_norm_layers_fwdbwd.json.gz"

GEMM = "ampere_sgemm_128x64_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>"
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::ReluFunctor<float>>"
US = 1_000  # ns


def _chain_trace(steps: int = 4, gap_us: float = 2, second_stream_repeats: int = 2):
    """Per step, on stream 7: GEMM 100 µs, ADD 20 µs (2 µs later), MUL 10 µs (1 µs later), then RELU
    5 µs after a 50 µs gap (not back to back). On stream 8, an ADD → MUL pair in the first
    ``second_stream_repeats`` steps only."""
    b = TraceBuilder()
    step_ns = 1_000 * US
    for n in range(steps):
        t0 = 1_000 * US + n * step_ns
        b.step(n + 1, t0, step_ns - 10 * US)
        gpu = t0 + 100 * US
        for name, dur, gap in ((GEMM, 100, 0), (ADD, 20, gap_us), (MUL, 10, 1), (RELU, 5, 50)):
            gpu += int(gap * US)
            c = b.launch(t0 + 10 * US, 5 * US)
            b.kernel(name, gpu, dur * US, c)
            gpu += dur * US
        if n < second_stream_repeats:
            c = b.launch(t0 + 20 * US, 5 * US)
            b.kernel(ADD, t0 + 600 * US, 20 * US, c, stream=8)
            c = b.launch(t0 + 21 * US, 5 * US)
            b.kernel(MUL, t0 + 621 * US, 10 * US, c, stream=8)
    return b.build()


def _candidates(trace, nbytes: dict[str, float] | None = None, rules: Rules | None = None, steps: int = 4):
    """fusion_candidates over every kernel, the cost model's bytes replaced by ``nbytes`` per name."""
    costs = kernel_costs(trace)
    spec = lookup_device(trace.devices[0])
    roof = roofline(trace, None, spec, costs)
    if nbytes is not None:
        b = np.array([nbytes.get(trace.strings[i], np.nan) for i in trace.kernels.name])
        costs = dataclasses.replace(costs, bytes=b)
    return fusion_candidates(trace, None, costs, roof, rules or Rules(), steps=steps), roof


def test_a_repeated_chain_is_one_candidate_with_exact_counts_times_and_bytes():
    fc, roof = _candidates(_chain_trace(), {GEMM: 1e6, ADD: 4e5, MUL: 2e5, RELU: 1e5})
    assert roof.bandwidth_gbps == 2039.0  # A100 80 GB SXM
    # GEMM → ADD → MUL: 4 times on stream 7 (ADD → MUL alone is inside it: tiled out; MUL → RELU is
    # 50 µs apart; stream 8's ADD → MUL twice only, under fusion.min_repeats = 3)
    assert len(fc.candidates) == 1 and fc.found == 1
    c = fc.candidates[0]
    assert c.kernels == (GEMM, ADD, MUL) and c.classes == ("gemm", "elementwise", "elementwise")
    assert (c.stream, c.occurrences, c.steps) == (7, 4, 4)
    assert c.total_ms == pytest.approx(4 * 0.130) and c.ms_per_step == pytest.approx(0.130)
    assert c.memory_ms == pytest.approx(4 * 0.030)  # ADD + MUL; the GEMM is compute-bound
    # min(GEMM, ADD) + min(ADD, MUL) = 4e5 + 2e5 bytes per occurrence
    assert c.intermediate_bytes == pytest.approx(6e5)
    # 6e5 B at 2039 GB/s = 2.9426e-4 ms per occurrence (< its 0.030 ms of memory-bound time)
    assert c.saved_ms_per_step == pytest.approx(6e5 / 2039e9 * 1e3)
    assert c.label == "ampere_sgemm_128x64_nn → vectorized_elementwise_kernel → vectorized_elementwise_kernel"
    assert "×4 on stream 7" in c.words() and "intermediate 600 kB" in c.words()


def test_the_saving_never_exceeds_the_memory_bound_time():
    fc, _ = _candidates(_chain_trace(), {GEMM: 1e12, ADD: 1e12, MUL: 1e12, RELU: 1e12})
    c = fc.candidates[0]
    assert c.intermediate_bytes == pytest.approx(2e12)
    assert c.saved_ms_per_step == pytest.approx(0.030)  # capped at ADD + MUL per occurrence


def test_unknown_bytes_say_unknown():
    fc, _ = _candidates(_chain_trace(), {GEMM: 1e6, ADD: 4e5})  # MUL's bytes unknown
    c = fc.candidates[0]
    assert c.intermediate_bytes is None and c.saved_ms_per_step is None
    assert "intermediate unknown" in c.words() and "saves unknown" in c.words()


def test_no_candidate_without_a_back_to_back_repeat():
    # 10 µs between GEMM and ADD (above fusion.max_gap_us): only ADD → MUL stays back to back
    fc, _ = _candidates(_chain_trace(gap_us=10), {GEMM: 1e6, ADD: 4e5, MUL: 2e5, RELU: 1e5})
    assert [c.kernels for c in fc.candidates] == [(ADD, MUL)]  # the GEMM is no longer back to back
    fc, _ = _candidates(_chain_trace(steps=2, second_stream_repeats=0), {GEMM: 1e6, ADD: 4e5, MUL: 2e5})
    assert fc.candidates == () and fc.found == 0  # 2 occurrences < fusion.min_repeats
    fc, _ = _candidates(
        _chain_trace(), {GEMM: 1e6, ADD: 4e5, MUL: 2e5}, Rules({"fusion.max_gap_us": 0.5, "fusion.min_repeats": 2})
    )
    assert fc.candidates == ()  # 0.5 µs: no two kernels of the trace are that close (1 µs at least)


def test_the_second_stream_counts_on_its_own():
    fc, _ = _candidates(_chain_trace(second_stream_repeats=3), {GEMM: 1e6, ADD: 4e5, MUL: 2e5})
    got = sorted((c.stream, c.kernels, c.occurrences) for c in fc.candidates)
    assert got == [(7, (GEMM, ADD, MUL), 4), (8, (ADD, MUL), 3)]


def test_occurrences_of_a_self_overlapping_pattern_are_counted_without_overlap():
    pos, pid = _without_overlap(np.array([0, 1, 2, 3, 7]), np.array([0, 0, 0, 0, 1]), 2)
    assert pos.tolist() == [0, 2, 7] and pid.tolist() == [0, 0, 1]
    pos, pid = _without_overlap(np.array([0, 5, 9]), np.array([0, 1, 0]), 3)  # no overlap: unchanged
    assert pos.tolist() == [0, 5, 9] and pid.tolist() == [0, 1, 0]
    # a pattern's overlapping occurrences dropped among others
    pos, pid = _without_overlap(np.array([0, 1, 2, 4, 5, 6, 9]), np.array([1, 0, 1, 0, 0, 1, 0]), 2)
    assert pos.tolist() == [0, 1, 2, 4, 6, 9] and pid.tolist() == [1, 0, 1, 0, 1, 0]


def test_without_overlap_matches_the_walk_on_random_occurrences():
    """Against a plain walk per pattern; the order by pattern against a 64-bit stable argsort."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        pos = np.sort(rng.choice(200, n, replace=False))
        pid = rng.integers(0, int(rng.integers(1, 6)), n)
        length = int(rng.integers(2, 5))
        keep, last = [], {}
        for i, (s, q) in enumerate(zip(pos.tolist(), pid.tolist())):
            if s - last.get(q, -length) >= length:
                keep.append(i)
                last[q] = s
        got_pos, got_pid = _without_overlap(pos, pid, length)
        assert got_pos.tolist() == pos[keep].tolist() and got_pid.tolist() == pid[keep].tolist()
        big = pid * 5000  # ids past 2**15: the 64-bit sort
        for ids in (pid, big):
            assert _by_pattern(ids).tolist() == np.argsort(ids.astype(np.int64), kind="stable").tolist()


def test_the_document_shows_the_section_only_when_present():
    t = _chain_trace()
    a = analyze_trace(t)  # the builder's kernels carry no shapes: bytes unknown
    doc = build_document("chain", [a], Rules())
    fc = doc["fusion_candidates"]
    assert fc is not None and fc["candidates"][0]["occurrences"] == 4
    assert fc["candidates"][0]["intermediate_bytes"] is None and fc["candidates"][0]["saved_ms_per_step"] is None
    assert fc["candidates"][0]["summary"] == a.fusion.candidates[0].words()  # one story
    for text in (render_text(doc), render_markdown(doc), render_html(doc)):
        assert "Fusion candidates" in text
    none = build_document("none", [analyze_trace(_chain_trace(steps=2, second_stream_repeats=0))], Rules())
    assert none["fusion_candidates"] is None
    for text in (render_text(none), render_markdown(none), render_html(none)):
        assert "Fusion candidates" not in text


def test_the_schema_doc_describes_the_section():
    doc = (ROOT / "docs" / "json-schema.md").read_text(encoding="utf-8")
    row = next(line for line in doc.splitlines() if line.startswith("| `fusion_candidates`"))
    a = analyze_trace(_chain_trace())
    fc = build_document("chain", [a], Rules())["fusion_candidates"]
    for key in [*fc, *fc["candidates"][0]]:
        assert f"`{key}" in row, key


# --- a bundled trace against a hand count of its raw events -----------------------------------------


_BASE = 1767189312000000000  # the raw trace's baseTimeNanoseconds: raw µs × 1000 + base = absolute ns


def _raw_kernels_in_window(trace, seg) -> list[dict]:
    """The raw trace's kernel events (all on stream 0) inside the judged window, by start."""
    with gzip.open(NORM, "rt") as f:
        raw = json.load(f)
    assert int(raw["baseTimeNanoseconds"]) == _BASE
    lo, hi = seg.starts[0] + trace.origin_ns, seg.ends[-1] + trace.origin_ns  # absolute ns
    ks = [e for e in raw["traceEvents"] if e.get("cat") == "kernel"]
    assert {e["args"]["stream"] for e in ks} == {0}
    ks = [e for e in ks if lo <= round(e["ts"] * 1000) + _BASE < hi]
    return sorted(ks, key=lambda e: e["ts"])


def test_norm_layers_trace_matches_a_hand_count_of_its_raw_events():
    """tl_mi300x_norm_layers_fwdbwd (MI300X, one stream, no ProfilerStep: one window, the warm tail
    of 7.5 ms the start-up ledger leaves; 127 kernels). Read off the raw events in that window (times
    in µs, gap = start − previous end):

    - ``layer_norm_grad_input_kernel<float, float, false>`` → ``GammaBetaBackwardSimpleCUDAKernel``
      back to back (gap 0.001) at 579056.052, 583785.588, 586298.979: 3 times; durations
      28.201 + 4.085, 28.842 + 4.446, 27.840 + 4.406 = 97.820 µs. The 2nd and 3rd go on into two
      ``CUDAFunctor_add`` kernels (gaps 0.001), the 1st into ``MIOpenBatchNormBwdSpatial`` 1128 µs
      later: the 4-kernel sequence is seen twice, under 3.
    - ``elementwise_kernel_manual_unroll`` → ``GammaBetaBackwardCUDAKernel1``: gaps 3.687, 0.001,
      3.326: 3 times. ``elementwise_kernel_manual_unroll`` → ``ComputeBackwardFusedParamsCUDAKernel``:
      gaps 3.446, 3.406, 3.366: 3 times; each followed by the next kernel 8–23 µs later.
    - ``cuComputePartGradGammaBeta`` → ``cuComputeGradGammaBeta`` (gap 0.001), the batch-norm
      statistics chains (``batch_norm_collect_statistics`` → … → ``batch_norm_transform_input``) and
      ``MIOpenBatchNormFwdTrainSpatialMeanVariance`` → ``…FinalMeanVariance`` → ``…Norm`` are back to
      back twice in the window only (their first runs belong to the cold pass before it).

    So three candidates, each seen 3 times, 97.820 µs for the first."""
    trace = open_traces(str(NORM)).traces[0]
    a = analyze_trace(trace)
    fc = a.fusion
    assert fc is not None and len(a.segmentation.steps) == 1

    ks = _raw_kernels_in_window(trace, a.segmentation)
    assert len(ks) == a.kernels.count == 127

    def pairs(first: str, second: str) -> list[tuple[dict, dict]]:
        return [
            (x, y)
            for x, y in zip(ks, ks[1:])
            if first in x["name"] and second in y["name"] and y["ts"] - (x["ts"] + x["dur"]) <= 5.0
        ]

    ln = pairs("layer_norm_grad_input_kernel<float, float, false>", "GammaBetaBackwardSimpleCUDAKernel")
    gb = pairs("elementwise_kernel_manual_unroll", "GammaBetaBackwardCUDAKernel1")
    cf = pairs("elementwise_kernel_manual_unroll", "ComputeBackwardFusedParamsCUDAKernel")
    assert [round(x["ts"], 3) for x, _ in ln] == [3545057579056.052, 3545057583785.588, 3545057586298.979]
    assert len(gb) == len(cf) == 3
    ln_us = sum(x["dur"] + y["dur"] for x, y in ln)
    assert ln_us == pytest.approx(97.820, abs=1e-3)

    got = {tuple(c.label.split(" → ")): c for c in fc.candidates}
    assert set(got) == {
        ("layer_norm_grad_input_kernel", "GammaBetaBackwardSimpleCUDAKernel"),
        ("elementwise_kernel_manual_unroll", "GammaBetaBackwardCUDAKernel1"),
        ("elementwise_kernel_manual_unroll", "ComputeBackwardFusedParamsCUDAKernel"),
    }
    assert all(c.occurrences == 3 and c.stream == 0 for c in fc.candidates)
    top = fc.candidates[0]
    assert top.label == "layer_norm_grad_input_kernel → GammaBetaBackwardSimpleCUDAKernel"
    assert top.ms_per_step == pytest.approx(ln_us / 1e3, abs=1e-6)
    assert top.memory_ms == pytest.approx(top.total_ms)  # both kernels memory-bound on the roofline
    # the launching operator (aten::native_layer_norm_backward) records its input dims
    assert top.shapes[0] is not None and top.shapes[0].startswith("[[8, 16, 32, 32]")
    # bytes: the cost model's, per kernel; the tensor passed on is at most the smaller kernel's traffic
    costs = kernel_costs(trace)
    absolute = trace.kernels.ts + trace.origin_ns

    def row(e: dict) -> int:
        (r,) = np.flatnonzero(absolute == round(e["ts"] * 1000) + _BASE)
        return int(r)

    inter = [min(costs.bytes[row(x)], costs.bytes[row(y)]) for x, y in ln]
    assert top.intermediate_bytes == pytest.approx(np.mean(inter), rel=1e-9)
    assert top.saved_ms_per_step == pytest.approx(sum(inter) / 5300e9 * 1e3, rel=1e-9)  # MI300X 5.3 TB/s


def test_a_fusion_finding_quotes_the_candidates():
    """The machine/bandwidth finding (fix fuse-memory-bound) quotes the top candidates as evidence."""
    trace = open_traces(str(ROOT / "tests" / "data" / "kineto" / "tracelens_h100_qwen_inference.json.gz")).traces[0]
    a = analyze_trace(trace)
    f = next(f for f in a.findings if f.id == "machine/bandwidth")
    quoted = [e for e in f.evidence if e.metric.startswith("fusion candidate: ")]
    assert [e.metric for e in quoted] == ["fusion candidate: " + c.words() for c in a.fusion.candidates[:3]]
    for c in a.fusion.candidates:
        assert c.saved_ms is None or c.saved_ms <= c.memory_ms + 1e-12
    rec = next(r for r in a.recommendations if r.id == "fuse-memory-bound")
    assert rec.finding == "machine/bandwidth"
