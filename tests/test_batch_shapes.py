"""The batch (leading) dimension read from the recorded ``Input Dims`` reprs, and read safely
from threads (the rank executor's threaded Dask workers call it)."""

from __future__ import annotations

import ast
import random
from concurrent.futures import ThreadPoolExecutor

from trainscope.analyzers.shapes import _leading


def _by_literal_eval(rep: str) -> int | None:
    """What the reader computed before (``ast.literal_eval``), for plain int shapes."""
    try:
        dims = ast.literal_eval(rep)
    except (ValueError, SyntaxError):
        return None
    if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] and type(dims[0][0]) is int:
        return dims[0][0]
    return None


def _random_dims(rng: random.Random) -> list:
    def one() -> object:
        r = rng.random()
        if r < 0.6:
            return [rng.randrange(0, 1 << rng.choice((3, 12, 40))) for _ in range(rng.randrange(0, 5))]
        if r < 0.7:
            return []
        if r < 0.8:
            return [[rng.randrange(8)], [rng.randrange(8)]]  # a list of tensors (TensorList)
        if r < 0.9:
            return [float(rng.randrange(9)), 3]
        return rng.choice([None, "str", True, 1.5])

    return [one() for _ in range(rng.randrange(0, 4))]


def test_leading_dimension_equals_the_literal_reading_on_random_shapes():
    rng = random.Random(7)
    seen = set()
    for _ in range(3000):
        rep = repr(_random_dims(rng))
        assert _leading(rep) == _by_literal_eval(rep), rep
        seen.add(_leading(rep) is None)
    assert seen == {True, False}  # both outcomes were exercised


def test_leading_dimension_of_recorded_shapes():
    assert _leading("[[32, 3, 224, 224], [64, 3, 7, 7], []]") == 32
    assert _leading("[[8192, 1024], [4096, 1024]]") == 8192
    assert _leading("[[], [3]]") is None
    assert _leading("[]") is None
    assert _leading("[[2.0, 3]]") is None
    assert _leading("not a shape") is None


def test_leading_dimension_from_many_threads_at_once():
    """Before, ``ast.literal_eval`` from threads raised "AST constructor recursion depth mismatch"
    at random on CPython 3.11 (python/cpython#106905); a pattern has no such state."""
    reps = [repr([[n, 3, 224, 224], [64]]) for n in range(2000)]
    with ThreadPoolExecutor(8) as pool:
        out = list(pool.map(_leading, reps))
    assert out == list(range(2000))
