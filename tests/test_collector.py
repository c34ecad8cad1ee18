"""The Kineto collector on real traces from every format era."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from tests.conftest import ALL_KINETO
from tests.conftest import KINETO
from tests.conftest import load
from tests.conftest import raw_document
from trainscope.collectors import open_traces
from trainscope.traces.model import COPY_KINDS
from trainscope.traces.model import MEMORY_KINDS


@pytest.mark.parametrize("name", ALL_KINETO)
def test_every_shared_trace_loads_with_sane_columns(name):
    t = load(name)
    assert len(t.cpu_ops) + len(t.annotations) > 0
    for table in (t.kernels, t.copies, t.memsets, t.runtime, t.cpu_ops, t.annotations):
        assert (table.dur >= 0).all()
        assert (table.ts >= 0).all()  # relative to the trace origin
    lo, hi = t.span_ns
    assert lo == 0 and hi > 0


def test_counts_match_the_raw_events():
    # Independent count straight from the JSON: every kernel/memcpy/memset event must arrive.
    doc = raw_document("hta_a100_control.json.gz")
    cats = [e.get("cat") for e in doc["traceEvents"] if e.get("ph") == "X"]
    t = load("hta_a100_control.json.gz")
    assert len(t.kernels) == cats.count("kernel") == 8568
    assert len(t.copies) == cats.count("gpu_memcpy")
    assert len(t.memsets) == cats.count("gpu_memset")
    assert len(t.runtime) == cats.count("cuda_runtime")
    assert t.rank == 3 and t.devices[3].name == "NVIDIA A100-PG509-200"
    assert t.devices[3].total_memory == 42505273344 and t.devices[3].sm_count == 108


def test_2021_capitalized_categories_and_step_operators():
    t = load("resnet50_v100_num_workers_0.pt.trace.json.gz")
    assert len(t.kernels) == 8772 and len(t.copies) == 12 and len(t.memsets) == 312
    steps = [t.strings[i] for i in t.annotations.name]
    assert steps == [f"ProfilerStep#{n}" for n in range(5, 11)]  # recorded as Operator events in 2021
    # "Memcpy HtoD (Pageable -> Device)" decodes into kind and memory kinds
    htod = (t.copies.kind == COPY_KINDS.index("HtoD")) & (t.copies.src == MEMORY_KINDS.index("pageable"))
    assert htod.sum() > 0
    assert t.devices[0].compute_capability == "7.0"


def test_float_timestamps_keep_nanoseconds_and_base_time():
    t = load("tracelens_h100_qwen_inference.json.gz")
    doc = raw_document("tracelens_h100_qwen_inference.json.gz")
    k0 = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    i = int(np.flatnonzero(t.kernels.dur == round(k0["dur"] * 1000))[0])
    assert t.kernels.dur[i] == round(k0["dur"] * 1000)  # e.g. 18.112 µs -> 18112 ns, not 18000
    assert t.kernels.dur[i] % 1000 != 0
    assert t.origin_ns > doc["baseTimeNanoseconds"]
    assert t.metadata.get("with_flops") is not None  # extra top-level keys are kept, not fatal


def test_rocm_trace():
    t = load("tracelens_mi300x_resnet_ckpt.json.gz")
    assert {d.vendor for d in t.devices} == {"amd"}
    assert any(t.strings[i].startswith("hip") for i in np.unique(t.runtime.name))
    mi250 = load("hta_mi250_minitoy_train.json.gz")
    assert len(mi250.kernels) == 14 and mi250.devices[0].vendor == "amd"


def _write(tmp_path, name, doc, gz=True):
    p = tmp_path / name
    data = json.dumps(doc).encode()
    p.write_bytes(gzip.compress(data) if gz else data)
    return str(p)


def test_bare_array_and_compute_properties(tmp_path):
    # The oldest Kineto traces: a bare event array; and device info under computeProperties.
    doc = raw_document("resnet50_v100_num_workers_0.pt.trace.json.gz")
    bare = open_traces(_write(tmp_path, "bare.json", doc["traceEvents"], gz=False)).traces[0]
    assert len(bare.kernels) == 8772 and bare.devices[0].name == "GPU 0"
    old = dict(doc)
    old["computeProperties"] = old.pop("deviceProperties")
    t = open_traces(_write(tmp_path, "old.json.gz", old)).traces[0]
    assert t.devices[0].name == "Tesla V100-DGXS-32GB"


def test_unknown_categories_and_bad_events_are_skipped_and_reported(tmp_path):
    doc = raw_document("hta_mi250_minitoy_train.json.gz")
    ev = doc["traceEvents"]
    k = next(e for e in ev if e.get("cat") == "kernel")
    ev += [
        {"ph": "X", "cat": "brand_new_category", "name": "x", "ts": k["ts"], "dur": 1.0, "pid": 1, "tid": 1},
        dict(k, dur=-5.0),
        dict(k, dur=float("nan")),
        dict(k, ts="garbage"),
        "not an event",
    ]
    t = open_traces(_write(tmp_path, "mixed.json.gz", doc)).traces[0]
    assert len(t.kernels) == 14  # none of the bad copies got in
    text = " ".join(t.warnings)
    assert "brand_new_category" in text and "negative duration" in text and "NaN" in text and "malformed" in text


def test_rank_directory(tmp_path):
    for i, name in enumerate(("hta_v100_rank0.pt.trace.json.gz", "hta_a100_nccl.json.gz")):
        (tmp_path / f"rank{i}.json.gz").write_bytes((KINETO / name).read_bytes())
    (tmp_path / "README.txt").write_text("not a trace")
    ts = open_traces(str(tmp_path))
    assert len(ts.traces) == 2
    # both files say rank 0 in distributedInfo; order is stable and nothing is lost
    assert sorted(len(t.kernels) for t in ts.traces) == [2700, 4350]
