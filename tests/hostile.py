"""Traces whose every kept string is hostile: terminal escapes, controls, bidirectional and
line-separator characters, Rich markup and Markdown/HTML metacharacters.

Shared by ``tests/test_hostile_strings.py`` (text, Markdown, HTML and the app's rendered output)
and ``tests/test_tui_tmux.py`` (the app in a real terminal). Each field gets its own tag in front
of the payload (``DEV``, ``THREAD``, …) so a failure names the field that leaked.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
from pathlib import Path

DATA = Path(__file__).parent / "data"

# What a trace can hold to drive a terminal or a document, all in one string.
PAYLOAD = (
    "x\x1b]0;PWNED\x07y"  # OSC 0: sets the window / pane title
    "\x1b[2J\x1b[H"  # CSI: clears the screen, homes the cursor
    "\x1b]8;;http://x\x1b\\L\x1b]8;;\x1b\\"  # OSC 8: a hyperlink
    "\x07\x00\r\x08\x9b31m\x85"  # BEL, NUL, CR, backspace, C1 CSI, C1 NEL
    "\u202e\u2066\u200e\u200f\u061c"  # bidi: override, isolate, marks
    "\u2028\u2029"  # line / paragraph separators
    "[link=http://e]m[/link][reverse]r"  # Rich markup
    "<b>&amp;|*_`#"  # HTML and Markdown metacharacters
)
LONE_SURROGATE = "\ud800"

# What no text, Markdown or HTML output and no frame the app draws may contain. (Tab and newline
# are the renderers' own layout; every other C0/C1 control, DEL, bidi control, line/paragraph
# separator and lone surrogate comes from a trace.)
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]")
# How the payload must appear instead: its escapes spelled out.
SHOWN = ("\\x1b]0;PWNED\\x07y", "\\u202e", "\\u2028", "\\u2029", "\\u200f", "\\x00")


def hostile(tag: str, payload: str = PAYLOAD) -> str:
    return f"{tag}:{payload}"


def raw_chars(text: str) -> list[str]:
    """The unsafe characters in ``text``, each with a little context (empty when safe)."""
    return [repr(text[max(0, m.start() - 30) : m.end() + 10]) for m in RAW.finditer(text)]


# --- Kineto ------------------------------------------------------------------------------------------

KINETO_SEED = DATA / "kineto" / "hta_mi250_minitoy_train.json.gz"

# The fields of a Kineto trace the reader keeps (collectors/kineto.py), each tagged.
KINETO_FIELDS = (
    "DEV",  # deviceProperties[].name
    "TRACENAME",  # traceName (top-level metadata)
    "BACKEND",  # distributedInfo.backend
    "META",  # any other top-level string
    "PROC",  # process_name / process_labels metadata
    "THREAD",  # thread_name metadata
    "TID",  # a thread id that is a string
    "STEP",  # ProfilerStep#N annotation (the step label)
    "RANGE",  # user_annotation / gpu_user_annotation (record_function) names
    "OP",  # cpu_op names
    "DIMS",  # args "Input Dims" / "Input type"
    "KERNEL",  # kernel names
    "RUNTIME",  # cuda_runtime call names
    "COLL",  # args "Collective name" / "Process Group Name"
    "CAT",  # an unknown event category (named in a reader warning)
    "MEMCPY",  # gpu_memcpy names
)


def kineto_doc(payload: str = PAYLOAD, surrogate: bool = True) -> dict:
    """The bundled MI250 trace with ``payload`` in every field the reader keeps. The top-level
    fields come before ``traceEvents`` so a reader that stops early would still have them."""

    def hostile(tag: str) -> str:
        return f"{tag}:{payload}"

    doc = json.loads(gzip.decompress(KINETO_SEED.read_bytes()))
    events = doc.pop("traceEvents")
    for p in doc["deviceProperties"]:
        p["name"] = hostile("DEV")
    doc["traceName"] = hostile("TRACENAME")
    doc["distributedInfo"] = {"backend": hostile("BACKEND"), "rank": 0, "world_size": 1}
    doc["hostName"] = hostile("META")
    first_ts = min(e["ts"] for e in events if e.get("ph") == "X")
    main_tid = next(e["tid"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    odd_tid = f"t{payload}"
    for e in events:
        name, cat, args = e.get("name"), e.get("cat"), e.get("args")
        if e.get("ph") == "M":
            if name == "process_name":
                args["name"] = hostile("PROC")
            elif name == "process_labels":
                args["labels"] = hostile("PROC")
            elif name == "thread_name":
                args["name"] = hostile("THREAD")
            continue
        if cat == "user_annotation" and str(name).startswith("ProfilerStep#"):
            e["name"] = f"{name}{hostile('STEP')}"
        elif cat in ("user_annotation", "gpu_user_annotation"):
            e["name"] = hostile("RANGE")
        elif cat == "cpu_op":
            e["name"] = hostile("OP") + (LONE_SURROGATE if surrogate else "")
            args = e.setdefault("args", {})
            args["Input Dims"] = [[2, 3], hostile("DIMS")]
            args["Input type"] = [hostile("DIMS")]
        elif cat == "kernel":
            e["name"] = hostile("KERNEL")
            args["Collective name"] = hostile("COLL")
            args["Process Group Name"] = hostile("COLL")
        elif cat == "cuda_runtime" and "Launch" not in str(name):
            e["name"] = hostile("RUNTIME")
        elif cat == "gpu_memcpy":
            e["name"] = hostile("MEMCPY")
    # a second host thread named by a string tid, and an event of a category no reader knows
    events.append(
        {"ph": "X", "cat": "cpu_op", "name": hostile("OP"), "pid": 1, "tid": odd_tid, "ts": first_ts, "dur": 5}
    )
    events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": odd_tid, "args": {"name": hostile("THREAD")}})
    events.append({"ph": "X", "cat": hostile("CAT"), "name": "z", "pid": 1, "tid": main_tid, "ts": first_ts, "dur": 1})
    doc["traceEvents"] = events
    return doc


def write_kineto(path: Path, payload: str = PAYLOAD, surrogate: bool = True) -> Path:
    path.write_text(json.dumps(kineto_doc(payload, surrogate)))  # ensure_ascii: a lone surrogate is valid "\ud800"
    return path


# --- Nsight Systems ----------------------------------------------------------------------------------

NSYS_SEED = DATA / "nsys" / "cs336_small_train_step_a100.sqlite"

NSYS_FIELDS = (
    "STR",  # every StringIds entry: kernel, runtime call, NVTX range (textId) and thread names
    "NVTX",  # NVTX_EVENTS.text (inline range names)
    "DEV",  # TARGET_INFO_GPU.name
    "META",  # META_DATA_EXPORT values
)


def write_nsys(path: Path, seed: Path = NSYS_SEED) -> Path:
    """A copy of a bundled export with a hostile string in every string the reader keeps."""
    shutil.copyfile(seed, path)
    con = sqlite3.connect(path)
    try:
        con.execute("UPDATE StringIds SET value = value || ?", (hostile("STR"),))
        con.execute("UPDATE NVTX_EVENTS SET text = text || ? WHERE text IS NOT NULL", (hostile("NVTX"),))
        con.execute("UPDATE TARGET_INFO_GPU SET name = ?", (hostile("DEV"),))
        for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone():
                con.execute(f"UPDATE {t} SET value = value || ?", (hostile("META"),))
        con.commit()
    finally:
        con.close()
    return path


# --- PyTorch memory snapshot -----------------------------------------------------------------------

SNAPSHOT_SEED = DATA / "memory" / "mem_cs336_nothanmin_trainstep.pickle.gz"

SNAPSHOT_FIELDS = (
    "FILE",  # a frame's file name
    "FUNC",  # a frame's function name
)


def write_snapshot(path: Path) -> Path:
    """The bundled snapshot with a hostile file and function name in every stack frame."""
    import pickle

    from trainscope.collectors.safe_pickle import loads_plain

    obj = loads_plain(gzip.decompress(SNAPSHOT_SEED.read_bytes()))
    frames = [fr for seg in obj["segments"] for b in seg["blocks"] for fr in b.get("frames") or ()]
    frames += [fr for tr in obj.get("device_traces") or () for e in tr for fr in e.get("frames") or ()]
    for fr in frames:
        fr["filename"] = hostile("FILE") + LONE_SURROGATE + ".py"
        fr["name"] = hostile("FUNC")
    path.write_bytes(pickle.dumps(obj, protocol=4))
    return path
