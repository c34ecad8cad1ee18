"""`trainscope plan`, `trainscope memory` and `analyze --model` as a user meets them."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import DATA
from tests.conftest import KINETO
from tests.test_ledger import WALKTHROUGH_FLAGS as WALKTHROUGH

SNAPSHOT = str(DATA / "memory" / "mem_cs336_nothanmin_trainstep.pickle.gz")


def run(*args):
    return subprocess.run([sys.executable, "-m", "trainscope", *args], capture_output=True, text=True, timeout=300)


def one_line_error(p, needle):
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert needle in p.stderr, p.stderr


def test_plan_text_prints_the_ledger_verdict_and_options():
    p = run("plan", *WALKTHROUGH)
    assert p.returncode == 0, p.stderr
    assert "89.00 GB" in p.stdout and "24.00 GB" in p.stdout and "65.00 GB" in p.stdout
    assert "DOES NOT FIT: 259 % of V100 32GB" in p.stdout
    assert "Cheapest changes that fit" in p.stdout and "cost:" in p.stdout


def test_plan_json_walkthrough_steps():
    totals = []
    for extra in ([], ["--precision", "mixed"], ["--precision", "mixed", "--checkpoint", "every:4"]):
        p = run("plan", *WALKTHROUGH, *extra, "--format", "json")
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["schema"] == "trainscope.plan/1"
        totals.append((doc["ledger"]["total_gb"], doc["fit"]["fits"]))
    assert totals == [(89.0, False), (56.5, False), (32.125, True)]
    assert all(o["fit"]["fits"] for o in doc["options"]) and doc["options"] == []  # fits: nothing to suggest


def test_plan_markdown_and_estimated_activations():
    p = run(
        "plan",
        "--layers",
        "48",
        "--hidden",
        "1600",
        "--heads",
        "25",
        "--vocab",
        "50257",
        "--seq",
        "1024",
        "--batch",
        "8",
        "--gpu",
        "a100-80",
        "--format",
        "markdown",
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("# Training memory plan: 1.56 B parameters")
    assert r"activations \(estimated\)" in p.stdout and "Korthikanti" in p.stdout  # md_escape escapes ( )


def test_plan_bad_input_is_one_line():
    one_line_error(run("plan"), "params")
    one_line_error(run("plan", "--params", "1B", "--optimizer", "lion"), "unknown optimizer")
    one_line_error(run("plan", "--params", "1B", "--gpu", "tpu-v9"), "unknown GPU")
    one_line_error(run("plan", "--params", "lots"), "expected a count")


def test_memory_command_on_the_real_snapshot():
    p = run("memory", SNAPSHOT, "--gpu", "h100-80", "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["schema"] == "trainscope.memory/1" and doc["input"]["format"] == "cuda_snapshot"
    d = doc["devices"][0]
    # Independently: the forward replay of the raw events (tests/test_memory_snapshot.py).
    assert d["peak_allocated_bytes"] == 22_827_925_508 and d["peak_reserved_bytes"] == 23_842_521_088
    assert d["peak_phase"] is None and doc["findings"] == []
    t = run("memory", SNAPSHOT)
    assert "peak allocated    21.26 GiB\n" in t.stdout  # 22,827,925,508 B / 2**30
    assert "4.3 % (fragmentation)" in t.stdout


def test_analyze_points_a_snapshot_to_memory(tmp_path):
    import gzip

    f = tmp_path / "snapshot.pickle"
    f.write_bytes(gzip.open(SNAPSHOT).read(2048))
    one_line_error(run("analyze", str(f)), "trainscope memory")


def test_analyze_model_adds_the_ledger_next_to_the_measured_peak():
    trace = str(KINETO / "tracelens_h100_qwen_inference.json.gz")
    p = run("analyze", trace, "--model", "params=0.5B,optimizer=adam,precision=bf16", "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    lg = doc["ledger"]
    assert lg["static_gb"] == 8.0  # 16 bytes × 0.5 B
    measured = doc["memory"][0]["peak_allocated_bytes"]
    assert lg["measured_peak_bytes"] == measured and lg["measured_basis"] == "absolute"
    assert lg["unexplained_bytes"] == measured - lg["total_bytes"]
    text = run("analyze", trace, "--model", "params=0.5B,precision=bf16")
    assert "Ledger vs measured" in text.stdout and "ledger total" in text.stdout
    one_line_error(run("analyze", trace, "--model", "params=0.5B,colour=blue"), "--model")
    # Without --model the document is unchanged.
    assert "ledger" not in json.loads(run("analyze", trace, "--format", "json").stdout)
