"""repr() of every result is one line with its verdict, and every result renders in Jupyter (issue 28 item 7)."""

from __future__ import annotations

import pathlib

import pytest

import trainscope.api as ts

DATA = pathlib.Path(__file__).parent / "data"
WAN = DATA / "nsys" / "nsysai_h100x2_wan21_train_{}.sqlite"


@pytest.fixture(scope="module")
def wan_diff():
    return ts.diff(str(WAN).format("before"), str(WAN).format("after"))


def _one_line(r: str) -> None:
    assert "\n" not in r and len(r) < 1000, r[:2000]


def test_diff_repr_is_one_line_with_the_work_headline(wan_diff):
    r = repr(wan_diff)
    _one_line(r)
    # the fixed-window pair leads with work per window, never with a step-time speedup
    assert "kernel time per window" in r and "-8.7 %" in r and "4010 → 3587" in r
    assert "faster" not in r
    assert "COMPUTE-BOUND" in r
    html = wan_diff._repr_html_()
    assert html.startswith('<div class="trainscope-report">') and "Work per window" in html
    assert str(wan_diff) == wan_diff.to_text()


def test_diff_repr_of_stepped_runs_has_speedup_and_gate():
    d = ts.diff(
        str(DATA / "cpu" / "slow.pt.trace.json.gz"), str(DATA / "cpu" / "fast.pt.trace.json.gz"), fail_if_slower=5
    )
    r = repr(d)
    _one_line(r)
    assert "step p50 148.59 → 67.58 ms, 2.20× faster" in r and "gate passed" in r
    assert "DATA-BOUND" in r


def test_report_repr_has_the_verdict():
    r = ts.analyze(str(DATA / "kineto" / "hta_dlrm_ws128_2ranks"))
    line = repr(r)
    _one_line(line)
    assert line.startswith("<Report hta_dlrm_ws128_2ranks: ") and "2 ranks" in line
    assert r.verdict.axis != "insufficient_evidence" and f"({r.verdict.confidence:.2f})" in line


def test_plan_repr_and_html():
    p = ts.plan(params="7B", optimizer="adam", gpu="v100-32")
    line = repr(p)
    _one_line(line)
    assert line.startswith("<PlanResult does not fit: ") and "V100" in line
    assert "does not fit" in p._repr_html_()
    ok = ts.plan(params="125M", optimizer="adam", gpu="h100-80")
    assert repr(ok).startswith("<PlanResult fits")


def test_memory_repr_and_html():
    m = ts.memory(str(DATA / "memory" / "mem_oom_flexgen_opt.pickle"))
    line = repr(m)
    _one_line(line)
    assert "GPU 0 peak allocated 11.03 GiB" in line and "machine/capacity" in line
    html = m._repr_html_()
    assert "11.03 GiB" in html and "<pre>" in html
    t = ts.memory(str(DATA / "memory" / "hta_memory_timeline.raw.json.gz"))
    assert "peak 2.87 GiB" in repr(t)


def test_repr_escapes_trace_names():
    from trainscope.reports.oneline import _cut

    # spelled out as in every other view (traces/safe_text.py); other invisible characters as "?"
    assert _cut("a\nb\x1b[31mc\u202e\u200b") == "a\\nb\\x1b[31mc\\u202e?"
    assert len(_cut("x" * 5000)) == 400


@pytest.mark.parametrize("suffix,head", [(".html", "<!DOCTYPE html>"), (".json", "{"), (".md", "# trainscope diff")])
def test_diff_report_honours_the_suffix(tmp_path, capsys, suffix, head):
    """`diff --report x.html` wrote Markdown whatever the suffix (issue 28 item 6)."""
    from trainscope.cli import main

    out = tmp_path / f"diff{suffix}"
    code = main(
        [
            "diff",
            str(DATA / "cpu" / "slow.pt.trace.json.gz"),
            str(DATA / "cpu" / "fast.pt.trace.json.gz"),
            "--report",
            str(out),
            "--no-tui",
        ]
    )
    assert code == 0
    text = out.read_text()
    assert text.startswith(head), text[:200]
    if suffix == ".html":
        assert "2.20× faster" in text and "<pre>" in text
    if suffix == ".json":
        import json

        assert json.loads(text)["schema"] == "trainscope.diff/1"


def test_plan_and_memory_results_save_by_suffix(tmp_path):
    p = ts.plan(params="7B", optimizer="adam", gpu="v100-32")
    assert p.save(str(tmp_path / "plan.html")) and (tmp_path / "plan.html").read_text().startswith("<!DOCTYPE html>")
    m = ts.memory(str(DATA / "memory" / "mem_oom_flexgen_opt.pickle"))
    m.save(str(tmp_path / "mem.json"))
    import json

    assert json.loads((tmp_path / "mem.json").read_text())["schema"] == "trainscope.memory/1"
