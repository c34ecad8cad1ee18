"""The NVTX table of a large Nsight export read in row-id chunks by this process and a child
(collectors/nsys_split.py): the model must be the one a single read gives, whoever reads which
chunk, and whatever the child does."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.conftest import DATA
from trainscope.collectors import nsys
from trainscope.collectors import nsys_split
from trainscope.collectors import readers
from trainscope.traces.model import Table

EXPORTS = [p.name for p in sorted((DATA / "nsys").glob("*.sqlite")) if p.name != "pipit_saxpy_a100_nsys2022.sqlite"]


def _same(a, b, where: str = "trace") -> None:
    """Every field of two model objects equal: arrays by value and dtype, the rest with ==."""
    if dataclasses.is_dataclass(a):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, Table):
        assert type(a) is type(b) and len(a) == len(b), where
        for name in a.FIELDS:
            _same(getattr(a, name), getattr(b, name), f"{where}.{name}")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b, where


def _load(path, monkeypatch, split: bool, chunk_rows: int = 97):
    monkeypatch.setattr(nsys_split, "SPLIT_MIN_ROWS", 1 if split else 10**12)
    monkeypatch.setattr(nsys_split, "CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(readers, "usable_cores", lambda: 2)
    return nsys.load_nsys(str(path))


def _spy_on_child(monkeypatch) -> list:
    """Record what the child sent back (None where it failed)."""
    got: list = []
    result = nsys_split.Tail.result

    def spy(self, place):
        out = result(self, place)
        got.append(out)
        return out

    monkeypatch.setattr(nsys_split.Tail, "result", spy)
    return got


def _parent_waits_for_the_child(monkeypatch) -> None:
    """The parent claims its first chunk only once the child has claimed one (a small export is
    read before the child has started): both sides' chunks are then merged, deterministically."""
    claim = nsys_split.Claims.claim

    def waiting(self, from_top: bool):
        if not from_top:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with open(self.path, "rb") as f:
                    raw = f.read(16)
                low, high = (int.from_bytes(raw[i : i + 8], "little", signed=True) for i in (0, 8))
                if low > high or high < getattr(self, "_n", high + 1) - 1 or low > 0:
                    break
                if not hasattr(self, "_n"):
                    self._n = high + 1
                time.sleep(0.01)
        return claim(self, from_top)

    monkeypatch.setattr(nsys_split.Claims, "claim", waiting)


@pytest.mark.parametrize("name", EXPORTS)
def test_a_split_read_is_the_single_read(name, monkeypatch):
    path = DATA / "nsys" / name
    whole = _load(path, monkeypatch, split=False)
    replies = _spy_on_child(monkeypatch)
    _parent_waits_for_the_child(monkeypatch)
    split = _load(path, monkeypatch, split=True)
    assert len(replies) == 1 and replies[0] is not None, "the child read its chunks"
    assert replies[0], "the child claimed at least one chunk"
    n = len(whole)
    assert n == len(split)
    for a, b in zip(whole, split):
        assert len(a.cpu_ops) + len(a.annotations) > 0
        _same(a, b)


def test_a_failed_child_leaves_its_chunks_to_the_parent(monkeypatch):
    path = DATA / "nsys" / "cs336_small_train_step_a100.sqlite"
    whole = _load(path, monkeypatch, split=False)
    monkeypatch.setattr(nsys_split, "_CHILD", "import sys; sys.exit(3)")
    replies = _spy_on_child(monkeypatch)
    split = _load(path, monkeypatch, split=True, chunk_rows=50)
    assert replies == [None]
    _same(whole[0], split[0])


def test_a_child_that_claims_and_dies_leaves_its_chunks_to_the_parent(monkeypatch, tmp_path):
    """The child claims every chunk it can, then exits without a reply: the parent, finding none left
    to claim, reads all of them itself."""
    path = DATA / "nsys" / "cs336_small_train_step_a100.sqlite"
    whole = _load(path, monkeypatch, split=False)
    code = (
        "import pickle, sys\n"
        "from trainscope.collectors import nsys_split as s\n"
        "c = s.Claims(pickle.loads(sys.stdin.buffer.read()).claims)\n"
        "while c.claim(from_top=True) is not None:\n"
        "    pass\n"
        "sys.exit(1)\n"
    )
    monkeypatch.setattr(nsys_split, "_CHILD", code)
    split = _load(path, monkeypatch, split=True, chunk_rows=50)
    _same(whole[0], split[0])


def test_no_split_on_a_table_with_an_index(monkeypatch, tmp_path):
    """An index may give the rows in another order than their ids: such a table is read whole."""
    src = DATA / "nsys" / "cs336_small_train_step_a100.sqlite"
    dst = tmp_path / "indexed.sqlite"
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
        b.execute("CREATE INDEX nvtx_start ON NVTX_EVENTS (start)")
    started: list = []
    monkeypatch.setattr(nsys_split.Tail, "__init__", lambda self, req: started.append(req))
    traces = _load(dst, monkeypatch, split=True)
    assert started == [] and len(traces[0].cpu_ops) > 0


def test_chunks_cover_the_ids_once_in_order():
    for lo, hi in [(1, 10), (5, 5_000_000), (0, 1), (-3, 1_000_003)]:
        b = nsys_split.chunk_bounds(lo, hi)
        assert 2 <= len(b) <= nsys_split.MAX_CHUNKS
        assert b[0][0] == lo and b[-1][1] == hi
        assert all(x[1] + 1 == y[0] for x, y in zip(b, b[1:]))
        assert all(a <= z for a, z in b)


def test_two_claimers_take_every_chunk_once(tmp_path):
    path = str(tmp_path / "claims")
    n = 200
    nsys_split.Claims(path, n)
    taken: dict[bool, list[int]] = {True: [], False: []}

    def run(top: bool) -> None:
        c = nsys_split.Claims(path)
        while (i := c.claim(from_top=top)) is not None:
            taken[top].append(i)

    threads = [threading.Thread(target=run, args=(t,)) for t in (True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken[True] + taken[False]) == list(range(n))
    assert taken[False] == sorted(taken[False]) and taken[True] == sorted(taken[True], reverse=True)
    if taken[True] and taken[False]:
        assert max(taken[False]) < min(taken[True])  # the two ends meet, never cross


def test_the_claims_and_spill_files_are_removed(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    _load(DATA / "nsys" / "cs336_small_train_step_a100.sqlite", monkeypatch, split=True)
    assert [p for p in os.listdir(tmp_path) if p.startswith(("trainscope-claims-", "trainscope-spill-"))] == []


def test_arrow_text_batches_land_in_the_code_space_add_gives():
    """TextSpace.add_arrow (values found by Arrow, only new ones made Python strings) gives the
    codes and value list that add() of the same batches as Python lists gives."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from trainscope.collectors.columnar import TextColumn
    from trainscope.collectors.columnar import TextSpace

    rng = np.random.default_rng(7)
    words = [f"aten::op{i}, seq = {i % 5}" for i in range(300)] + ["", "é∑"]
    a, b = TextSpace(), TextSpace()
    for _ in range(40):
        n = int(rng.integers(0, 400))
        picks = [None if rng.random() < 0.05 else words[int(rng.integers(0, len(words)))] for _ in range(n)]
        enc = pc.dictionary_encode(pa.chunked_array([picks], pa.string())).combine_chunks()
        d = enc.dictionary
        codes = enc.indices.to_numpy(zero_copy_only=False)
        codes = (
            np.where(np.isnan(codes), len(d), codes).astype(np.int64)
            if codes.dtype.kind == "f"
            else codes.astype(np.int64)
        )
        got = a.add_arrow(d, codes.copy())
        want = b.add(TextColumn(d.to_pylist() + [None], codes.copy()))
        assert got.values == want.values and np.array_equal(got.codes, want.codes)
        assert [got.values[c] for c in got.codes] == picks


def test_reading_an_export_imports_no_pandas():
    """pyarrow's pa.array() imports pandas (0.3 s, 35 MiB): the Nsight reader never calls it."""
    code = (
        "import sys; from trainscope.collectors.nsys import load_nsys; "
        f"load_nsys({str(DATA / 'nsys' / 'cs336_small_train_step_a100.sqlite')!r}); "
        "sys.exit(1 if 'pandas' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
