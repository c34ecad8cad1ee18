"""Shared fixtures: the real traces in tests/data (see tests/data/NOTICE.md), loaded once per session."""
from __future__ import annotations

import functools
import gzip
import json
import pathlib

import pytest

DATA = pathlib.Path(__file__).parent / "data"
KINETO = DATA / "kineto"
ALL_KINETO = sorted(p.name for p in KINETO.glob("*.json.gz"))
CPU_ONLY = ("hta_cpu_only.pt.trace.json.gz", "hta_rank_non_gpu.json.gz")


@functools.lru_cache(maxsize=None)
def load(name: str):
    from trainscope.collectors import open_traces

    return open_traces(str(KINETO / name)).traces[0]


@functools.lru_cache(maxsize=None)
def analysis(name: str):
    from trainscope.analyzers.analysis import analyze_trace

    return analyze_trace(load(name))


def raw_document(name: str):
    with gzip.open(KINETO / name, "rb") as f:
        return json.load(f)


@pytest.fixture
def kineto_dir() -> pathlib.Path:
    return KINETO
