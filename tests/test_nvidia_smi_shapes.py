"""nvidia-smi CSV logs in every shape nvidia-smi and its users write them: units or ``nounits``,
``noheader`` (refused: its columns cannot be named), spaces after commas or none, ``[N/A]``,
nvidia-smi's, ISO, ``date`` or epoch timestamps, several GPUs interleaved with a timestamp per row,
a header repeated by appending, and malformed rows named by line and column."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime

import pytest

from tests.fuzzing import run_in_process
from trainscope.collectors.errors import TraceError
from trainscope.collectors.nvidia_smi_csv import read_nvidia_smi_csv

QUERY = "timestamp, index, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], power.draw [W], temperature.gpu"
T0 = datetime(2024, 1, 15, 10, 23, 45, 100_000, tzinfo=UTC)


def _stamp(style: str, t: float) -> str:
    when = datetime.fromtimestamp(T0.timestamp() + t, UTC)
    return {
        "smi": when.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3],
        "iso": when.isoformat().replace("+00:00", "Z"),
        "date": when.strftime("%a %b %d %H:%M:%S %Y"),
        "epoch": f"{when.timestamp():.3f}",
        "epoch_ms": str(int(round(when.timestamp() * 1000))),
    }[style]


def _log(
    tmp_path, *, units=True, header=True, stamps="smi", sep=", ", gpus=2, sweeps=3, per_row_ms=True, extra: str = ""
) -> str:
    lines = [QUERY.replace(", ", sep)] if header else []
    for s in range(sweeps):
        for g in range(gpus):
            t = s * 1.0 + (g * 0.003 if per_row_ms and stamps not in ("date",) else 0.0)
            u = (lambda v, unit: f"{v} {unit}") if units else (lambda v, unit: f"{v}")
            power = "[N/A]" if (s, g) == (1, 1) else u(f"{250 + g + s:.2f}", "W")
            vals = [
                _stamp(stamps, t),
                str(g),
                "NVIDIA A100-SXM4-40GB",
                u(90 - g - s, "%"),
                u(30 + g, "%"),
                u(39000 + 100 * s, "MiB"),
                u(40960, "MiB"),
                power,
                str(60 + g),
            ]
            lines.append(sep.join(vals))
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(lines) + "\n" + extra)
    return str(path)


@pytest.mark.parametrize("units", [True, False], ids=["units", "nounits"])
@pytest.mark.parametrize("sep", [", ", ","], ids=["space", "tight"])
@pytest.mark.parametrize("stamps", ["smi", "iso", "epoch", "epoch_ms"])
def test_every_shape_reads_one_sample_per_sweep_with_every_gpu(tmp_path, units, sep, stamps):
    rec = read_nvidia_smi_csv(_log(tmp_path, units=units, sep=sep, stamps=stamps))
    assert rec.warnings == []
    assert len(rec.snapshots) == 3
    assert [len(s.gpus) for s in rec.snapshots] == [2, 2, 2]
    assert [s.t for s in rec.snapshots] == pytest.approx([0.0, 1.0, 2.0], abs=1e-3)
    assert rec.snapshots[0].wall == pytest.approx(T0.timestamp(), abs=1e-3)
    g = rec.snapshots[1].gpus[1]
    assert (g.index, g.name, g.util_gpu, g.util_mem) == (1, "NVIDIA A100-SXM4-40GB", 88.0, 31.0)
    assert g.mem_used == 39100 << 20 and g.mem_total == 40960 << 20
    assert g.power_w is None  # [N/A]: missing, not 0
    assert g.temperature_c == 61.0
    assert rec.snapshots[2].gpus[0].power_w == pytest.approx(252.0)


def test_date_timestamps_of_whole_seconds(tmp_path):
    rec = read_nvidia_smi_csv(_log(tmp_path, stamps="date"))
    assert [s.t for s in rec.snapshots] == [0.0, 1.0, 2.0]
    assert all(len(s.gpus) == 2 for s in rec.snapshots)


def test_one_gpu_per_sweep_and_interleaved_gpus_sharing_a_timestamp(tmp_path):
    one = read_nvidia_smi_csv(_log(tmp_path, gpus=1, sweeps=4))
    assert [len(s.gpus) for s in one.snapshots] == [1, 1, 1, 1]
    same = read_nvidia_smi_csv(_log(tmp_path, gpus=4, per_row_ms=False))
    assert [sorted(g.index for g in s.gpus) for s in same.snapshots] == [[0, 1, 2, 3]] * 3


def test_a_header_repeated_by_appending_is_skipped(tmp_path):
    path = _log(
        tmp_path,
        extra=QUERY + "\n" + f"{_stamp('smi', 5.0)}, 0, NVIDIA A100-SXM4-40GB, 50 %, 10 %, "
        "1000 MiB, 40960 MiB, 100.00 W, 50\n",
    )
    rec = read_nvidia_smi_csv(path)
    assert rec.warnings == [] and len(rec.snapshots) == 4
    assert rec.snapshots[-1].gpus[0].util_gpu == 50.0


@pytest.mark.parametrize("units", [True, False], ids=["noheader", "noheader,nounits"])
def test_noheader_is_refused_at_line_1_column_1(tmp_path, units):
    with pytest.raises(TraceError, match=r"line 1, column 1: .*noheader"):
        read_nvidia_smi_csv(_log(tmp_path, header=False, units=units))


def test_a_malformed_row_is_skipped_and_named_by_line_and_column(tmp_path):
    path = _log(
        tmp_path, extra=f"{_stamp('smi', 9.0)}, 0, NVIDIA A100-SXM4-40GB, lots %, 10 %, 1 MiB, 2 MiB, 1 W, 50\n"
    )
    rec = read_nvidia_smi_csv(path)
    assert len(rec.snapshots) == 3
    assert rec.warnings == [
        "1 malformed CSV rows skipped (first: line 8, column 4 (utilization.gpu [%]): not a number: 'lots %')"
    ]


def test_no_readable_row_is_refused_with_line_and_column(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(QUERY + "\n2024/13/45 99:99:99.000, 0, x, 1 %, 1 %, 1 MiB, 1 MiB, 1 W, 1\n")
    with pytest.raises(TraceError, match=r"line 2, column 1 \(timestamp\): unrecognized timestamp"):
        read_nvidia_smi_csv(str(path))
    rc, out, err = run_in_process(["analyze", str(path)])
    assert rc == 2 and err.count("\n") == 1 and "line 2, column 1" in err


def test_a_shape_analyzes_through_the_cli(tmp_path):
    import json

    rc, out, err = run_in_process(
        ["analyze", _log(tmp_path, units=False, stamps="epoch", sweeps=6), "--format", "json", "-q"]
    )
    assert rc in (0, 3), err
    doc = json.loads(out)
    assert doc["input"]["format"] != "kineto"
