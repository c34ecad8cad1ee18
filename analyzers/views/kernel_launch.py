"""What launched a kernel: the runtime call with its correlation id (the id CUPTI gives the launch
and the kernel alike) and the framework operator around that call on the launching thread, with
the operator's recorded input shapes (``record_shapes=True``) and Kineto's External id. The
timeline's detail pane shows it beside the kernel, as Perfetto does with its flow arrows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.traces.model import Column
from trainscope.traces.model import Trace


@dataclass(frozen=True)
class KernelLaunch:
    stream: int
    device: int
    correlation: int
    runtime_call: str | None  # cudaLaunchKernel, hipLaunchKernel, … (None: not in the trace)
    operator: str | None  # the innermost framework operator around the launch
    outer_operator: str | None  # the outermost one (the module-level call), when different
    input_dims: str | None  # the operator's "Input Dims" as recorded
    external_id: int | None  # Kineto's External id of the kernel (-1/None: absent)


def kernel_launch(trace: Trace, start_ns: int, name: str, device: int | None = None) -> KernelLaunch | None:
    """The launch of the kernel called ``name`` that starts at ``start_ns`` (the trace's clock), or None."""
    k = trace.kernels
    try:
        sid = trace.strings.index(name)
    except ValueError:
        return None
    rows = np.flatnonzero((k.ts == start_ns) & (k.name == sid) & ((k.device == device) if device is not None else True))
    if not len(rows):
        return None
    r = int(rows[0])
    corr = int(k.correlation[r])
    rt = trace.runtime
    call = op = outer = dims = None
    hit = np.flatnonzero(rt.correlation == corr) if corr >= 0 and len(rt) else np.empty(0, np.int64)
    if len(hit):
        c = int(hit[0])
        call = trace.strings[int(rt.name[c])]
        o = trace.cpu_ops
        t0, t1, th = int(rt.ts[c]), int(rt.ts[c] + rt.dur[c]), int(rt.thread[c])
        around: Column = (
            np.flatnonzero((o.thread == th) & (o.ts <= t0) & (o.ts + o.dur >= t1)) if len(o) else np.empty(0, np.int64)
        )
        if len(around):
            inner = int(around[np.argmin(o.dur[around])])
            top = int(around[np.argmax(o.dur[around])])
            op = trace.strings[int(o.name[inner])]
            outer = trace.strings[int(o.name[top])] if top != inner else None
            sig = trace.op_inputs.cpu_signature
            if len(sig) > inner and sig[inner] >= 0:
                dims = str(trace.op_inputs.signatures[int(sig[inner])][0])
    ext = trace.op_inputs.kernel_external
    external = int(ext[r]) if len(ext) > r and ext[r] >= 0 else None
    return KernelLaunch(int(k.stream[r]), int(k.device[r]), corr, call, op, outer, dims, external)
