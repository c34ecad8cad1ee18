"""Read a memory timeline written by ``torch.profiler.profile.export_memory_timeline``.

Two JSON layouts (optionally gzipped), both plain data, so no pickle is involved:

* raw events (``*.raw.json.gz``): ``[[time_ns, action, bytes, category], …]`` — action 1
  pre-existing, 2 create, 3 increment-version (a pair: −bytes in the old category, +bytes in the
  new), 4 destroy (negative bytes); time −1 for pre-existing tensors;
* coalesced (``*.json`` / ``*.json.gz``): ``[times_us, sizes]`` where each ``sizes`` row is
  ``[0, bytes per category …]``.

Categories are PyTorch's ``_memory_profiler._CATEGORY_TO_INDEX`` order (torch 2.1 – 2.13).
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import numpy as np

from trainscope.collectors.errors import TraceError
from trainscope.collectors.readers import gunzip_limited
from trainscope.traces.memory_timeline import CATEGORIES  # noqa: F401 (the model; re-exported)
from trainscope.traces.memory_timeline import MemoryTimeline  # noqa: F401 (the model; re-exported)

DEFAULT_MAX_BYTES = 1 << 30


def load_memory_timeline(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> MemoryTimeline:
    if not os.path.isfile(path):
        raise TraceError(path, "no such file")
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            if gz:
                data, damaged, _ = gunzip_limited(f, path, 0, max_bytes=max_bytes + 1)
                if damaged:
                    raise TraceError(path, damaged)
            else:
                data = f.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise TraceError(path, f"cannot read: {getattr(e, 'strerror', None) or e}") from None
    if len(data) > max_bytes:
        raise TraceError(path, f"larger than the {max_bytes / 2**20:.0f} MiB limit for a memory timeline")
    if not data.strip():
        raise TraceError(path, "file is empty")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        # `trainscope memory` reads two kinds of file; a user with a damaged snapshot must not be
        # told only "not JSON"
        raise TraceError(
            path,
            "neither a CUDA memory snapshot (torch.cuda.memory._dump_snapshot pickle) nor a memory "
            f"timeline (export_memory_timeline JSON): not JSON ({type(e).__name__}: {str(e)[:80]})",
        ) from None
    try:
        if (
            isinstance(doc, list)
            and len(doc) == 2
            and all(isinstance(x, list) for x in doc)
            and (not doc[1] or isinstance(doc[1][0], list))
            and (not doc[0] or not isinstance(doc[0][0], list))
        ):
            return _coalesced(path, doc)
        if isinstance(doc, list) and all(isinstance(e, list) and len(e) == 4 for e in doc):
            return _raw(path, doc)
    except (TypeError, ValueError, OverflowError, IndexError) as e:
        raise TraceError(path, f"malformed memory timeline ({type(e).__name__}: {e})") from None
    raise TraceError(
        path,
        "not a memory timeline: expected export_memory_timeline output "
        "([[time, action, bytes, category], …] or [times, sizes])",
    )


def _raw(path: str, events: list[Any]) -> MemoryTimeline:
    if not events:
        raise TraceError(path, "memory timeline holds no events")
    a = np.asarray(events, dtype=np.int64)
    t, cat, nbytes = a[:, 0], a[:, 3], a[:, 2]
    if ((cat < 0) | (cat >= len(CATEGORIES))).any():
        raise ValueError("category index out of range")
    real = t[t >= 0]
    t0 = int(real.min()) if real.size else 0
    t = np.where(t < 0, t0, t) // 1000  # ns → µs, as the coalesced export does
    order = np.argsort(t, kind="stable")
    t, cat, nbytes = t[order], cat[order], nbytes[order]
    delta = np.zeros((len(t), len(CATEGORIES)), np.int64)
    delta[np.arange(len(t)), cat] = nbytes
    cum = np.cumsum(delta, axis=0)
    last = np.r_[t[1:] != t[:-1], True]  # one row per time point, after all its events
    return MemoryTimeline(path, "raw", t[last], cum[last])


def _coalesced(path: str, doc: list[Any]) -> MemoryTimeline:
    times, sizes = doc
    if not times or len(times) != len(sizes):
        raise ValueError("times and sizes differ in length")
    s = np.asarray(sizes, dtype=np.int64)
    if s.ndim != 2 or s.shape[1] != len(CATEGORIES) + 1:
        raise ValueError(f"expected {len(CATEGORIES) + 1} columns per sizes row, got {s.shape[1:] or 'ragged rows'}")
    return MemoryTimeline(path, "coalesced", np.asarray(times, dtype=np.int64), s[:, 1:])
