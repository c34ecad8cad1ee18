"""The cores a process may use: its affinity capped by its control group's CPU quota (a container
started with --cpus), read from a fake cgroup tree."""

from __future__ import annotations

import os

import pytest

from trainscope.collectors import readers


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@pytest.mark.parametrize(
    ("cpu_max", "quota"),
    [("150000 100000\n", 1.5), ("400000 100000\n", 4.0), ("max 100000\n", None), ("garbage\n", None)],
)
def test_cgroup_v2_cpu_max(tmp_path, cpu_max, quota):
    (tmp_path / "cpu.max").write_text(cpu_max)
    assert readers.cpu_quota(str(tmp_path)) == quota
    want = _affinity() if quota is None else max(1, min(_affinity(), int(quota)))
    assert readers.usable_cores(str(tmp_path)) == want


def test_a_quota_of_one_and_a_half_cpus_is_one_core_of_its_own(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert readers.usable_cores(str(tmp_path)) == 1  # no second reading process, no analysis thread


@pytest.mark.parametrize(("quota_us", "quota"), [("-1", None), ("250000", 2.5), ("0", None)])
def test_cgroup_v1_cfs_quota(tmp_path, quota_us, quota):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(quota_us + "\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert readers.cpu_quota(str(tmp_path)) == quota


def test_no_cgroup_files_is_no_quota(tmp_path):
    assert readers.cpu_quota(str(tmp_path)) is None
    assert readers.usable_cores(str(tmp_path)) == _affinity()


def test_a_quota_on_a_group_above_holds_the_process(tmp_path, monkeypatch):
    """cgroup v2: the least quota on the path from the process's own group up to the root (a slice's
    CPUQuota above a container without its own), not only the own group's."""
    proc = tmp_path / "cgroup"
    proc.write_text("0::/slice/job\n")
    (tmp_path / "slice" / "job").mkdir(parents=True)
    (tmp_path / "slice" / "job" / "cpu.max").write_text("max 100000\n")
    (tmp_path / "slice" / "cpu.max").write_text("150000 100000\n")
    assert readers.v2_groups(str(tmp_path), str(proc)) == [
        str(tmp_path / "slice" / "job"),
        str(tmp_path / "slice"),
        str(tmp_path),
    ]
    real = readers.v2_groups
    monkeypatch.setattr(readers, "v2_groups", lambda root: real(root, str(proc)))
    assert readers.cpu_quota(str(tmp_path)) == 1.5
    assert readers.usable_cores(str(tmp_path)) == 1
