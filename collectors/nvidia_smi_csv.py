"""Import GPU counter logs written by ``nvidia-smi --query-gpu=… --format=csv`` (with or without
``noheader``-less units) and similar hand-rolled CSV logs, as :class:`Snapshot` sequences that
replay and analyze like a ``watch --record`` recording.

Both header styles are understood: nvidia-smi's own (``utilization.gpu [%]``, values ``87 %``,
timestamps ``2024/01/15 10:23:45.123``) and the snake_case one of e.g. nanoGPT's logger
(``utilization_gpu_percent``, ISO-8601 timestamps). Rows sharing a timestamp form one sample.
"""
from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timezone

from trainscope.collectors.errors import TraceError
from trainscope.collectors.recording import Recording
from trainscope.collectors.samples import GpuSample, Snapshot

_MIB = 1 << 20
# Canonical field ← header spellings (lower case, units in brackets removed).
_ALIASES: dict[str, tuple[str, ...]] = {
    "timestamp": ("timestamp", "time"),
    "index": ("index", "gpu_index", "gpu", "gpu_id"),
    "name": ("name", "gpu_name"),
    "util_gpu": ("utilization.gpu", "utilization_gpu_percent", "utilization_gpu", "gpu_util", "util_gpu"),
    "util_mem": ("utilization.memory", "utilization_memory_percent", "utilization_memory", "mem_util"),
    "mem_used": ("memory.used", "memory_used_mib", "memory_used"),
    "mem_total": ("memory.total", "memory_total_mib", "memory_total"),
    "power_w": ("power.draw", "power_w", "power_draw_w", "power_draw"),
    "power_limit_w": ("power.limit", "enforced.power.limit", "power_limit_w"),
    "temperature_c": ("temperature.gpu", "temperature_c", "temperature"),
    "sm_clock_mhz": ("clocks.sm", "clocks.current.sm", "sm_clock_mhz"),
}
_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*(%|MiB|W|MHz|C)?\s*$", re.I)
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")


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
        dt = dt.replace(tzinfo=timezone.utc)  # nvidia-smi writes local time without a zone: treat as UTC
    t = dt.timestamp()
    if not 0 <= t < 7.3e9:  # 1970–2200: anything else is damage, and would overflow int64 nanoseconds
        raise ValueError(f"timestamp out of range {text!r}")
    return t


def _number(text: str) -> float | None:
    m = _NUMBER.match(text)
    if m is None:
        if text.strip().strip("[]").lower() in ("n/a", "not supported", "unknown error", ""):
            return None
        raise ValueError(f"not a number: {text.strip()!r}")
    v = float(m.group(1))
    if not abs(v) < 1e15:  # no GPU metric is this large (1 PW, 10⁹ TiB): damage, and sums would overflow
        raise ValueError(f"number out of range: {text.strip()[:40]!r}")
    return v


def _until_damaged(rows, damage: list[str]):
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
    text = raw.decode("utf-8", "replace")
    rows = csv.reader(io.StringIO(text))
    try:
        header = next(rows)
    except (StopIteration, csv.Error):
        raise TraceError(path, "empty CSV") from None
    cols = [_canon(h) for h in header]
    if "timestamp" not in cols or not ({"util_gpu", "mem_used", "power_w"} & set(cols)):
        raise TraceError(path, "not an nvidia-smi CSV log (needs a timestamp column and GPU metrics)")
    by_time: dict[float, list[GpuSample]] = {}
    bad = 0
    first_bad = ""
    damage: list[str] = []
    for lineno, row in enumerate(_until_damaged(rows, damage), start=2):
        if not row or all(not c.strip() for c in row):
            continue
        try:
            if len(row) != len(cols):
                raise ValueError(f"{len(row)} fields, header has {len(cols)}")
            rec = dict(zip(cols, row))
            ts = _time(rec["timestamp"])
            kw: dict = {"index": int(_number(rec.get("index", "0")) or 0)}
            if not 0 <= kw["index"] < 1 << 15:
                raise ValueError(f"GPU index {kw['index']} out of range")
            if rec.get("name"):
                kw["name"] = rec["name"].strip()
            for k in ("util_gpu", "util_mem", "power_w", "power_limit_w", "temperature_c", "sm_clock_mhz"):
                if k in rec:
                    kw[k] = _number(rec[k])
            for k in ("mem_used", "mem_total"):
                if k in rec:
                    v = _number(rec[k])
                    kw[k] = None if v is None else int(v * _MIB)
            by_time.setdefault(ts, []).append(GpuSample(**kw))
        except (ValueError, OverflowError, csv.Error) as e:
            bad += 1
            first_bad = first_bad or f"line {lineno}: {e}"
    if damage:
        bad += 1
        first_bad = first_bad or f"stopped reading: {damage[0]}"
    if not by_time:
        raise TraceError(path, f"no readable rows in the CSV ({first_bad or 'no data rows'})")
    times = sorted(by_time)
    gaps = [b - a for a, b in zip(times, times[1:])]
    typical = sorted(gaps)[len(gaps) // 2] if gaps else 1.0
    snaps = []
    for i, ts in enumerate(times):
        dt = typical if i == 0 else ts - times[i - 1]
        snaps.append(Snapshot(t=round(ts - times[0], 6), dt=round(dt, 6), wall=ts,
                              gpus=tuple(sorted(by_time[ts], key=lambda g: g.index))))
    warnings = [f"{bad} malformed CSV rows skipped (first: {first_bad})"] if bad else []
    header_doc = {"schema": "nvidia-smi-csv", "started": times[0], "interval_s": typical, "source": "nvidia-smi CSV"}
    return Recording(path, header_doc, snaps, None, warnings)
