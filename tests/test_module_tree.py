"""The module tree (analyzers/trace/module_tree.py): synthetic traces for the rules, bundled traces for the
numbers.

The labeled checks' expected shares were counted from the raw events before the tree was run on
them, by a naive reference (Python loops over the JSON/SQLite rows, no trainscope code): for every
GPU operation (kernel, memcpy, memset) on the analyzed GPU starting in a ``ProfilerStep#N`` range
(Nsight, one iteration: the span of GPU work), its launch by correlation id, every recorded range on
the launching thread that holds the launch call, and the phase — the outermost range named like
forward/backward/optimizer among them, else the phase range open on any thread at the launch (or at
the start of its outermost range), else backward for an autograd node; no launch recorded: outside.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

import numpy as np
import pytest

from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.analysis import analyze_trace
from trainscope.analyzers.trace.module_tree import OUTSIDE
from trainscope.analyzers.trace.module_tree import folded_name
from trainscope.analyzers.trace.module_tree import module_tree
from trainscope.collectors.inputs import open_traces
from trainscope.reports.document import build_document
from trainscope.reports.document import tree_rows
from trainscope.traces.builder import TraceBuilder
from trainscope.traces.model import PythonFrames

DATA = pathlib.Path(__file__).parent / "data"
QWEN = DATA / "kineto" / "tracelens_h100_qwen_inference.json.gz"  # transformer, inference, nn.Module ranges
RESNET = DATA / "kineto" / "tracelens_mi300x_resnet_ckpt.json.gz"  # ResNet training, DDP, checkpointing
CS336 = DATA / "nsys" / "cs336_small_train_step_a100.sqlite"  # transformer training step, NVTX ranges


# --- synthetic: the rules -------------------------------------------------------------------------


def _with_frames(b: TraceBuilder, frames: list[tuple[str, int, int, int]]):
    """``b``'s trace with ``nn.Module`` frames (name, ts, dur, thread) added."""
    t = b.build()
    strings = list(t.strings)
    idx = []
    for name, *_ in frames:
        if name not in strings:
            strings.append(name)
        idx.append(strings.index(name))
    pf = PythonFrames(
        ts=np.array([f[1] for f in frames]),
        dur=np.array([f[2] for f in frames]),
        thread=np.array([f[3] for f in frames]),
        name=np.array(idx),
    )
    return dataclasses.replace(t, strings=strings, python_frames=pf)


def _kernel(b: TraceBuilder, name: str, host_ts: int, gpu_ts: int, dur: int) -> None:
    c = b.launch(host_ts, 1_000)
    b.kernel(name, gpu_ts, dur, c)


def _layers_trace():
    """One step: forward range holding Model_0 > Layer_0…3 (each one kernel, layer 2 the slowest), a
    kernel launched in the forward range outside any module, a backward range with one kernel, a kernel
    launched outside every range, and an HtoD copy launched outside every phase."""
    b = TraceBuilder()
    b.step(1, 0, 1_000_000)
    b.annotation("## forward ##", 10_000, 400_000)
    b.annotation("## backward ##", 500_000, 200_000)
    frames = [("nn.Module: Model_0", 20_000, 300_000, 0)]
    gpu = 100_000
    for i in range(4):
        frames.append((f"nn.Module: Layer_{i}", 30_000 + i * 60_000, 50_000, 0))
        dur = 40_000 if i == 2 else 10_000
        _kernel(b, "gemm", 40_000 + i * 60_000, gpu, dur)
        gpu += dur
    _kernel(b, "elementwise", 350_000, gpu, 5_000)  # in forward, in no module
    _kernel(b, "bwd_gemm", 550_000, 600_000, 30_000)
    _kernel(b, "stray", 800_000, 850_000, 7_000)  # outside every range
    c = b.launch(900_000, 1_000, "cudaMemcpyAsync")
    b.copy(910_000, 3_000, 1 << 20, c)
    return _with_frames(b, frames)


def test_exclusive_times_partition_the_window_and_blocks_fold():
    t = _layers_trace()
    tree = module_tree(t, (np.array([0]), np.array([1_000_000])), 0)
    assert tree is not None
    total = 4 * 10_000 + 30_000 + 5_000 + 30_000 + 7_000 + 3_000
    assert tree.gpu_ns == total
    assert sum(n.gpu_ns_exclusive for _, n in tree.walk()) == total
    assert sum(r.gpu_ns_inclusive for r in tree.roots) == total
    assert [r.name for r in tree.roots] == ["forward", "backward", "data-to-device", OUTSIDE]
    fwd = tree.roots[0]
    assert fwd.gpu_ns_inclusive == 75_000 and fwd.gpu_ns_exclusive == 5_000
    (model,) = fwd.children
    assert model.name == "Model_0" and model.kind == "module"
    (layers,) = model.children  # Layer_0 … Layer_3: one folded node
    assert layers.name == "Layer_0…3" and layers.instances == 4 and layers.count == 4
    assert layers.spread_ns == (10_000, 10_000, 40_000) and layers.slowest == "Layer_2"
    assert layers.top_kernels == [("gemm", 4, 70_000)]
    assert tree.roots[1].gpu_ns_inclusive == 30_000
    assert tree.roots[2].gpu_ns_inclusive == 3_000  # the HtoD copy outside every phase
    assert tree.roots[3].gpu_ns_inclusive == 7_000


def test_work_on_another_thread_goes_to_the_phase_open_at_its_launch():
    b = TraceBuilder()
    b.step(1, 0, 1_000_000)
    b.annotation("## backward ##", 100_000, 500_000)  # main thread
    c = b.launch(200_000, 1_000)  # autograd's thread: no range around the launch
    b.kernel("bwd", 300_000, 20_000, c)
    t = b.build()
    t.runtime.thread[:] = 1
    tree = module_tree(t, (np.array([0]), np.array([1_000_000])), 0)
    assert tree is not None and [r.name for r in tree.roots] == ["backward"]
    assert tree.roots[0].gpu_ns_inclusive == 20_000


def test_a_module_wrapping_the_forward_range_is_left_out():
    b = TraceBuilder()
    b.step(1, 0, 1_000_000)
    b.annotation("DistributedDataParallel.forward", 20_000, 300_000)
    _kernel(b, "k", 100_000, 200_000, 10_000)
    t = _with_frames(b, [("nn.Module: DistributedDataParallel_0", 10_000, 400_000, 0)])
    tree = module_tree(t, (np.array([0]), np.array([1_000_000])), 0)
    assert tree is not None and [r.name for r in tree.roots] == ["forward"]


def test_same_name_repeats_name_the_slowest_occurrence():
    b = TraceBuilder()
    b.step(1, 0, 1_000_000)
    for i in range(3):
        b.annotation("transformer block", 10_000 + i * 100_000, 90_000)
        _kernel(b, "k", 20_000 + i * 100_000, 400_000 + i * 50_000, 30_000 if i == 1 else 10_000)
    tree = module_tree(b.build(), (np.array([0]), np.array([1_000_000])), 0)
    assert tree is not None
    (blk,) = tree.roots
    assert blk.name == "transformer block" and blk.count == 3 and blk.slowest == "#2"


def test_folded_name():
    assert folded_name(["layers.0.attn", "layers.11.attn", "layers.3.attn"]) == "layers.0…11.attn"
    assert folded_name(["Block 3"]) == "Block 3"
    assert folded_name(["w1", "w3", "w2"]) == "w1…3"


def test_work_without_ranges_is_outside():
    b = TraceBuilder()
    b.step(1, 0, 1_000_000)
    _kernel(b, "k", 10_000, 20_000, 5_000)
    tree = module_tree(b.build(), (np.array([0]), np.array([1_000_000])), 0)
    assert tree is not None and [(r.name, r.gpu_ns_inclusive) for r in tree.roots] == [(OUTSIDE, 5_000)]


def test_no_ranges_and_no_work_is_no_tree():
    b = TraceBuilder()
    b.cpu_op("aten::add", 0, 10)
    assert module_tree(b.build(), (np.array([0]), np.array([100])), 0) is None


# --- bundled traces: the numbers ------------------------------------------------------------------


@pytest.fixture(scope="module")
def analyzed():
    cache: dict[pathlib.Path, tuple] = {}

    def get(path: pathlib.Path):
        if path not in cache:
            t = open_traces(str(path)).traces[0]
            cache[path] = (t, analyze_trace(t))
        return cache[path]

    return get


def _window_gpu_ns(t, a) -> int:
    """GPU time of the operations starting in the steps on the analyzed GPU, from the columns."""
    ws, we = a.segmentation.starts, a.segmentation.ends
    tot = 0
    for tab in (t.kernels, t.copies, t.memsets):
        inside = np.zeros(len(tab), bool)
        for s, e in zip(ws, we):
            inside |= (tab.ts >= s) & (tab.ts < e)
        tot += int(tab.dur[inside & (tab.device == a.device)].sum())
    return tot


@pytest.mark.parametrize("path", [QWEN, RESNET, CS336], ids=lambda p: p.name)
def test_nodes_sum_to_the_steps_gpu_time(analyzed, path):
    t, a = analyzed(path)
    tree = a.tree
    assert tree is not None
    want = _window_gpu_ns(t, a)
    assert abs(sum(r.gpu_ns_inclusive for r in tree.roots) - want) <= 0.01 * want
    assert abs(sum(n.gpu_ns_exclusive for _, n in tree.walk()) - want) <= 0.01 * want
    for _, n in tree.walk():  # inclusive = own + children's, at every node
        assert n.gpu_ns_inclusive == n.gpu_ns_exclusive + sum(c.gpu_ns_inclusive for c in n.children)


def test_training_traces_have_the_phases_first(analyzed):
    _, a = analyzed(CS336)
    assert [r.name for r in a.tree.roots][:3] == ["forward", "backward", "optimizer"]
    _, a = analyzed(RESNET)
    assert [r.name for r in a.tree.roots][:3] == ["forward", "backward", "optimizer"]


def test_repeated_blocks_are_folded(analyzed):
    _, a = analyzed(RESNET)
    blocks = [n for _, n in a.tree.walk() if n.name.startswith("BasicBlock_")]
    assert blocks and max(n.instances for n in blocks) == 8  # ResNet-18: BasicBlock_0 … _7
    _, a = analyzed(QWEN)
    layer = a.tree.find("Qwen2Model_0", "Qwen2DecoderLayer_0…23")
    assert layer is not None and layer.instances == 24 and layer.count == 24
    assert layer.slowest is not None and layer.slowest.startswith("Qwen2DecoderLayer_")
    _, a = analyzed(CS336)
    sdpa = a.tree.find("forward", "scaled dot product attention")
    assert sdpa is not None and sdpa.count == 12 and sdpa.instances == 12


# Labeled checks: (trace, the nodes' parent path, [(node, expected % of the window's GPU time)]),
# counted from the raw events (module docstring) before running the tree.
LABELED = [
    (
        QWEN,
        ("Qwen2Model_0", "Qwen2DecoderLayer_0…23"),
        [("Qwen2Attention_0…23", 34.28), ("Qwen2MLP_0…23", 17.02), ("Qwen2RMSNorm_0…47", 15.65)],
    ),
    (CS336, (), [("backward", 62.18), ("forward", 29.41), ("optimizer", 7.97)]),
    (RESNET, (), [(OUTSIDE, 58.49), ("backward", 37.52), ("forward", 3.99)]),
]


@pytest.mark.parametrize("path,parent,expected", LABELED, ids=lambda x: getattr(x, "name", None))
def test_labeled_top3(analyzed, path, parent, expected):
    _, a = analyzed(path)
    tree = a.tree
    level = tree.roots if not parent else tree.find(*parent).children
    top3 = sorted(level, key=lambda n: -n.gpu_ns_inclusive)[:3]
    assert [n.name for n in top3] == [name for name, _ in expected]
    for n, (_, pct) in zip(top3, expected):
        assert abs(100.0 * n.gpu_ns_inclusive / tree.gpu_ns - pct) <= 2.0


def test_document_and_renderers_show_the_top_of_the_tree(analyzed):
    from trainscope.reports.html import render_html
    from trainscope.reports.markdown import render_markdown
    from trainscope.reports.text import render_text

    _, a = analyzed(CS336)
    doc = build_document(str(CS336), [a], Rules())
    tree = doc["tree"]
    assert tree["nodes"] and len(tree["nodes"]) <= 40
    assert [n["name"] for n in tree["nodes"] if n["depth"] == 0][:3] == ["forward", "backward", "optimizer"]
    for n in tree["nodes"]:  # every kept node's parent is kept, and listed before it
        assert (n["parent"] is None) == (n["depth"] == 0)
        if n["parent"] is not None:
            assert tree["nodes"][n["parent"]]["path"] == n["path"][:-1]
    rows = tree_rows(doc)
    assert rows[0]["label"] == "forward" and any(not r["first_level"] for r in rows)
    heaviest = next(r for r in rows if not r["first_level"])
    assert "BmmBackward0" in heaviest["label"]
    for out in (render_text(doc), render_markdown(doc), render_html(doc)):
        assert "Where in the model" in out and "BmmBackward0" in out


def test_fast_on_the_largest_bundled_trace():
    """Measured: ≈ 10 ms on the largest bundled trace (162 k Python frames); ≈ 1 s on a synthetic
    trace of a million kernels and launches, 100 k module frames and 3 M operators. The bound here is
    loose (a loaded CI machine): a per-event Python loop would take seconds."""
    t = open_traces(str(DATA / "labeled" / "steady" / "tl_mi300x_xdit_flux_compile_capture_one_replay.json.gz")).traces[
        0
    ]
    from trainscope.analyzers.trace.steps import segment_steps

    seg = segment_steps(t)
    t0 = time.perf_counter()
    module_tree(t, (seg.starts, seg.ends), None)
    assert time.perf_counter() - t0 < 2.0
