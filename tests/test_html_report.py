"""The HTML report holds every figure the text report prints (issue 28 item 8): roofline columns,
crossed thresholds, the MFU / Iron Law lines, phases, the straggler section of a rank directory;
round chart ticks; the timeline's step is the one the header's p50 names."""

from __future__ import annotations

import functools
import html
import pathlib
import re

import pytest

import trainscope.api as ts
from trainscope.reports.html import nice_ticks

DATA = pathlib.Path(__file__).parent / "data"
TRACES = [
    "kineto/resnet50_v100_num_workers_0.pt.trace.json.gz",
    "kineto/hta_dlrm_ws128_2ranks",
    "nsys/cs336_small_train_step_a100.sqlite",
    "kineto/hta_mi250_minitoy_train.json.gz",
    "kineto/tracelens_h100_qwen_inference.json.gz",
    "cpu/slow.pt.trace.json.gz",
]
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")


@functools.cache
def report(name: str):
    return ts.analyze(str(DATA / name))


def page_text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


@pytest.mark.parametrize("name", TRACES)
def test_html_holds_every_figure_of_the_text_report(name):
    r = report(name)
    text, page = r.to_text(), page_text(r.to_html())
    figures = set(NUMBER.findall(text))
    assert len(figures) > 10
    missing = sorted(f for f in figures if f not in page)
    assert not missing, missing


def test_roofline_columns_thresholds_and_iron_law():
    r = report(TRACES[0])
    page = r.to_html()
    assert "<th>bound</th><th>F/B</th><th>rate</th><th>% of roof</th>" in page
    top = r.to_dict()["kernels"]["top"][0]
    assert top["bound"] == "compute" and f"{top['tflops']:.3g} TFLOP/s" in page  # 8.03 TFLOP/s, the dgrad kernel
    assert "threshold crossed" in page and "✔" in page
    assert "Iron Law: step time = FLOPs/step" in page and "pipeline efficiency (GPU busy) 56.0 %" in page


def test_round_ticks_and_the_step_the_p50_names():
    assert nice_ticks(181) == [0, 50, 100, 150, 200]
    assert nice_ticks(0.9) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    r = report(TRACES[1])
    page = r.to_html()
    ticks = re.findall(r'text-anchor="end" fill="#555">([\d.]+)</text>', page)
    assert ticks and all(float(t) % 100 == 0 for t in ticks), ticks  # 0, 100, …, 700 ms
    p50 = r.breakdown.step_ms.p50
    assert f"the step nearest the p50 of {p50:.1f} ms" in page and f"p50 {p50:.1f} ms" in page
    steps = r.breakdown.steps
    shown = re.search(r"p50 of [\d.]+ ms: ([\d.]+) ms", page).group(1)
    nearest = min(steps, key=lambda s: abs(s.duration_ns / 1e6 - p50))
    assert shown == f"{nearest.duration_ns / 1e6:.1f}"


def test_rank_directory_keeps_the_straggler_section_in_html_and_jupyter():
    r = report(TRACES[1])
    assert r.to_dict().get("stragglers")
    for page in (r.to_html(), r._repr_html_()):
        assert "<h2>Stragglers</h2>" in page and "straggler: rank 1" in page


def test_relative_memory_basis_is_explained():
    for name in TRACES[:5]:
        page = report(name).to_html()
        assert "(relative)" not in page


@pytest.mark.parametrize("name", TRACES)
def test_no_table_has_two_columns_of_one_name(name):
    """Every table's headers are distinct (the evidence table had "threshold" twice: the crossed mark
    and the threshold value)."""
    page = report(name).to_html()
    tables = re.findall(r"<table.*?</table>", page, re.S)
    assert tables
    for table in tables:
        first_row = re.search(r"<tr>(.*?)</tr>", table, re.S)
        heads = [
            page_text(h).strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", first_row.group(1) if first_row else "")
        ]
        heads = [h for h in heads if h]
        assert len(heads) == len(set(heads)), heads
