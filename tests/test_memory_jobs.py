"""The analysis' second core only where its memory fits: what this process may still take, read from
fake cgroup trees (v2 and v1) and a fake /proc/meminfo; the pure decision on its edges; and an
explicit ``--jobs`` honoured whatever the memory says."""

from __future__ import annotations

import pytest

from tests.conftest import DATA
from tests.fuzzing import run_in_process
from trainscope.analyzers.trace.analysis import BESIDE_MIN_ROWS
from trainscope.api import analysis as api_analysis
from trainscope.api import jobs
from trainscope.collectors import readers
from trainscope.collectors.readers import MemoryRoom

MIB = 1 << 20
V1_NO_LIMIT = "9223372036854771712"  # what cgroup v1 writes for "no limit"


def _tree(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _room(root, proc_cgroup: str, meminfo_kb: int | None = None) -> MemoryRoom:
    (root / "proc_cgroup").write_text(proc_cgroup)
    meminfo = root / "meminfo"
    meminfo.write_text(f"MemTotal: 99999999 kB\nMemAvailable: {meminfo_kb} kB\n" if meminfo_kb is not None else "")
    return readers.memory_room(str(root / "cg"), str(meminfo), str(root / "proc_cgroup"))


def test_v2_the_tightest_group_on_the_path_wins_and_dropable_cache_is_room(tmp_path):
    _tree(
        tmp_path / "cg",
        {
            # own group: 1 GiB, 600 MiB held of which 100 MiB inactive page cache → 524 MiB room
            "a/b/memory.max": f"{1024 * MIB}\n",
            "a/b/memory.current": f"{600 * MIB}\n",
            "a/b/memory.stat": f"anon 1\ninactive_file {100 * MIB}\nactive_file 5\n",
            # the group above: 800 MiB, 700 held, no stat → 100 MiB room: the tighter
            "a/memory.max": f"{800 * MIB}\n",
            "a/memory.current": f"{700 * MIB}\n",
        },
    )
    assert _room(tmp_path, "0::/a/b\n", meminfo_kb=8 << 20) == MemoryRoom(800 * MIB, 100 * MIB)


def test_v2_own_group_alone(tmp_path):
    _tree(
        tmp_path / "cg",
        {
            "a/b/memory.max": f"{1024 * MIB}\n",
            "a/b/memory.current": f"{600 * MIB}\n",
            "a/b/memory.stat": f"inactive_file {100 * MIB}\n",
            "a/memory.max": "max\n",
        },
    )
    assert _room(tmp_path, "0::/a/b\n", meminfo_kb=8 << 20) == MemoryRoom(1024 * MIB, 524 * MIB)


def test_v2_max_is_no_limit_and_meminfo_decides(tmp_path):
    _tree(tmp_path / "cg", {"memory.max": "max\n", "memory.current": f"{600 * MIB}\n"})
    assert _room(tmp_path, "0::/\n", meminfo_kb=300 * 1024) == MemoryRoom(None, 300 * MIB)


def test_meminfo_smaller_than_the_group_wins(tmp_path):
    _tree(tmp_path / "cg", {"memory.max": f"{4096 * MIB}\n", "memory.current": f"{100 * MIB}\n"})
    assert _room(tmp_path, "0::/\n", meminfo_kb=200 * 1024) == MemoryRoom(4096 * MIB, 200 * MIB)


def test_a_group_over_its_limit_has_no_room_not_negative_room(tmp_path):
    _tree(tmp_path / "cg", {"memory.max": f"{100 * MIB}\n", "memory.current": f"{150 * MIB}\n"})
    assert _room(tmp_path, "0::/\n") == MemoryRoom(100 * MIB, 0)


def test_a_group_outside_the_namespace_reads_the_root_and_ends(tmp_path):
    _tree(tmp_path / "cg", {"memory.max": f"{512 * MIB}\n", "memory.current": f"{12 * MIB}\n"})
    assert _room(tmp_path, "0::/../../elsewhere\n") == MemoryRoom(512 * MIB, 500 * MIB)


def test_v1_hierarchical_limit_and_inactive_cache(tmp_path):
    group = "cg/memory/docker/abc/"
    _tree(
        tmp_path,
        {
            group + "memory.limit_in_bytes": V1_NO_LIMIT + "\n",  # its own: none, a parent's: 2 GiB
            group + "memory.usage_in_bytes": f"{1536 * MIB}\n",
            group
            + "memory.stat": f"cache 1\nhierarchical_memory_limit {2048 * MIB}\ntotal_inactive_file {512 * MIB}\n",
            "cg/memory/memory.limit_in_bytes": f"{64 * MIB}\n",  # the root's: not this process's group
        },
    )
    room = _room(tmp_path, "5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n", meminfo_kb=8 << 20)
    assert room == MemoryRoom(2048 * MIB, 1024 * MIB)


def test_v1_group_not_mounted_under_its_path_reads_the_mount_root(tmp_path):
    # a container's /proc/self/cgroup names the host's path; its mount shows its own group at the root
    _tree(
        tmp_path,
        {
            "cg/memory/memory.limit_in_bytes": f"{1024 * MIB}\n",
            "cg/memory/memory.usage_in_bytes": f"{1000 * MIB}\n",
            "cg/memory/memory.stat": f"total_inactive_file {200 * MIB}\n",
        },
    )
    assert _room(tmp_path, "4:memory:/docker/abc\n") == MemoryRoom(1024 * MIB, 224 * MIB)


def test_v1_no_limit_is_none(tmp_path):
    _tree(
        tmp_path,
        {"cg/memory/memory.limit_in_bytes": V1_NO_LIMIT + "\n", "cg/memory/memory.usage_in_bytes": f"{MIB}\n"},
    )
    assert _room(tmp_path, "4:memory:/\n", meminfo_kb=1024) == MemoryRoom(None, MIB)


def test_nothing_readable_is_unknown(tmp_path):
    assert _room(tmp_path, "garbage") == MemoryRoom(None, None)


def test_this_machine_reads_without_error():
    room = readers.memory_room()
    assert room.available is None or room.available >= 0


# --- the pure decision -------------------------------------------------------------------------------

NEED = jobs.beside_need(BESIDE_MIN_ROWS)


def test_the_projection_is_the_measured_rate_with_its_margin():
    # 1 GB Nsight export: 8.33 M rows, 336 MiB above the read trace with the host side beside
    assert jobs.beside_need(8_334_678) == pytest.approx(336 * MIB * jobs.BESIDE_MARGIN, rel=0.01)
    assert jobs.BESIDE_MARGIN > 1


@pytest.mark.parametrize(
    ("cores", "rows", "available", "want"),
    [
        (2, BESIDE_MIN_ROWS, NEED, 2),  # fits exactly
        (2, BESIDE_MIN_ROWS, NEED - 1, 1),  # one byte short: one core
        (8, BESIDE_MIN_ROWS, 0, 1),
        (8, 10 * BESIDE_MIN_ROWS, 10 * NEED, 8),
        (8, 10 * BESIDE_MIN_ROWS, 10 * NEED - 1, 1),
        (2, BESIDE_MIN_ROWS - 1, 0, 2),  # below the threshold no thread starts: memory is no matter
        (2, BESIDE_MIN_ROWS, None, 2),  # no limit known
        (1, 10 * BESIDE_MIN_ROWS, 0, 1),
    ],
)
def test_analysis_jobs_edges(cores, rows, available, want):
    assert jobs.analysis_jobs(cores, rows, available) == want


# --- where the default is resolved, and an explicit --jobs -------------------------------------------

TRACE = str(DATA / "nsys/cs336_small_train_step_a100.sqlite")


@pytest.fixture
def no_room(monkeypatch) -> list[int]:
    """Two cores, no memory to spare, and the bundled trace counted as large: the jobs each analysis got."""
    monkeypatch.setattr(readers, "usable_cores", lambda: 2)
    monkeypatch.setattr(readers, "memory_room", lambda: MemoryRoom(1024 * MIB, 0))
    monkeypatch.setattr(jobs, "host_rows", lambda trace: 10 * BESIDE_MIN_ROWS)
    seen: list[int] = []
    real = api_analysis.analyze_set

    def analyze_set(*a):
        seen.append(a[-1])
        return real(*a)

    monkeypatch.setattr(api_analysis, "analyze_set", analyze_set)
    return seen


def test_default_jobs_gives_up_the_second_core_and_says_so(no_room):
    rc, _, err = run_in_process(["analyze", TRACE, "--format", "json", "--no-cache"])
    assert rc == 0, err
    assert no_room == [1]
    assert err.count("trainscope: memory:") == 1 and "one core" in err


@pytest.mark.parametrize("n", ["1", "2", "4"])
def test_an_explicit_jobs_is_honoured_whatever_the_memory(no_room, n):
    rc, _, err = run_in_process(["analyze", TRACE, "--format", "json", "--no-cache", "--jobs", n])
    assert rc == 0, err
    assert no_room == [int(n)]
    assert "memory:" not in err


def test_room_enough_keeps_both_cores_quietly(no_room, monkeypatch):
    monkeypatch.setattr(readers, "memory_room", lambda: MemoryRoom(None, 1 << 40))
    rc, _, err = run_in_process(["analyze", TRACE, "--format", "json", "--no-cache"])
    assert rc == 0, err
    assert no_room == [2]
    assert "memory:" not in err
