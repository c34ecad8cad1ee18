"""Import GPU counter logs written by ``nvidia-smi --query-gpu=… --format=csv`` and similar
hand-rolled CSV logs, as :class:`Snapshot` sequences that replay and analyze like a ``watch
--record`` recording.

Every shape nvidia-smi and its users write is read: nvidia-smi's own header
(``utilization.gpu [%]``, values ``87 %``; ``nounits`` drops the value units, not the header's),
the snake_case one of e.g. nanoGPT's logger (``utilization_gpu_percent``), spaces after commas,
``[N/A]``/``[Not Supported]`` values (missing, not 0), timestamps as nvidia-smi's
``2024/01/15 10:23:45.123``, ISO-8601, ``date``'s ``Mon Jan 15 10:23:45 2024`` or epoch seconds
(milli-, micro- and nanoseconds by magnitude), and several GPUs interleaved — one row per GPU per
sweep, each row with its own millisecond timestamp: a sweep (one sample) ends where a GPU index
repeats. A header repeated inside the file (logs appended to) is skipped. A ``noheader`` log is
refused: its columns cannot be named (the temperature and the GPU index are both bare integers).
A malformed row is skipped and counted, the first one named by line and column; a file with no
readable row is refused with that line and column.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from typing import Any

from trainscope.collectors.errors import TraceError
from trainscope.collectors.recording import Recording
from trainscope.collectors.samples import GpuSample
from trainscope.collectors.samples import Snapshot

_MIB = 1 << 20
# Canonical field ← header spellings (lower case, units in brackets removed).
_ALIASES: dict[str, tuple[str, ...]] = {
    "timestamp": ("timestamp", "time"),
    "index": ("index", "gpu_index", "gpu", "gpu_id", "gpu index"),
    "name": ("name", "gpu_name"),
    "util_gpu": ("utilization.gpu", "utilization_gpu_percent", "utilization_gpu", "gpu_util", "util_gpu"),
    "util_mem": ("utilization.memory", "utilization_memory_percent", "utilization_memory", "mem_util"),
    "mem_used": ("memory.used", "memory_used_mib", "memory_used"),
    "mem_total": ("memory.total", "memory_total_mib", "memory_total"),
    "power_w": ("power.draw", "power.draw.average", "power.draw.instant", "power_w", "power_draw_w", "power_draw"),
    "power_limit_w": ("power.limit", "enforced.power.limit", "power_limit_w"),
    "temperature_c": ("temperature.gpu", "temperature_c", "temperature"),
    "sm_clock_mhz": ("clocks.sm", "clocks.current.sm", "sm_clock_mhz"),
}
_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*(%|MiB|W|MHz|C)?\s*$", re.I)
_TIME_FORMATS = (
    "%Y/%m/%d %H:%M:%S.%f",
    "%Y/%m/%d %H:%M:%S",
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S",
    "%a %b %d %H:%M:%S %Y",
    "%a %b %d %H:%M:%S.%f %Y",
)
_EPOCH = re.compile(r"^\d{9,19}(?:\.\d+)?$")
# Values nvidia-smi writes where a metric has none (bracketed or not): missing, never 0.
_MISSING = (
    "n/a",
    "not supported",
    "unknown error",
    "gpu is lost",
    "gpu requires reset",
    "insufficient permissions",
    "",
)


def _canon(header: str) -> str | None:
    h = re.sub(r"\[.*?\]", "", header).strip().lower()
    for field, names in _ALIASES.items():
        if h in names:
            return field
    return None


def looks_like_nvidia_smi_csv(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.readline(4096).decode("utf-8", "replace")
    except OSError:
        return False
    cols = {_canon(c) for c in head.split(",")}
    return "timestamp" in cols and bool({"util_gpu", "mem_used", "power_w", "temperature_c"} & cols)


def _time(text: str) -> float:
    s = text.strip()
    if _EPOCH.match(s):  # epoch seconds, or milli-/micro-/nanoseconds told apart by magnitude
        t = float(s)
        while t >= 7.3e9:
            t /= 1000.0
        if not 1e8 <= t < 7.3e9:
            raise ValueError(f"timestamp out of range {text!r}")
        return t
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        for fmt in _TIME_FORMATS:
            try:
                dt = datetime.strptime(s, fmt)
                break
            except ValueError:
                continue
        else:
            raise ValueError(f"unrecognized timestamp {text!r}")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)  # nvidia-smi writes local time without a zone: treat as UTC
    t = dt.timestamp()
    if not 0 <= t < 7.3e9:  # 1970–2200: anything else is damage, and would overflow int64 nanoseconds
        raise ValueError(f"timestamp out of range {text!r}")
    return t


def _number(text: str) -> float | None:
    m = _NUMBER.match(text)
    if m is None:
        if text.strip().strip("[]").lower() in _MISSING:
            return None
        raise ValueError(f"not a number: {text.strip()!r}")
    v = float(m.group(1))
    if not abs(v) < 1e15:  # no GPU metric is this large (1 PW, 10⁹ TiB): damage, and sums would overflow
        raise ValueError(f"number out of range: {text.strip()[:40]!r}")
    return v


def _until_damaged(rows: Iterable[list[str]], damage: list[str]) -> Iterator[list[str]]:
    """The CSV reader's rows, stopping (with the reason in ``damage``) where the reader itself
    fails, e.g. on a field past the csv module's size limit."""
    try:
        yield from rows
    except csv.Error as e:
        damage.append(str(e))


def read_nvidia_smi_csv(path: str, max_bytes: int = 1 << 30) -> Recording:
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    if len(raw) > max_bytes:
        raise TraceError(path, f"CSV larger than {max_bytes >> 20} MiB")
    text = raw.decode("utf-8", "replace").lstrip("\ufeff")
    rows = csv.reader(io.StringIO(text), skipinitialspace=True)
    try:
        header = next(rows)
    except (StopIteration, csv.Error):
        raise TraceError(path, "empty CSV") from None
    cols = [_canon(h) for h in header]
    if "timestamp" not in cols or not ({"util_gpu", "mem_used", "power_w"} & set(cols)):
        try:
            if header and _time(header[0]) is not None:
                raise TraceError(
                    path,
                    "line 1, column 1: a timestamp where the header should be: a `noheader` "
                    "nvidia-smi log cannot be read (its columns cannot be named); log without "
                    "`noheader`, or put the --query-gpu list as the first line",
                )
        except ValueError:
            pass
        raise TraceError(path, "not an nvidia-smi CSV log (needs a timestamp column and GPU metrics)")
    names = [h.strip() for h in header]
    sweeps: list[tuple[float, dict[int, GpuSample]]] = []
    bad = 0
    first_bad = ""
    damage: list[str] = []
    for lineno, row in enumerate(_until_damaged(rows, damage), start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if [c.strip() for c in row] == names:  # the header again: logs appended to one file
            continue
        col = 0
        try:
            if len(row) != len(cols):
                col = min(len(row), len(cols)) + 1
                raise ValueError(f"{len(row)} fields, header has {len(cols)}")
            rec = dict(zip(cols, row))
            where = {c: i + 1 for i, c in enumerate(cols) if c}
            col = where["timestamp"]
            ts = _time(rec["timestamp"])
            col = where.get("index", 0)
            kw: dict[str, Any] = {"index": int(_number(rec.get("index", "0")) or 0)}
            if not 0 <= kw["index"] < 1 << 15:
                raise ValueError(f"GPU index {kw['index']} out of range")
            if rec.get("name"):
                kw["name"] = rec["name"].strip()
            for k in ("util_gpu", "util_mem", "power_w", "power_limit_w", "temperature_c", "sm_clock_mhz"):
                if k in rec:
                    col = where[k]
                    kw[k] = _number(rec[k])
            for k in ("mem_used", "mem_total"):
                if k in rec:
                    col = where[k]
                    v = _number(rec[k])
                    kw[k] = None if v is None else int(v * _MIB)
            sample = GpuSample(**kw)
        except (ValueError, OverflowError, csv.Error) as e:
            bad += 1
            if not first_bad:
                named = f" ({header[col - 1].strip()})" if 0 < col <= len(header) else ""
                first_bad = f"line {lineno}, column {col}{named}: {e}" if col else f"line {lineno}: {e}"
            continue
        # One sweep per sample: it ends where a GPU index repeats (nvidia-smi writes one row per GPU,
        # each stamped with its own millisecond), or where the time steps back.
        if not sweeps or sample.index in sweeps[-1][1] or ts < sweeps[-1][0]:
            sweeps.append((ts, {}))
        sweeps[-1][1][sample.index] = sample
    if damage:
        bad += 1
        first_bad = first_bad or f"stopped reading: {damage[0]}"
    if not sweeps:
        raise TraceError(path, f"no readable rows in the CSV ({first_bad or 'no data rows'})")
    by_time: dict[float, list[GpuSample]] = {}
    for ts, gpus in sweeps:  # two sweeps at one instant (clock steps) merge, later rows winning per GPU
        merged = {g.index: g for g in by_time.get(ts, [])} | gpus
        by_time[ts] = list(merged.values())
    times = sorted(by_time)
    gaps = [b - a for a, b in zip(times, times[1:])]
    typical = sorted(gaps)[len(gaps) // 2] if gaps else 1.0
    snaps = []
    for i, ts in enumerate(times):
        dt = typical if i == 0 else ts - times[i - 1]
        snaps.append(
            Snapshot(
                t=round(ts - times[0], 6),
                dt=round(dt, 6),
                wall=ts,
                gpus=tuple(sorted(by_time[ts], key=lambda g: g.index)),
            )
        )
    warnings = [f"{bad} malformed CSV rows skipped (first: {first_bad})"] if bad else []
    header_doc = {"schema": "nvidia-smi-csv", "started": times[0], "interval_s": typical, "source": "nvidia-smi CSV"}
    return Recording(path, header_doc, snaps, None, warnings)
