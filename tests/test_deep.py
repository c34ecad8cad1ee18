"""``analyze --deep``: HTA's critical path, launch statistics and queue lengths, and how the deep
part degrades where HTA fails. HTA is slow (seconds per trace on 2 cores), so each HTA run here
is made once per session (functools.lru_cache) and shared by the tests that read it."""

from __future__ import annotations

import builtins
import functools
import json
import re
from importlib import metadata

import numpy as np
import pytest

pytest.importorskip("hta.trace_analysis", reason="HTA (traceinsight) is installed by the [test] extra")

from tests.conftest import KINETO  # noqa: E402
from tests.conftest import analysis  # noqa: E402
from tests.conftest import load  # noqa: E402
from tests.conftest import raw_document  # noqa: E402
from trainscope.analyzers.deep.critical_path import CP_CATEGORIES  # noqa: E402
from trainscope.analyzers.deep.critical_path import reconcile  # noqa: E402
from trainscope.analyzers.deep.second_opinion import DeepAnalysis  # noqa: E402
from trainscope.analyzers.deep.second_opinion import choose_step  # noqa: E402
from trainscope.analyzers.deep.second_opinion import deep_analysis  # noqa: E402
from trainscope.cli import main  # noqa: E402
from trainscope.reports.deep import deep_dict  # noqa: E402

CONTROL = "hta_a100_control.json.gz"
RESNET_2021 = "resnet50_v100_num_workers_0.pt.trace.json.gz"


@functools.cache
def deep(name: str, step: str | None = None) -> DeepAnalysis:
    return deep_analysis(load(name), analysis(name), step=step)


def _events(name: str) -> list[dict]:
    d = raw_document(name)
    return d["traceEvents"] if isinstance(d, dict) else d


# -- versions: the pins that work ------------------------------------------------------------


def test_installed_hta_and_pandas_are_the_pinned_working_versions():
    # HTA 0.6.1's critical path fails under pandas 3 ("name 'nan' is not defined").
    assert metadata.version("traceinsight") == "0.6.1"
    assert int(metadata.version("pandas").split(".")[0]) < 3
    d = deep(CONTROL, "1010")
    assert d.versions == {"traceinsight": "0.6.1", "pandas": metadata.version("pandas")}


# -- the critical path on the A100 trace (the numbers seen when the issue was filed) ---------


def test_critical_path_of_the_second_step_is_mostly_cpu_then_gpu_compute():
    d = deep(CONTROL, "1010")
    assert d.status == "ok" and d.rank == 3
    cp = d.critical_path
    assert cp.step == "ProfilerStep#1010"
    assert cp.shares_pct["cpu"] == pytest.approx(72, abs=2)
    assert cp.shares_pct["gpu_compute"] == pytest.approx(27, abs=2)
    assert cp.shares_pct["gpu_communication"] == 0.0
    assert sum(cp.shares_pct.values()) == pytest.approx(100, abs=0.1)
    # The step length comes from the raw ProfilerStep#1010 range; the path lies inside it.
    raw = [e for e in _events(CONTROL) if e.get("name") == "ProfilerStep#1010"]
    assert cp.step_ms == pytest.approx(raw[0]["dur"] / 1e3, abs=0.01)
    assert 0 < cp.path_ms <= cp.span_ms <= cp.step_ms
    assert not cp.has_cuda_sync  # the trace has no cuda_sync events
    assert d.elapsed_s > 0 and d.peak_rss_mb and d.peak_rss_mb > 0
    assert set(d.stage_s) == {"load", "critical_path", "launch_stats"}


def test_disagreement_with_the_shares_verdict_is_explained():
    from trainscope.analyzers.trace.breakdown import CATEGORIES

    a = analysis(CONTROL)
    # The largest sink is memory-bound kernel time; the path is host work: they disagree, explained.
    assert a.verdict.bottleneck == "machine/bandwidth"
    rec = deep(CONTROL, "1010").reconciliation
    assert rec.agree is False and (rec.verdict_family, rec.path_family) == ("gpu-compute", "host")
    assert "no CUDA synchronization events" in " ".join(rec.reasons)
    # Unoverlapped communication (the runner-up cause) on the same path: its stake comes from the
    # breakdown through the registry's declaration, and the own-stream reason explains its absence.
    pct = {c: a.breakdown.share_pct(c) for c in CATEGORIES}
    comm = reconcile(deep(CONTROL, "1010").critical_path, "comm/unoverlapped", pct)
    assert comm.agree is False and (comm.verdict_family, comm.path_family) == ("communication", "host")
    text = " ".join(comm.reasons)
    assert "18.9 %" in text  # the cause's stake, from the breakdown
    assert "no CUDA synchronization events" in text
    assert "own stream" in text


def test_reconcile_agrees_when_the_path_runs_where_the_verdict_points():
    cp = deep(CONTROL, "1010").critical_path
    assert reconcile(cp, "host/launch-overhead", {}).agree is True
    assert reconcile(cp, None, {}).agree is None


def test_default_step_is_the_median_step_by_duration():
    seg = analysis(CONTROL).segmentation
    raw = sorted((e["dur"], e["name"]) for e in _events(CONTROL) if re.match(r"ProfilerStep#\d+$", e.get("name", "")))
    assert choose_step(seg).label == raw[(len(raw) - 1) // 2][1]
    assert choose_step(seg, "ProfilerStep#1012").label == "ProfilerStep#1012"
    assert choose_step(seg, "@1").label == "ProfilerStep#1010"
    with pytest.raises(ValueError, match="no step ProfilerStep#7"):
        choose_step(seg, "7")
    with pytest.raises(ValueError, match="ProfilerStep#N"):
        choose_step(analysis("param_linear_2080ti.json.gz").segmentation)


# -- launch statistics, re-derived from the raw events ---------------------------------------


def test_launch_statistics_agree_with_the_raw_trace():
    ls = deep(CONTROL, "1010").launch
    ev = _events(CONTROL)
    launch_names = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync"}
    host = {
        e["args"]["correlation"]: e["dur"] for e in ev if e.get("cat") == "cuda_runtime" and e["name"] in launch_names
    }
    gpu = {e["args"]["correlation"]: e["dur"] for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    both = [c for c in host if c in gpu]
    assert ls.launches == len(both)
    assert ls.short_kernels == sum(gpu[c] < host[c] for c in both)
    assert ls.runtime_outliers == sum(host[c] > 50 for c in both)
    assert ls.median_launch_us == pytest.approx(float(np.median([host[c] for c in both])))
    # The busiest stream's queue is long: the host runs ahead, so launches are not the limit here.
    assert ls.queues[0].stream == 7 and ls.queues[0].mean > 10
    assert ls.supports_launch_overhead is False


# -- degradation ------------------------------------------------------------------------------


def test_hta_critical_path_failure_on_the_2021_resnet_trace_is_skipped_with_one_line():
    d = deep(RESNET_2021)
    assert d.status == "partial" and d.critical_path is None
    assert "AssertionError" in d.critical_path_error and "Pageable" in d.critical_path_error
    assert "\n" not in d.critical_path_error
    assert d.launch is not None and d.launch.launches > 0  # the rest of the deep part still runs


def test_cli_deep_degrades_and_keeps_the_report(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["analyze", str(KINETO / RESNET_2021), "--deep", "--json", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "VERDICT  DATA-BOUND" in text and "critical path: skipped — HTA's critical path failed" in text
    doc = json.loads(out.read_text())
    assert doc["verdict"]["bottleneck"] == "data/input-wait"
    assert doc["deep"]["status"] == "partial" and doc["deep"]["critical_path"] is None
    assert doc["deep"]["elapsed_s"] > 0


def test_cpu_only_trace_skips_deep_without_running_hta():
    d = deep_analysis(load("hta_cpu_only.pt.trace.json.gz"), analysis("hta_cpu_only.pt.trace.json.gz"))
    assert d.status == "skipped" and "no GPU activity" in d.reason
    assert d.stage_s == {}


def test_pandas_3_is_refused_for_the_critical_path(monkeypatch):
    import trainscope.analyzers.deep.second_opinion as deep_mod

    monkeypatch.setattr(deep_mod, "hta_versions", lambda: {"traceinsight": "0.6.1", "pandas": "3.0.0"})
    name = "tracelens_h100_qwen_inference.json.gz"
    d = deep_mod.deep_analysis(load(name), analysis(name))
    assert d.critical_path is None and "pandas 3.0.0 breaks HTA" in d.critical_path_error
    assert d.status == "partial" and d.launch is not None


def test_missing_hta_is_one_line_and_exit_2(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_hta(name, *args, **kwargs):
        if name == "hta" or name.startswith("hta."):
            raise ImportError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_hta)
    assert main(["analyze", str(KINETO / CONTROL), "--deep"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("trainscope: --deep needs Holistic Trace Analysis")
    assert "pip install 'trainscope-dam[hta]'" in err
    # Without --deep nothing needs HTA.
    assert main(["analyze", str(KINETO / CONTROL), "-q", "--format", "json"]) == 0


def test_deep_step_without_deep_is_a_usage_error(capsys):
    assert main(["analyze", str(KINETO / CONTROL), "--deep-step", "3"]) == 2
    assert "--deep-step needs --deep" in capsys.readouterr().err


# -- the document ----------------------------------------------------------------------------


def test_deep_document_part_is_plain_json_and_renders():
    from trainscope.analyzers.rules import Rules
    from trainscope.reports.document import build_document
    from trainscope.reports.markdown import render_markdown
    from trainscope.reports.text import render_text

    part = deep_dict(deep(CONTROL, "1010"))
    doc = build_document(CONTROL, [analysis(CONTROL)], Rules(), deep=part)
    back = json.loads(json.dumps(doc, allow_nan=False))
    assert back["deep"]["critical_path"]["shares_pct"]["cpu"] == pytest.approx(71.8, abs=0.1)
    assert list(back["deep"]["critical_path"]["shares_pct"]) == list(CP_CATEGORIES)
    assert back["deep"]["reconciliation"]["agree"] is False
    assert back["deep"]["launch"]["supports_launch_overhead"] is False
    text = render_text(doc)
    assert "Deep analysis (Holistic Trace Analysis)" in text and "CPU work                            71.8 %" in text
    md = render_markdown(doc)
    assert "| CPU work | 71.8 % |" in md and "**Against the verdict:** disagrees" in md
    # Event names reach Markdown escaped.
    assert "evaluate\\_function" in md
