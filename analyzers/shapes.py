"""Batch shapes of a run, from the operator input shapes the profiler records with
``record_shapes=True`` (Kineto's ``Input Dims``), so two runs can be checked for comparability.

Only operators whose inputs carry the activations are read (linear/conv/norm/attention/loss):
their first input's leading dimension is the batch (or batch × sequence, flattened). Everything
else — optimizer ops on parameter shapes, views, copies — says little about the batch.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from trainscope.traces.model import Trace

# Operators whose first input is the activation tensor (batch leading).
BATCH_OPS = re.compile(
    r"^aten::(linear|conv[123]d|convolution|_convolution|cudnn_convolution|layer_norm|native_layer_norm|"
    r"batch_norm|native_batch_norm|cudnn_batch_norm|group_norm|rms_norm|scaled_dot_product_attention|"
    r"cross_entropy_loss|nll_loss|nll_loss_nd|mse_loss|lstm|gru)$"
)
# Matrix products as well: their input shapes change with the batch and the model width.
SHAPE_OPS = re.compile(BATCH_OPS.pattern[:-2] + r"|addmm|mm|bmm|matmul|embedding|embedding_bag)$")


@dataclass(frozen=True)
class ShapeSignature:
    recorded: bool  # the trace carries operator input shapes at all
    shapes: dict[str, frozenset[str]]  # operator → its distinct input shapes (repr of Input Dims)
    batch_dims: dict[int, int]  # leading dimension of the first input of BATCH_OPS → calls

    @property
    def batch_dim(self) -> int | None:
        """The most frequent leading dimension: the batch (× sequence length for flattened inputs)."""
        return max(self.batch_dims, key=lambda d: (self.batch_dims[d], d)) if self.batch_dims else None


@dataclass(frozen=True)
class ShapeComparison:
    status: str  # "same" | "differ" | "unknown"
    before_batch: int | None
    after_batch: int | None
    common_ops: int  # shape-bearing operators seen in both runs
    ops_with_other_shapes: list[str]  # of those, the ones whose set of input shapes differs
    example: str  # one differing operator, before → after, for the report
    note: str


# The first input's leading dimension in the repr of a list of shapes: "[[32, 3, 224, 224], [64]]".
# Read by a pattern, not ast.literal_eval: the rank executor calls this from threaded Dask workers,
# where CPython 3.11's literal_eval can fail at random ("AST constructor recursion depth mismatch",
# python/cpython#106905), and a pattern cannot be made to recurse or allocate by a crafted shape.
_LEADING = re.compile(r"\[\s*\[\s*(-?\d+)\s*[,\]]")


def _leading(dims_repr: str) -> int | None:
    m = _LEADING.match(dims_repr)
    return int(m.group(1)) if m else None


def shape_signature(trace: Trace) -> ShapeSignature:
    shapes: dict[str, frozenset[str]] = {}
    batch: Counter[int] = Counter()
    for op, per_shape in trace.input_dims.items():
        if not SHAPE_OPS.match(op):
            continue
        shapes[op] = frozenset(per_shape)
        if BATCH_OPS.match(op):
            for rep, calls in per_shape.items():
                lead = _leading(rep)
                if lead is not None:
                    batch[lead] += calls
    return ShapeSignature(bool(trace.input_dims), shapes, dict(batch))


def compare_shapes(before: ShapeSignature, after: ShapeSignature) -> ShapeComparison:
    if not before.recorded or not after.recorded:
        which = " and ".join(n for n, s in (("BEFORE", before), ("AFTER", after)) if not s.recorded)
        return ShapeComparison(
            "unknown",
            before.batch_dim,
            after.batch_dim,
            0,
            [],
            "",
            f"{which} recorded no operator input shapes (profile with record_shapes=True)",
        )
    common = sorted(set(before.shapes) & set(after.shapes))
    if not common:
        return ShapeComparison(
            "unknown",
            before.batch_dim,
            after.batch_dim,
            0,
            [],
            "",
            "the runs share no linear/conv/norm/matmul operators to compare shapes on",
        )
    differ = [op for op in common if before.shapes[op] != after.shapes[op]]
    example = ""
    if differ:
        op = max(differ, key=lambda o: len(before.shapes[o] ^ after.shapes[o]))
        sb, sa = before.shapes[op], after.shapes[op]
        example = f"{op}: {len(sb)} distinct input shapes before, {len(sa)} after, {len(sb & sa)} shared"
    b0, b1 = before.batch_dim, after.batch_dim
    why = ""
    if b0 is not None and b1 is not None and b0 != b1:
        why = f"batch (leading) dimension {b0} before, {b1} after: per-step times are not comparable"
    elif differ:
        lead = f"leading dimension {b0} in both, but " if b0 is not None and b0 == b1 else ""
        why = (
            f"{lead}{len(differ)} of {len(common)} linear/conv/norm/matmul operators ran on other "
            "input shapes (a different model size or sequence length?)"
        )
    if why:
        return ShapeComparison("differ", b0, b1, len(common), differ, example, why)
    return ShapeComparison(
        "same",
        b0,
        b1,
        len(common),
        [],
        "",
        f"the {len(common)} linear/conv/norm/matmul operators in both runs saw the same input shapes",
    )
