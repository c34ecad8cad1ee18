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
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.fuzzing import ALLOWED, SEEDS, classify, commands_for, make_mutant, run_in_process

FUZZ = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


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
