"""Backward nodes under their forward module (analyzers/trace/module_tree.py, :func:`forward_ops`): a forward
operator and the autograd node it created share Kineto's "Sequence number"; the node's "Fwd thread id"
names the forward thread. A mapped node hangs under the mirror of its forward path in ``backward``."""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest

from tests.test_module_tree import _kernel
from tests.test_module_tree import _with_frames
from trainscope.analyzers.trace.analysis import analyze_trace
from trainscope.analyzers.trace.module_tree import _last_before
from trainscope.analyzers.trace.module_tree import module_tree
from trainscope.collectors.inputs import open_traces
from trainscope.collectors.kineto import load_kineto_in_memory
from trainscope.traces.builder import TraceBuilder
from trainscope.traces.model import Thread

DATA = pathlib.Path(__file__).parent / "data"
RESNET = DATA / "kineto" / "tracelens_mi300x_resnet_ckpt.json.gz"  # ResNet training, DDP, checkpointing
AG = "autograd::engine::evaluate_function: "


def _two_modules(with_seq: bool = True):
    """One step (0 … 1 ms). Forward (thread 0): ``## forward ##`` holding ``A_0`` (aten::linear ⊃
    aten::addmm, seq 10; kernel 10 µs) and ``B_0`` (aten::conv2d, seq 11; kernel 15 µs); between the
    modules an operator without a node also carries seq 11 (the counter moves only when a node is
    made), in no module. Backward (thread 1, profiler thread id 7): ConvolutionBackward0 (seq 11,
    kernel 30 µs), AddmmBackward0 (seq 10, kernel 20 µs), AccumulateGrad (no seq, kernel 5 µs),
    MulBackward0 (seq 99: no forward operator, kernel 4 µs)."""
    b = TraceBuilder()
    b.step(1, 0, 1_000_000)
    b.annotation("## forward ##", 10_000, 400_000)
    seq: list[int] = []
    fwd: list[int] = []
    on_bwd: list[int] = []

    def op(name: str, ts: int, dur: int, s: int, f: int, bwd: bool = False) -> None:
        b.cpu_op(name, ts, dur)
        seq.append(s)
        fwd.append(f)
        if bwd:
            on_bwd.append(len(seq) - 1)

    op("aten::linear", 30_000, 50_000, 10, 0)
    op("aten::addmm", 35_000, 40_000, 10, 0)
    _kernel(b, "fwd_gemm", 40_000, 100_000, 10_000)
    op("aten::detach", 155_000, 2_000, 11, 0)
    op("aten::conv2d", 170_000, 60_000, 11, 0)
    _kernel(b, "fwd_conv", 180_000, 120_000, 15_000)
    launches_bwd = []
    for name, ts, s, kname, dur in [
        ("ConvolutionBackward0", 500_000, 11, "bwd_conv", 30_000),
        ("AddmmBackward0", 560_000, 10, "bwd_gemm", 20_000),
        ("torch::autograd::AccumulateGrad", 620_000, -1, "acc", 5_000),
        ("MulBackward0", 660_000, 99, "bwd_mul", 4_000),
    ]:
        op(AG + name, ts, 30_000, s, 7 if s >= 0 else -1, bwd=True)
        launches_bwd.append(len(b.runtime))
        _kernel(b, kname, ts + 5_000, ts + 200_000, dur)
    t = _with_frames(b, [("nn.Module: A_0", 20_000, 100_000, 0), ("nn.Module: B_0", 160_000, 100_000, 0)])
    t.cpu_ops.thread[np.array(on_bwd)] = 1
    t.runtime.thread[np.array(launches_bwd)] = 1
    oi = t.op_inputs
    if with_seq:
        oi = dataclasses.replace(oi, cpu_sequence=np.array(seq, np.int64), cpu_fwd_thread=np.array(fwd, np.int64))
    return dataclasses.replace(t, threads=[*t.threads, Thread("1", "2", "pt_autograd_0")], op_inputs=oi)


def _tree(t):
    return module_tree(t, (np.array([0]), np.array([1_000_000])), 0)


def test_backward_nodes_hang_under_their_forward_module():
    tree = _tree(_two_modules())
    bwd = tree.find("backward")
    assert bwd is not None
    assert {c.name: c.gpu_ns_inclusive for c in bwd.children} == {
        "B_0": 30_000,
        "A_0": 20_000,
        "torch::autograd::AccumulateGrad": 5_000,
        "MulBackward0": 4_000,
    }
    conv = tree.find("backward", "B_0", "ConvolutionBackward0")
    gemm = tree.find("backward", "A_0", "AddmmBackward0")
    assert conv is not None and conv.gpu_ns_exclusive == 30_000 and conv.top_kernels[0][0] == "bwd_conv"
    assert gemm is not None and gemm.gpu_ns_exclusive == 20_000 and gemm.top_kernels[0][0] == "bwd_gemm"
    mirror = tree.find("backward", "B_0")
    assert mirror.kind == "module" and mirror.gpu_ns_exclusive == 0 and mirror.count == 1 and not mirror.autograd
    # the forward side is as before, and the window is still partitioned
    assert tree.find("forward", "A_0").gpu_ns_inclusive == 10_000
    assert tree.find("forward", "B_0").gpu_ns_inclusive == 15_000
    assert sum(n.gpu_ns_exclusive for _, n in tree.walk()) == tree.gpu_ns == 84_000
    for _, n in tree.walk():
        assert n.gpu_ns_inclusive == n.gpu_ns_exclusive + sum(c.gpu_ns_inclusive for c in n.children)
    assert any(x.startswith("2 of 4 backward nodes, 84.7% of their GPU time") for x in tree.notes), tree.notes


def test_without_sequence_numbers_the_nodes_keep_their_names():
    tree = _tree(_two_modules(with_seq=False))
    assert _names(tree) == ["AddmmBackward0", "ConvolutionBackward0", "MulBackward0", "torch::autograd::AccumulateGrad"]
    assert "no sequence numbers" in tree.notes[-1]


def test_nodes_whose_numbers_no_forward_operator_holds_keep_their_names():
    """Operators with a "Fwd thread id" above 0 are backward ones, never a node's forward operator."""
    t = _two_modules()
    fwd = t.op_inputs.cpu_fwd_thread.copy()
    fwd[:4] = 3  # the four forward operators now read as backward operators of thread 3
    t = dataclasses.replace(t, op_inputs=dataclasses.replace(t.op_inputs, cpu_fwd_thread=fwd))
    tree = _tree(t)
    assert _names(tree) == ["AddmmBackward0", "ConvolutionBackward0", "MulBackward0", "torch::autograd::AccumulateGrad"]
    assert "none of their forward operators" in tree.notes[-1]


def test_the_forward_thread_is_the_one_holding_most_numbers_and_a_tie_maps_nothing():
    """The profiler's thread id is tied to the trace thread whose forward operators hold the most of
    its nodes' numbers; two threads holding as many: the trace does not tell, nothing is mapped."""
    t = _two_modules()
    t.cpu_ops.thread[2] = 2  # aten::detach (seq 11) on another thread: thread 0 still holds 10 and 11
    assert _names(_tree(t))[:2] == ["A_0", "B_0"]
    t = _two_modules()
    t.cpu_ops.thread[[2, 3]] = 2  # seq 11's operators there, seq 10's on thread 0: one number each
    assert "A_0" not in _names(_tree(t)) and "AddmmBackward0" in _names(_tree(t))


def _names(tree):
    return sorted(c.name for c in tree.find("backward").children)


def test_last_before_takes_the_latest_in_time_not_in_row_order():
    i = np.array
    got = _last_before(i([1, 2, 1]), i([50, 10, 5]), i([1, 1, 2, 3, 1]), i([40, 60, 5, 100, 5]))
    assert got.tolist() == [2, 0, -1, -1, 2]


# --- the bundled ResNet training trace (activation checkpointing, DDP) -----------------------------


@pytest.fixture(scope="module")
def resnet():
    t = open_traces(str(RESNET)).traces[0]
    return t, analyze_trace(t)


def test_the_reader_carries_sequence_numbers():
    """1,344 operators carry a "Sequence number", 426 of them (213 autograd nodes and the 213 operators
    they run) a "Fwd thread id" above 0; the streamed and the in-memory reader agree."""
    t = open_traces(str(RESNET)).traces[0]
    oi = t.op_inputs
    assert len(oi.cpu_sequence) == len(oi.cpu_fwd_thread) == len(t.cpu_ops)
    assert int((oi.cpu_sequence >= 0).sum()) == 1344 and int((oi.cpu_fwd_thread > 0).sum()) == 426
    m = load_kineto_in_memory(str(RESNET)).op_inputs
    assert m.cpu_sequence.tolist() == oi.cpu_sequence.tolist()
    assert m.cpu_fwd_thread.tolist() == oi.cpu_fwd_thread.tolist()


def test_resnet_share_of_backward_mapped(resnet):
    """Of the 399 backward nodes, 210 hang under ResNet_0's mirror; the 186 AccumulateGrad nodes (no
    sequence number; they hold the DDP all-reduce) and 3 whose forward operator ran outside every module
    keep their names. Mapped: 4,432.014 µs of the backward's 20,440.531 µs of GPU time (21.7%)."""
    _, a = resnet
    tree = a.tree
    bwd = tree.find("backward")
    mirror = tree.find("backward", "ResNet_0")
    assert mirror is not None and mirror.kind == "module"
    assert bwd.gpu_ns_inclusive == 20_440_531 and mirror.gpu_ns_inclusive == 4_432_014
    assert any(x.startswith("210 of 399 backward nodes, 21.7% of their GPU time") for x in tree.notes), tree.notes
    # the mirror folds as the forward does
    fwd_blocks = tree.find("forward", "ResNet_0", "CheckpointWrapper_0…3", "Sequential_0…5", "BasicBlock_0…7")
    bwd_blocks = tree.find("backward", "ResNet_0", "CheckpointWrapper_0…3", "Sequential_0…5", "BasicBlock_0…7")
    assert fwd_blocks is not None and bwd_blocks is not None and bwd_blocks.instances == fwd_blocks.instances == 8
    assert tree.find("backward", "ResNet_0", "CheckpointWrapper_0…3", "Sequential_0…5", "BasicBlock_0…7", "Conv2d_1…19")
    assert tree.find("backward", "torch::autograd::AccumulateGrad").gpu_ns_inclusive == 15_996_639


def test_resnet_stem_batchnorm_backward_by_hand(resnet):
    """``backward › ResNet_0 › BatchNorm2d_0``, counted from the raw JSON without trainscope: the three
    ``NativeBatchNormBackward0`` nodes with "Fwd thread id" 1 whose last earlier operator on thread 542
    with the same "Sequence number" (and "Fwd thread id" 0: aten::native_batch_norm) lies innermost in
    ``nn.Module: BatchNorm2d_0`` have sequence numbers 1126, 1201 and 1276 (steps 15, 16, 17). Each
    launched one ``batch_norm_backward_kernel<c10::BFloat16, …>`` (hipLaunchKernel on thread 639): seq
    1126's ran 395.796 µs and started in step 16's window (the GPU runs ≈ 24 ms behind); those of 1201
    (395.836 µs) and 1276 (405.997 µs) started after the last step window, so they are not in the windows.
    In the windows: 395.796 µs, 3 nodes."""
    _, a = resnet
    node = a.tree.find("backward", "ResNet_0", "BatchNorm2d_0", "NativeBatchNormBackward0")
    assert node is not None and node.count == 3 and node.gpu_ns_inclusive == 395_796
    assert a.tree.find("backward", "ResNet_0", "BatchNorm2d_0").gpu_ns_exclusive == 0
    # the forward side of the same module, for a backward/forward ratio
    assert a.tree.find("forward", "ResNet_0", "BatchNorm2d_0") is not None


def test_resnet_without_sequence_numbers_is_todays_tree(resnet):
    """Without the columns (a trace that records none), the backward is as before the mapping: autograd's
    node names with the times measured then."""
    t, a = resnet
    t2 = dataclasses.replace(
        t,
        op_inputs=dataclasses.replace(
            t.op_inputs, cpu_sequence=np.empty(0, np.int64), cpu_fwd_thread=np.empty(0, np.int64)
        ),
    )
    tree = module_tree(t2, (a.segmentation.starts, a.segmentation.ends), a.device)
    got = [(c.name, c.count, c.gpu_ns_inclusive) for c in tree.find("backward").children][:6]
    assert got == [
        ("torch::autograd::AccumulateGrad", 186, 15_996_639),
        ("ConvolutionBackward0", 60, 1_847_515),
        ("ReluBackward0", 51, 1_492_570),
        ("NativeBatchNormBackward0", 60, 983_015),
        ("MaxPool2DWithIndicesBackward0", 3, 79_518),
        ("AddmmBackward0", 3, 23_437),
    ]
    assert tree.find("backward").gpu_ns_inclusive == a.tree.find("backward").gpu_ns_inclusive
