"""Mutations of real input files, and the CLI contract every mutant must keep.

Shared by the property-based tests (``tests/test_fuzz.py``, Hypothesis draws the ``random.Random``)
and the long-run fuzzer (``benchmarks/fuzz.py``, a seeded ``random.Random`` per mutant).

The contract (the project's rule for bad input): ``trainscope`` exits 0 with valid output (JSON
without NaN/Infinity when JSON was asked for), or exits 2 with exactly one line on stderr. Never 1
(an internal error), never a traceback, never a hang.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import random
import sqlite3
import struct
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Seed:
    """A small real input: its format, path and the command that reads it."""

    fmt: str  # kineto | nsys | pickle | timeline | csv | recording
    path: Path

    @property
    def suffix(self) -> str:
        name = self.path.name
        for s in (".pt.trace.json.gz", ".json.gz", ".raw.json.gz", ".pickle.gz", ".sqlite", ".csv", ".jsonl"):
            if name.endswith(s):
                return s
        return self.path.suffix


SEEDS = [
    Seed("kineto", DATA / "kineto" / "hta_cpu_only.pt.trace.json.gz"),
    Seed("kineto", DATA / "kineto" / "hta_mi250_minitoy_train.json.gz"),
    Seed("nsys", DATA / "nsys" / "pipit_saxpy_a100_nsys2022.sqlite"),
    Seed("pickle", DATA / "memory" / "mem_cs336_nothanmin_trainstep.pickle.gz"),
    Seed("timeline", DATA / "memory" / "hta_memory_timeline.raw.json.gz"),
    Seed("csv", DATA / "nvml" / "nanogpt_8gpu_head.csv"),
    Seed("recording", DATA / "nvml" / "nanogpt_8gpu_head.recording.jsonl"),
]


def seed_bytes(seed: Seed) -> bytes:
    """The seed's content, decompressed (mutations work on the plain bytes; some are re-gzipped)."""
    raw = seed.path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


# --- hostile values ---------------------------------------------------------------------------------

HUGE_INTS = [2**63, 2**63 - 1, -(2**63) - 1, 2**64, 10**20, 9_200_000_000_000_000, 2**31, 32768, -1, 0]
HUGE_FLOATS = ["1e308", "-1e308", "9.3e15", "1e12", "NaN", "Infinity", "-Infinity", "1e400", "-0.0", "4.9e-324"]
NASTY_STRINGS = [
    "k\ud800",
    "\udfff",
    "\x1b[2J\x1b]0;pwned\x07",
    "line1\nline2\rcr",
    "\x9b31m",
    "[link=http://evil]x[/link]",
    "[reverse]r[/reverse]",
    "\x00nul",
    "",
    "ProfilerStep#",
    "Memcpy HtoD (Pageable -> Device)",
    "A" * 70_000,
]


def _hostile_json_value(rnd: random.Random):
    """A JSON value (as text) that breaks naive readers."""
    k = rnd.randrange(8)
    if k == 0:
        return str(rnd.choice(HUGE_INTS))
    if k == 1:
        return rnd.choice(HUGE_FLOATS)
    if k == 2:
        return json.dumps(rnd.choice(NASTY_STRINGS))
    if k == 3:
        depth = rnd.choice([50, 1000, 100_000])
        return "[" * depth + "]" * depth
    if k == 4:
        return rnd.choice(["null", "true", "[]", "{}", '"12"', '"x"', "[1,2]", '{"a":1}'])
    if k == 5:
        return json.dumps("K" * rnd.choice([1 << 10, 1 << 20]))
    if k == 6:
        return str(rnd.choice([1, -1]) * rnd.choice([10**30, 2**100]))
    return str(rnd.randint(-(2**40), 2**40))


# --- generic byte mutations -------------------------------------------------------------------------


def mutate_bytes(data: bytes, rnd: random.Random) -> bytes:
    b = bytearray(data)
    if not b:
        return bytes(rnd.randbytes(rnd.randrange(1, 64)))
    k = rnd.randrange(6)
    n = len(b)
    if k == 0:  # flip bits
        for _ in range(rnd.randint(1, 8)):
            i = rnd.randrange(n)
            b[i] ^= 1 << rnd.randrange(8)
    elif k == 1:  # truncate
        del b[rnd.randrange(n) :]
    elif k == 2:  # insert random bytes
        i = rnd.randrange(n)
        b[i:i] = rnd.randbytes(rnd.randint(1, 32))
    elif k == 3:  # delete a chunk
        i = rnd.randrange(n)
        del b[i : i + rnd.randint(1, 4096)]
    elif k == 4:  # duplicate a chunk
        i = rnd.randrange(n)
        chunk = b[i : i + rnd.randint(1, 4096)]
        j = rnd.randrange(n)
        b[j:j] = chunk
    else:  # set interesting bytes
        i = rnd.randrange(n)
        v = rnd.choice([b"\x00", b"\xff", b"\x7f", b"\x80", b"\xff\xff\xff\x7f", b"\xff" * 8])
        b[i : i + len(v)] = v
    return bytes(b)


# --- JSON-aware mutations -----------------------------------------------------------------------------


def _json_token_spans(text: str, rnd: random.Random, limit: int = 2000) -> list[tuple[int, int]]:
    """Spans of scalar values (numbers, strings, literals) after a ':' in the text, sampled."""
    spans = []
    i = 0
    n = len(text)
    starts = [m for m in range(n) if text[m] == ":"] if n < 2_000_000 else []
    if not starts:
        return spans
    for s in rnd.sample(starts, min(limit, len(starts))):
        j = s + 1
        while j < n and text[j] in " \t\r\n":
            j += 1
        if j >= n:
            continue
        if text[j] == '"':
            k = j + 1
            while k < n and text[k] != '"':
                k += 2 if text[k] == "\\" else 1
            spans.append((j, min(k + 1, n)))
        elif text[j] in "-0123456789tfnNI":
            k = j
            while k < n and text[k] not in ",}] \t\r\n":
                k += 1
            spans.append((j, k))
        i += 1
    return spans


def mutate_json_text(text: str, rnd: random.Random) -> str:
    """Replace a few scalar values with hostile ones, or drop/alter keys; text stays mostly JSON."""
    spans = _json_token_spans(text, rnd, limit=rnd.randint(1, 6))
    if not spans:
        return text
    spans.sort(reverse=True)
    out = text
    for a, b in spans:
        out = out[:a] + _hostile_json_value(rnd) + out[b:]
    return out


def mutate_json_structure(text: str, rnd: random.Random) -> str:
    """Structural edits on the parsed document: drop keys, change types of whole arrays, etc."""
    try:
        doc = json.loads(text)
    except ValueError:
        return mutate_json_text(text, rnd)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    k = rnd.randrange(6)
    if isinstance(events, list) and events:
        if k == 0:  # drop a field from many events
            key = rnd.choice(["ts", "dur", "ph", "name", "cat", "args", "pid", "tid"])
            for e in rnd.sample(events, min(len(events), rnd.randint(1, len(events)))):
                if isinstance(e, dict):
                    e.pop(key, None)
        elif k == 1:  # wrong type for a field
            key = rnd.choice(["ts", "dur", "name", "args", "pid", "tid", "cat"])
            val = rnd.choice([None, "x", [], {}, True, 1e308, -5, "123.5"])
            for e in rnd.sample(events, min(len(events), rnd.randint(1, 20))):
                if isinstance(e, dict):
                    e[key] = val
        elif k == 2:  # events that are not objects
            for _ in range(rnd.randint(1, 10)):
                events.insert(rnd.randrange(len(events) + 1), rnd.choice([1, "x", None, [], [1, 2]]))
        elif k == 3:  # huge or hostile args
            for e in rnd.sample(events, min(len(events), rnd.randint(1, 20))):
                if isinstance(e, dict) and isinstance(e.get("args"), dict):
                    key = rnd.choice(
                        [
                            "device",
                            "stream",
                            "correlation",
                            "bytes",
                            "flops",
                            "Input Dims",
                            "Bytes",
                            "Total Allocated",
                            "Device Id",
                            "Device Type",
                        ]
                    )
                    e["args"][key] = rnd.choice([2**63, 2**64, -1, 1e308, "x", None, [[1] * 5], float("nan")])
        elif k == 4:  # top-level keys
            if isinstance(doc, dict):
                key = rnd.choice(["deviceProperties", "distributedInfo", "baseTimeNanoseconds", "traceEvents"])
                doc[key] = rnd.choice([None, 1, "x", [1, {"id": 2**70}], {"rank": 2**64}, float("inf"), []])
        else:  # duplicate events (same timestamps)
            extra = rnd.sample(events, min(len(events), rnd.randint(1, 50)))
            events.extend(extra)
    elif isinstance(doc, list) and doc:  # memory timeline: [[ts...], [[bytes...]...]]
        i = rnd.randrange(len(doc))
        doc[i] = rnd.choice([None, 1, "x", [], [2**64], [[float("nan")]], doc[i]])
    return json.dumps(doc, allow_nan=True)


# --- per-format mutators ----------------------------------------------------------------------------


def mutate_jsonish(data: bytes, rnd: random.Random) -> bytes:
    k = rnd.randrange(4)
    if k == 0:
        return mutate_bytes(data, rnd)
    text = data.decode("utf-8", errors="replace")
    if k == 1:
        return mutate_json_structure(text, rnd).encode("utf-8", errors="surrogatepass")
    return mutate_json_text(text, rnd).encode("utf-8", errors="surrogatepass")


def mutate_lines(data: bytes, rnd: random.Random, csv_mode: bool) -> bytes:
    """Recordings (JSON lines) and CSV logs: edit a few lines."""
    lines = data.split(b"\n")
    k = rnd.randrange(5)
    if k == 0 or len(lines) < 3:
        return mutate_bytes(data, rnd)
    i = rnd.randrange(len(lines)) if rnd.random() < 0.7 else 0
    line = lines[i].decode("utf-8", errors="replace")
    if k == 1:  # hostile value in a line
        if csv_mode:
            cells = line.split(",")
            j = rnd.randrange(len(cells))
            cells[j] = rnd.choice(
                [str(v) for v in HUGE_INTS]
                + HUGE_FLOATS
                + [
                    "x",
                    "",
                    '"a,b"',
                    "1e308 %",
                    "-1e308",
                    "99999",
                    "\x1b[2J",
                    "9999-12-31T23:59:59",
                    "0001-01-01 00:00:00",
                ]
            )
            line = ",".join(cells)
        else:
            line = mutate_json_text(line, rnd)
        lines[i] = line.encode("utf-8", errors="surrogatepass")
    elif k == 2:  # deep nesting or a huge line
        lines[i] = rnd.choice(
            [b"[" * 200_000, b'{"type":"sample","t":' + b"[" * 5000 + b"]" * 5000 + b"}", b"x" * (1 << 20)]
        )
    elif k == 3:  # drop a column (CSV) or a key (JSON)
        if csv_mode:
            j = rnd.randrange(max(1, lines[0].count(b",") + 1))
            lines = [b",".join(c for n, c in enumerate(ln.split(b",")) if n != j) for ln in lines]
        else:
            try:
                obj = json.loads(line)
                if isinstance(obj, dict) and obj:
                    obj.pop(rnd.choice(list(obj)), None)
                    lines[i] = json.dumps(obj).encode()
            except ValueError:
                pass
    else:  # duplicate or shuffle lines
        j = rnd.randrange(len(lines))
        lines.insert(j, lines[i])
    return b"\n".join(lines)


def mutate_sqlite(path: str, rnd: random.Random) -> None:
    """Edit an Nsight export copy in place with SQL (or its bytes)."""
    k = rnd.randrange(6)
    if k == 0:
        data = Path(path).read_bytes()
        Path(path).write_bytes(mutate_bytes(data, rnd))
        return
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        t = rnd.choice(tables)
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
        if k == 1:
            con.execute(f'DROP TABLE "{t}"')
        elif k == 2 and cols:
            try:
                con.execute(f'ALTER TABLE "{t}" DROP COLUMN "{rnd.choice(cols)}"')
            except sqlite3.Error:
                con.execute(f'DROP TABLE "{t}"')
        elif k == 3 and cols:
            c = rnd.choice(cols)
            v = rnd.choice(
                [
                    2**63 - 1,
                    -(2**63),
                    9.3e18,
                    float("inf"),
                    float("-inf"),
                    None,
                    "x",
                    b"\x00" * 8,
                    "k\ud800".encode("utf-8", "surrogatepass"),
                    1e308,
                    -1,
                    32768,
                    "\x1b[2J",
                ]
            )
            con.execute(f'UPDATE "{t}" SET "{c}" = ? WHERE rowid % ? = 0', (v, rnd.randint(1, 5)))
        elif k == 4:  # a malformed schema
            con.execute("PRAGMA writable_schema=ON")
            con.execute(
                "UPDATE sqlite_master SET sql = ? WHERE name = ?",
                (rnd.choice(["CREATE TABLE x(", "garbage", "CREATE TABLE t (a INT, b"]), t),
            )
        else:
            rows = con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]
            con.execute(f'DELETE FROM "{t}" WHERE rowid % ? != 0', (max(1, rows // rnd.randint(1, 10) or 1),))
        con.commit()
    except sqlite3.Error:
        pass
    finally:
        con.close()


def _pickle_ops(rnd: random.Random) -> bytes:
    """Hand-made hostile pickles: huge declared lengths, DUP/memo growth, bad FLOAT text, globals."""
    k = rnd.randrange(10)
    if k == 0:
        return b"\x80\x04\x96" + struct.pack("<Q", rnd.choice([2**62, 2**40, 2**33])) + b"abc."  # BYTEARRAY8
    if k == 1:
        return b"\x80\x04\x8e" + struct.pack("<Q", rnd.choice([2**62, 2**40, 2**33])) + b"abc."  # BINBYTES8
    if k == 2:
        return b"\x80\x04\x8d" + struct.pack("<Q", 2**40) + b"abc."  # BINUNICODE8
    if k == 3:
        return b"\x80\x02B" + struct.pack("<I", 2**31 - 1) + b"abc."  # BINBYTES
    if k == 4:  # DUP bomb: one string duplicated millions of times into a list
        return b"\x80\x04](X\x04\x00\x00\x00abcd" + b"2" * rnd.choice([10**5, 10**6, 3 * 10**6]) + b"e."
    if k == 5:
        return b"\x80\x02F" + rnd.choice([b"notafloat", b"1e", b"nan(", b"1" * 5000]) + b"\n."
    if k == 6:
        return b"cos\nsystem\n(S'echo pwned'\ntR."
    if k == 7:  # memo growth: LONG_BINPUT with huge indices
        return b"\x80\x02]r" + struct.pack("<I", 2**31) + b"."
    if k == 8:
        return b"\x80\x02I" + b"9" * rnd.choice([5000, 100_000]) + b"\n."
    return b"\x80\x05\x95" + struct.pack("<Q", 2**60) + b"]."  # FRAME with a huge length


def mutate_pickle(data: bytes, rnd: random.Random) -> bytes:
    k = rnd.randrange(5)
    if k == 0:
        return _pickle_ops(rnd)
    if k == 1:  # re-pickle the plain data at another protocol (0 and 1 included) after a value edit
        from trainscope.collectors.safe_pickle import loads_plain

        obj = loads_plain(data)
        _mutate_tree(obj, rnd)
        return pickle.dumps(obj, protocol=rnd.randrange(0, 6))
    return mutate_bytes(data, rnd)


def _mutate_tree(obj, rnd: random.Random) -> None:
    """Replace a few leaves of a dict/list tree with hostile values."""
    for _ in range(rnd.randint(1, 5)):
        node = obj
        for _ in range(rnd.randint(1, 8)):
            if isinstance(node, dict) and node:
                key = rnd.choice(list(node))
                child = node[key]
                if not isinstance(child, (dict, list)) or rnd.random() < 0.2:
                    node[key] = rnd.choice(
                        [2**64, -1, 1e308, float("nan"), "x", None, [], {}, "k\ud800", 2**63, "\x1b[2J", True]
                    )
                    break
                node = child
            elif isinstance(node, list) and node:
                i = rnd.randrange(len(node))
                child = node[i]
                if not isinstance(child, (dict, list)) or rnd.random() < 0.2:
                    node[i] = rnd.choice([2**64, -1, 1e308, float("nan"), "x", None, {}, 2**63, "[reverse]x"])
                    break
                node = child
            else:
                break


def make_mutant(seed: Seed, rnd: random.Random, folder: str) -> str:
    """Write one mutant of ``seed`` into ``folder``; return its path."""
    data = seed_bytes(seed)
    name = "mutant" + seed.suffix
    path = os.path.join(folder, name)
    if seed.fmt == "nsys":
        Path(path).write_bytes(data)
        mutate_sqlite(path, rnd)
        return path
    if seed.fmt == "pickle":
        out = mutate_pickle(data, rnd)
    elif seed.fmt in ("kineto", "timeline"):
        out = mutate_jsonish(data, rnd)
    else:
        out = mutate_lines(data, rnd, csv_mode=seed.fmt == "csv")
    gz = seed.path.name.endswith(".gz")
    if gz and rnd.random() < 0.85:
        out = gzip.compress(out, compresslevel=1)
        if rnd.random() < 0.1:
            out = mutate_bytes(out, rnd)  # damage the compressed stream itself
    Path(path).write_bytes(out)
    return path


def commands_for(seed: Seed, path: str, rnd: random.Random) -> list[list[str]]:
    """The CLI invocations that read this format (argv after ``trainscope``)."""
    fmt = rnd.choice(["json", "json", "json", "text", "markdown"])
    if seed.fmt in ("pickle", "timeline"):
        return [["memory", path, "--format", fmt, "-q"]]
    cmds = [["analyze", path, "--format", fmt, "-q"]]
    if seed.fmt in ("csv", "recording"):
        cmds.append(["watch", "--replay", path, "--headless", "--format", "json" if fmt == "json" else "text"])
    return cmds


# --- the contract -----------------------------------------------------------------------------------


def _reject_constant(name: str):
    raise ValueError(f"non-finite number {name} in JSON output")


def classify(argv: list[str], rc: int | None, out: str, err: str) -> str:
    """``clean`` | ``refused`` (the two allowed outcomes) or what went wrong."""
    if rc is None:
        return "hang"
    if "Traceback (most recent call last)" in err or "Traceback (most recent call last)" in out:
        return "traceback"
    if rc in (-9, 137) or "out of memory" in err or "MemoryError" in err:
        return "oom"
    if rc == 2:
        lines = err.strip("\n").split("\n")
        return "refused" if len(lines) == 1 and err.endswith("\n") else "multi-line"
    if rc == 0:
        if "--format" in argv and argv[argv.index("--format") + 1] == "json":
            try:
                if argv[0] == "watch":
                    for line in out.splitlines():
                        json.loads(line, parse_constant=_reject_constant)
                else:
                    json.loads(out, parse_constant=_reject_constant)
            except ValueError:
                return "bad-json"
        return "clean"
    if rc == 1:
        return "internal"
    return f"exit-{rc}"


ALLOWED = ("clean", "refused")


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    """Run ``trainscope ARGV`` in this process with captured stdout and stderr."""
    import contextlib

    from trainscope.cli import main

    # Like a real stdout: UTF-8, strict (a lone surrogate fails here as it would in a terminal);
    # stderr with backslashreplace, as Python sets it up.
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse
            rc = e.code if isinstance(e.code, int) else 2
        except UnicodeEncodeError as e:  # what a real stdout would raise past main()
            rc, _ = 1, err.write(f"Traceback (most recent call last):\n{e!r}\n")
    out.flush()
    err.flush()
    return rc, out.buffer.getvalue().decode("utf-8", "replace"), err.buffer.getvalue().decode("utf-8", "replace")


# --- semantic mutations: valid by format, absurd by meaning ----------------------------------------
#
# Each mutant stays a well-formed Kineto trace; what changes is what it means (a duration scaled by
# 1e6, events present twice, steps split and overlapping, one GPU stream's clock shifted, a rank's
# clock offset by days). The contract: the analysis keeps its verdict and headline numbers, or says
# why in a warning (a repair of the invariant pass, docs/repairs.md). A change without a new warning
# is a *silent* change — the defect the semantic fuzzer hunts.

SEMANTIC_SEEDS = [
    Seed("kineto", DATA / "kineto" / "resnet50_v100_num_workers_0.pt.trace.json.gz"),
    Seed("kineto", DATA / "kineto" / "hta_mi250_minitoy_train.json.gz"),
    Seed("kineto", DATA / "kineto" / "tracelens_mi300x_resnet_ckpt.json.gz"),
    Seed("kineto", DATA / "kineto" / "hta_a100_nccl.json.gz"),
    Seed("ranks", DATA / "kineto" / "hta_dlrm_ws128_2ranks"),
]

_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_DAY_US = 86_400 * 1e6


def _is_gpu(e: dict) -> bool:
    return str(e.get("cat", "")).lower() in _GPU_CATS and e.get("ph") == "X"


def _is_step(e: dict) -> bool:
    return str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"


def _timed(e: dict) -> bool:
    return e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))


def sem_scale_duration(events: list, rnd: random.Random) -> tuple[list, str]:
    pool = [i for i, e in enumerate(events) if _timed(e) and e["dur"] > 0 and (_is_gpu(e) or rnd.random() < 0.3)]
    i = rnd.choice(pool)
    out = list(events)
    out[i] = {**events[i], "dur": events[i]["dur"] * 1e6}
    return out, f"duration x1e6 of {events[i].get('name', '?')[:40]!r}"


def sem_duplicate(events: list, rnd: random.Random) -> tuple[list, str]:
    how = rnd.choice(["kernels", "gpu", "all", "some"])
    if how == "kernels":
        extra = [dict(e) for e in events if str(e.get("cat", "")).lower() == "kernel"]
    elif how == "gpu":
        extra = [dict(e) for e in events if _is_gpu(e)]
    elif how == "all":  # the whole trace merged twice
        extra = [dict(e) for e in events if e.get("ph") == "X" and not _is_step(e)]
    else:
        gpu = [e for e in events if _is_gpu(e)]
        extra = [dict(e) for e in rnd.sample(gpu, max(1, len(gpu) // rnd.choice([2, 10, 100])))]
    return events + extra, f"{len(extra):,} events duplicated ({how})"


def sem_split_steps(events: list, rnd: random.Random) -> tuple[list, str]:
    """Each step marker of the host lane cut in two overlapping halves (a step recorded as two
    ranges that overlap)."""
    out, n = [], 0
    for e in events:
        if _is_step(e) and str(e.get("cat", "")).lower() != "gpu_user_annotation":
            a = rnd.uniform(0.3, 0.7)
            first = {**e, "dur": e["dur"] * (a + 0.1)}
            second = {**e, "name": f"ProfilerStep#{9000 + n}", "ts": e["ts"] + e["dur"] * a, "dur": e["dur"] * (1 - a)}
            out += [first, second]
            n += 1
        else:
            out.append(e)
    return out, f"{n} steps split into overlapping halves"


def sem_overlap_steps(events: list, rnd: random.Random) -> tuple[list, str]:
    steps = [e for e in events if _is_step(e)]
    shift = rnd.uniform(0.2, 0.8)
    extra = [{**s, "name": f"ProfilerStep#{500 + k}", "ts": s["ts"] + s["dur"] * shift} for k, s in enumerate(steps)]
    return events + extra, f"{len(extra)} steps marked twice, shifted by {shift:.2f} of a step"


def sem_stub_steps(events: list, rnd: random.Random) -> tuple[list, str]:
    steps = [e for e in events if _is_step(e)]
    lo, hi = min(s["ts"] for s in steps), max(s["ts"] + s["dur"] for s in steps)
    n = rnd.choice([10, 1000, 20000])
    extra = [
        {**steps[0], "name": f"ProfilerStep#{100000 + k}", "ts": lo + rnd.random() * (hi - lo), "dur": 0.4, "args": {}}
        for k in range(n)
    ]
    return events + extra, f"{n:,} stub step markers of 0.4 us"


_RUNTIME_CATS = {"cuda_runtime", "runtime", "cuda_driver"}


def _least_launch_gap(events: list, lane: tuple[str, str]) -> float | None:
    """The least start − launch-call start (µs) over the lane's GPU events linked to their launch."""
    launch = {
        e["args"].get("correlation"): e["ts"]
        for e in events
        if str(e.get("cat", "")).lower() in _RUNTIME_CATS and isinstance(e.get("args"), dict) and _timed(e)
    }
    gaps = [
        e["ts"] - launch[c]
        for e in events
        if _is_gpu(e)
        and (str(e.get("pid")), str(e.get("tid"))) == lane
        and isinstance(e.get("args"), dict)
        and (c := e["args"].get("correlation")) in launch
    ]
    return min(gaps) if gaps else None


def sem_shift_lane(events: list, rnd: random.Random) -> tuple[list, str]:
    """One GPU stream's clock shifted: back by 1 ms to 0.5 s *beyond* its least launch-to-start gap
    (its work then starts before its launch calls), or ahead by days. A smaller shift back (or a
    forward shift within the recording) is not drawn: it reads as a shorter (longer) launch queue,
    which no invariant can tell from a real one (docs/repairs.md)."""
    lanes = sorted({(str(e.get("pid")), str(e.get("tid"))) for e in events if _is_gpu(e)})
    lane = rnd.choice(lanes)
    least = _least_launch_gap(events, lane)
    if least is not None and rnd.random() < 0.6:
        by = -(max(least, 0.0) + rnd.uniform(1e3, 5e5))
    else:
        by = rnd.randint(1, 30) * _DAY_US
    out = [
        ({**e, "ts": e["ts"] + by} if _timed(e) and (str(e.get("pid")), str(e.get("tid"))) == lane else e)
        for e in events
    ]
    return out, f"GPU lane {lane} shifted by {by / 1e3:+,.1f} ms"


SEMANTIC_MUTATIONS = {
    "scale-duration": sem_scale_duration,
    "duplicate-events": sem_duplicate,
    "split-steps": sem_split_steps,
    "overlap-steps": sem_overlap_steps,
    "stub-steps": sem_stub_steps,
    "shift-lane": sem_shift_lane,
}


def _load_events(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


_ENCODED: dict[int, tuple[dict, str]] = {}  # id(seed event) → (the event, its JSON): encoded once per seed


def _encode(e) -> str:
    hit = _ENCODED.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    return json.dumps(e, separators=(",", ":"))


def _write(doc: dict, path: str) -> None:
    """``doc`` as JSON; events the mutant shares with its seed are encoded once per seed, so a mutant
    of a 100,000-event trace is written in a fraction of a second."""
    events = doc.get("traceEvents")
    with open(path, "w", encoding="utf-8") as f:
        if not isinstance(events, list):
            json.dump(doc, f, separators=(",", ":"))
            return
        head = json.dumps({k: v for k, v in doc.items() if k != "traceEvents"}, separators=(",", ":"))
        f.write(head[:-1] + ("," if len(head) > 2 else "") + '"traceEvents":[')
        f.write(",".join(_encode(e) for e in events))
        f.write("]}")


def _load_seed(path: Path) -> dict:
    doc = _SEMANTIC_CACHE.get(path)
    if doc is None:
        doc = _SEMANTIC_CACHE[path] = _load_events(path)
        for e in doc.get("traceEvents", []):
            _ENCODED[id(e)] = (e, json.dumps(e, separators=(",", ":")))
    return doc


_SEMANTIC_CACHE: dict[Path, dict] = {}


def semantic_mutant(seed: Seed, rnd: random.Random, folder: str, mutation: str | None = None) -> tuple[str, str, str]:
    """Write one semantic mutant of ``seed`` into ``folder``: (its path, the mutation, what was done). A rank
    directory gets one rank's clock offset by days, or a mutation of one rank's trace."""
    if seed.fmt == "ranks":
        files = sorted(p for p in seed.path.iterdir() if p.name.endswith(".json.gz"))
        victim = rnd.randrange(len(files))
        target = os.path.join(folder, "ranks")
        os.mkdir(target)
        what, name = "", ""
        for k, p in enumerate(files):
            doc = _load_seed(p)
            if k == victim:
                name = mutation or rnd.choice(["rank-offset", *SEMANTIC_MUTATIONS])
                if name == "rank-offset":
                    days = rnd.randint(1, 30) * _DAY_US
                    events = [
                        ({**e, "ts": e["ts"] + days} if isinstance(e.get("ts"), (int, float)) else e)
                        for e in doc["traceEvents"]
                    ]
                    what = f"rank file {p.name}: clock offset by {days / _DAY_US:.0f} days"
                else:
                    events, what = SEMANTIC_MUTATIONS[name](doc["traceEvents"], rnd)
                    what = f"rank file {p.name}: {what}"
                doc = {**doc, "traceEvents": events}
            _write(doc, os.path.join(target, p.name[:-3]))
        return target, f"ranks/{name}", what
    doc = _load_seed(seed.path)
    name = mutation or rnd.choice(list(SEMANTIC_MUTATIONS))
    events, what = SEMANTIC_MUTATIONS[name](doc["traceEvents"], rnd)
    path = os.path.join(folder, "mutant.json")
    _write({**doc, "traceEvents": events}, path)
    return path, name, what


def semantic_baseline(seed: Seed, folder: str) -> str:
    """The seed written as the mutants are (plain JSON), for the baseline document."""
    if seed.fmt == "ranks":
        target = os.path.join(folder, "ranks")
        os.mkdir(target)
        for p in sorted(q for q in seed.path.iterdir() if q.name.endswith(".json.gz")):
            _write(_load_seed(p), os.path.join(target, p.name[:-3]))
        return target
    path = os.path.join(folder, "seed.json")
    _write(_load_seed(seed.path), path)
    return path


def headline(doc: dict) -> dict:
    """What a reader of the report takes away: the verdict and the headline numbers."""
    v, b = doc.get("verdict") or {}, doc.get("breakdown") or {}
    return {
        "verdict": (v.get("axis"), v.get("bottleneck")),
        "step_p50_ms": (b.get("step_time_ms") or {}).get("p50"),
        "gpu_busy_pct": b.get("gpu_busy_pct"),
        "data_wait_pct": b.get("data_wait_pct"),
        "steps": len(doc.get("steps") or []),
        "kernels": (doc.get("kernels") or {}).get("count"),
        "kernel_ms": (doc.get("kernels") or {}).get("total_ms"),
    }


def headline_changes(before: dict, after: dict) -> list[str]:
    """The headline fields that moved: the verdict, a count, or a number by more than 2 % (1 point
    for a percentage)."""
    out = []
    for k, a in before.items():
        b = after.get(k)
        if k.endswith("_pct") and a is not None and b is not None:
            moved = abs(a - b) > 1.0
        elif isinstance(a, float) and b is not None:
            moved = abs(a - b) > 0.02 * max(abs(a), 1e-9)
        else:
            moved = a != b
        if moved:
            out.append(f"{k} {a} -> {b}")
    return out


def semantic_outcome(base_doc: dict, doc: dict) -> tuple[str, list[str]]:
    """``kept`` (headline unchanged), ``warned`` (changed, with a new warning saying why),
    ``silent-verdict`` or ``silent-numbers`` (changed without a new warning)."""
    moved = headline_changes(headline(base_doc), headline(doc))
    if not moved:
        return "kept", []
    new = [w for w in doc.get("warnings", []) if w not in base_doc.get("warnings", [])]
    if new:
        return "warned", moved
    return ("silent-verdict" if any(m.startswith("verdict ") for m in moved) else "silent-numbers"), moved
