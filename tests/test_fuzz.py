"""Property-based tests: mutants of a small real input of every format keep the CLI contract —
exit 0 with valid output (JSON without NaN/Infinity), or exit 2 with exactly one line on stderr;
never an internal error, never a traceback.

Hypothesis draws the ``random.Random`` that drives the mutators of ``tests/fuzzing.py`` (byte
flips, truncation, hostile values, deep nesting, dropped tables and columns, hostile pickles).
``derandomize=True`` makes CI deterministic; ``benchmarks/fuzz.py`` runs thousands of mutants
with a memory limit.
"""

from __future__ import annotations

import random
import tempfile

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.fuzzing import ALLOWED
from tests.fuzzing import SEEDS
from tests.fuzzing import SEMANTIC_MUTATIONS
from tests.fuzzing import SEMANTIC_SEEDS
from tests.fuzzing import classify
from tests.fuzzing import commands_for
from tests.fuzzing import headline_changes
from tests.fuzzing import make_mutant
from tests.fuzzing import run_in_process
from tests.fuzzing import semantic_baseline
from tests.fuzzing import semantic_mutant
from tests.fuzzing import semantic_outcome

FUZZ = settings(
    max_examples=20, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"{s.fmt}:{s.path.name}")
@FUZZ
@given(rnd=st.randoms(use_true_random=False))
def test_mutants_keep_the_contract(seed, rnd: random.Random):
    with tempfile.TemporaryDirectory() as folder:
        path = make_mutant(seed, rnd, folder)
        for argv in commands_for(seed, path, rnd):
            rc, out, err = run_in_process(argv)
            verdict = classify(argv, rc, out, err)
            assert verdict in ALLOWED, f"{verdict}: trainscope {' '.join(argv)} → exit {rc}: {err[-600:]}"


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"{s.fmt}:{s.path.name}")
def test_the_unmutated_seed_is_read_cleanly(seed, tmp_path):
    """The seeds themselves analyze: the mutants start from inputs the readers accept."""
    import shutil

    path = tmp_path / seed.path.name
    shutil.copy(seed.path, path)
    for argv in commands_for(seed, str(path), random.Random(0)):
        argv = [a if a not in ("text", "markdown") else "json" for a in argv]
        rc, out, err = run_in_process(argv)
        assert classify(argv, rc, out, err) == "clean", err


# --- semantic mutations ------------------------------------------------------------------------------


SEMANTIC = settings(
    max_examples=6, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
_SMALL = SEMANTIC_SEEDS[1]  # hta_mi250_minitoy_train: 14 kernels, analyzed in well under a second


def _doc(path: str) -> dict:
    import json

    argv = ["analyze", path, "--format", "json", "-q"]
    rc, out, err = run_in_process(argv)
    assert classify(argv, rc, out, err) == "clean", err
    return json.loads(out)


@pytest.fixture(scope="module")
def small_baseline(tmp_path_factory):
    return _doc(semantic_baseline(_SMALL, str(tmp_path_factory.mktemp("base"))))


@pytest.mark.parametrize("mutation", sorted(SEMANTIC_MUTATIONS))
@SEMANTIC
@given(rnd=st.randoms(use_true_random=False))
def test_semantic_mutants_never_change_the_headline_silently(small_baseline, mutation, rnd):
    with tempfile.TemporaryDirectory() as folder:
        path, name, what = semantic_mutant(_SMALL, rnd, folder, mutation)
        assert name == mutation
        outcome, moved = semantic_outcome(small_baseline, _doc(path))
        assert outcome in ("kept", "warned"), f"{what}: {moved}"


def test_a_rank_clock_offset_by_days_keeps_the_report(tmp_path):
    seed = SEMANTIC_SEEDS[-1]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    base = _doc(semantic_baseline(seed, str(tmp_path / "a")))
    path, name, what = semantic_mutant(seed, random.Random(5), str(tmp_path / "b"), "rank-offset")
    assert name == "ranks/rank-offset" and "days" in what
    assert semantic_outcome(base, _doc(path))[0] == "kept"


def test_the_semantic_oracle_flags_a_silent_change():
    """The oracle itself: a verdict or a number that moves without a new warning is silent; with a new
    warning it is ``warned``; small moves within the tolerance are ``kept``."""
    base = {
        "verdict": {"axis": "data", "bottleneck": "data/input-wait"},
        "warnings": ["old"],
        "breakdown": {"step_time_ms": {"p50": 100.0}, "gpu_busy_pct": 50.0, "data_wait_pct": 30.0},
        "steps": [1, 2],
        "kernels": {"count": 10, "total_ms": 20.0},
    }
    flipped = {**base, "verdict": {"axis": "machine", "bottleneck": "machine/bandwidth"}}
    assert semantic_outcome(base, flipped)[0] == "silent-verdict"
    assert semantic_outcome(base, {**flipped, "warnings": ["old", "repair stub-step: …"]})[0] == "warned"
    doubled = {**base, "kernels": {"count": 20, "total_ms": 40.0}}
    assert semantic_outcome(base, doubled) == ("silent-numbers", ["kernels 10 -> 20", "kernel_ms 20.0 -> 40.0"])
    nudged = {**base, "breakdown": {"step_time_ms": {"p50": 101.0}, "gpu_busy_pct": 50.9, "data_wait_pct": 30.0}}
    assert semantic_outcome(base, nudged) == ("kept", [])
    assert headline_changes({"x_pct": 1.0}, {"x_pct": 2.5}) == ["x_pct 1.0 -> 2.5"]


def test_the_semantic_fuzzer_runs_and_counts(tmp_path):
    """``benchmarks/fuzz.py --semantic`` end to end on a few mutants: it prints the counts and exits 0."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "fuzz.py"), "--semantic", "--mutants", "3", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "3 semantic mutants" in r.stdout
    for k in ("kept", "warned", "silent-verdict", "silent-numbers", "internal"):
        assert f"  {k}" in r.stdout
