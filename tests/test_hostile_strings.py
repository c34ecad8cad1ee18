"""A trace's strings never drive the terminal or a document (issue 35, item 3).

Every string the readers keep — device, process, thread, step, range, operator, kernel, runtime and
collective names, argument values, top-level metadata, unknown categories, the file's own name; the
Nsight string table, NVTX texts, GPU names and export metadata; a snapshot's file and function
names — is filled with terminal escapes (OSC 0 title, CSI clear, OSC 8 link), BEL, NUL, CR, C1
controls, bidi overrides, isolates and marks, line/paragraph separators, a lone surrogate, Rich
markup and Markdown/HTML metacharacters (tests/hostile.py). Text, Markdown, HTML (page and notebook
cell), JSON, ``repr`` and every frame the apps draw must hold none of those characters raw, and the
text ones must show them spelled out (``\\x1b]0;PWNED``, ``\\u202e``, ``\\u2028``).
"""

from __future__ import annotations

import asyncio
import html
import json
import re

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.fuzzing import run_in_process
from tests.hostile import KINETO_FIELDS
from tests.hostile import LONE_SURROGATE
from tests.hostile import NSYS_FIELDS
from tests.hostile import PAYLOAD
from tests.hostile import RAW
from tests.hostile import SHOWN
from tests.hostile import kineto_doc
from tests.hostile import raw_chars
from tests.hostile import write_kineto
from tests.hostile import write_nsys
from tests.hostile import write_snapshot
from trainscope.traces.safe_text import json_safe
from trainscope.traces.safe_text import markup_safe
from trainscope.traces.safe_text import safe_strings
from trainscope.traces.safe_text import visible
from trainscope.traces.safe_text import visible_lines

FILE_PART = PAYLOAD[:12]  # "x\x1b]0;PWNED\x07": file names hold the title escape too
# The kept fields each document shows (the others are kept for JSON, Perfetto and matching).
SHOWN_FIELDS = {
    "kineto": ("DEV", "STEP", "KERNEL", "CAT"),
    "nsys": ("STR", "NVTX", "DEV"),
    "ranks": ("DEV", "STEP", "KERNEL", "CAT"),
    "diff": ("DEV", "KERNEL", "CAT", "STR"),
    "memory": ("FUNC",),
}


# --- the sanitizer ----------------------------------------------------------------------------------

UNSAFE_CHARS = (
    [chr(c) for c in range(0x20)]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + list("\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
    + ["\ud800", "\udbff", "\udc00", "\udfff"]
)


def test_visible_spells_out_every_control_bidi_and_separator_character():
    for c in UNSAFE_CHARS:
        shown = visible(f"a{c}b")
        assert not RAW.search(shown) and "\t" not in shown and "\n" not in shown, repr(c)
        assert shown.startswith("a\\") and shown.endswith("b"), (repr(c), shown)
    assert visible("\u2028\u2029\u200e\u200f\u061c") == "\\u2028\\u2029\\u200e\\u200f\\u061c"
    assert visible("\x85") == "\\x85"
    assert visible_lines("a\u2028b\nc") == "a\\u2028b\nc"  # trainscope's own line breaks stay


hostile_text = st.text(
    alphabet=st.sampled_from(UNSAFE_CHARS + list("ab[]/=<>&*_`#|\\ ;:ü€😀")),
    max_size=40,
)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(hostile_text)
def test_every_renderer_escape_leaves_no_raw_character(s):
    from trainscope.reports.html import _e
    from trainscope.reports.html import _pre
    from trainscope.reports.output import to_json

    for shown in (visible(s), visible_lines(s), markup_safe(s), _e(s), _pre(s), to_json({"k": s, s: 1})):
        assert not RAW.search(shown), (s, shown)
    assert visible(visible(s)) == visible(s)  # escaping twice changes nothing: renderers may nest
    assert html.unescape(_e(s)) == visible(s)
    assert json.loads(to_json({"k": s}))["k"] == json_safe({"k": s})["k"]  # the same value, escaped
    if not re.search("[\ud800-\udfff]", s):
        assert json.loads(to_json({"k": s}))["k"] == s


def test_json_escapes_c1_bidi_and_separators_and_reads_back_the_same():
    from trainscope.reports.output import to_json

    doc = {"name": PAYLOAD, "nested": [PAYLOAD + LONE_SURROGATE]}
    text = to_json(doc)
    assert not raw_chars(text)
    assert "\\u202e" in text and "\\u2028" in text and "\\u0085" in text and "\\u009b" in text
    back = json.loads(text)
    assert back["name"] == PAYLOAD and back["nested"] == [PAYLOAD + "\\ud800"]


# --- the documents ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture(scope="module")
def traces(hostile_dir):
    """A hostile Kineto trace, Nsight export, rank directory and memory snapshot, by kind."""
    ranks = hostile_dir / f"ranks{FILE_PART}"
    ranks.mkdir()
    for r in (0, 1):
        doc = kineto_doc()
        doc["distributedInfo"].update(rank=r, world_size=2)
        (ranks / f"rank{r}{FILE_PART}.json").write_text(json.dumps(doc))
    return {
        "kineto": write_kineto(hostile_dir / f"k{FILE_PART}.json"),
        "nsys": write_nsys(hostile_dir / f"n{FILE_PART}.sqlite"),
        "ranks": ranks,
        "snapshot": write_snapshot(hostile_dir / f"s{FILE_PART}.pickle"),
    }


@pytest.fixture(scope="module")
def results(traces):
    """The api results over them: each kind's analysis, the diff Kineto → Nsight, the snapshot's memory report."""
    from trainscope import api

    out = {kind: api.analyze(str(traces[kind])) for kind in ("kineto", "nsys", "ranks")}
    out["diff"] = api.diff(str(traces["kineto"]), str(traces["nsys"]))
    out["memory"] = api.memory(str(traces["snapshot"]))
    return out


def rendered(result, fmt: str) -> str:
    from trainscope.reports.formats import render

    if fmt == "notebook":
        return result._repr_html_()
    if fmt == "repr":
        return repr(result)
    return str(render(fmt, result.output()))


def plain(text: str, fmt: str) -> str:
    """What a reader sees: HTML entities and Markdown's backslash escapes undone."""
    if fmt in ("html", "notebook"):
        return html.unescape(text)
    if fmt == "markdown":
        return html.unescape(re.sub(r"\\([\\`*_{}\[\]()#+\-.!|<>])", r"\1", text))
    return text


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "notebook", "json", "repr"])
@pytest.mark.parametrize("kind", ["kineto", "nsys", "ranks", "diff", "memory"])
def test_documents_hold_no_raw_character_and_show_the_escapes(results, kind, fmt):
    out = rendered(results[kind], fmt)
    assert not raw_chars(out), raw_chars(out)[:5]
    assert "PWNED" in out
    if fmt == "json":
        assert "\\u001b]0;PWNED\\u0007y" in out and "\\u202e" in out and "\\u2028" in out
        return
    seen = plain(out, fmt)
    if fmt == "repr":  # one line: whitespace collapsed, every escape spelled out
        assert "\\x1b]0;PWNED\\x07" in seen
        return
    for escape in SHOWN[:1] if kind == "memory" else SHOWN:  # the memory text cuts a frame at 80 characters
        assert escape in seen, (escape, seen[:2000])
    missing = [f for f in SHOWN_FIELDS[kind] if f"{f}:x\\x1b]0;PWNED" not in seen]
    assert not missing, f"fields not shown: {missing}"


def test_fields_the_readers_keep_are_the_hostile_ones(results):
    """The fixture is what it claims: the readers kept every tagged field (so the documents and the
    app were given them), with the payload intact."""
    kineto = results["kineto"].rank_view().trace
    strings = "\n".join(kineto.strings)
    kept = {
        "DEV": [d.name for d in kineto.devices],
        "TRACENAME": [str(kineto.metadata.get("traceName"))],
        "META": [str(kineto.metadata.get("hostName"))],
        "THREAD": [t.name for t in kineto.threads],
        "TID": [str(t.tid) for t in kineto.threads],
    }
    for tag in KINETO_FIELDS:
        values = kept.get(tag, [strings])
        needle = PAYLOAD if tag == "TID" else f"{tag}:{PAYLOAD}"
        if tag in ("BACKEND", "PROC", "DIMS", "COLL", "CAT", "MEMCPY", "RUNTIME"):
            continue  # read for matching or a warning, not kept as a string of their own
        assert any(needle in v for v in values), tag
    nsys = results["nsys"].rank_view().trace
    strings = "\n".join(nsys.strings)
    assert "STR:" + PAYLOAD in strings and "NVTX:" + PAYLOAD in strings
    assert any("DEV:" + PAYLOAD in d.name for d in nsys.devices)
    assert any("META:" + PAYLOAD in str(v) for v in nsys.metadata.values())
    assert set(NSYS_FIELDS) == {"STR", "NVTX", "DEV", "META"}


@pytest.mark.parametrize("kind", ["kineto", "nsys", "ranks"])
def test_analyze_command_prints_nothing_raw(traces, kind):
    """The command line as a user runs it (no -q: progress and notes on stderr too)."""
    for fmt in ("text", "markdown"):
        rc, out, err = run_in_process(["analyze", str(traces[kind]), "--format", fmt, "--color", "never"])
        assert rc == 0, err
        assert not raw_chars(out) and not raw_chars(err.replace("\r\x1b[K", "")), (raw_chars(out), raw_chars(err))
        assert "DEV:x\\x1b]0;PWNED" in plain(out, fmt) or kind == "nsys"


def test_diff_and_memory_commands_print_nothing_raw(traces):
    for argv in (
        ["diff", str(traces["kineto"]), str(traces["nsys"]), "--format", "text", "--color", "never"],
        ["memory", str(traces["snapshot"]), "--format", "text"],
    ):
        rc, out, err = run_in_process(argv)
        assert rc == 0, err
        assert not raw_chars(out) and not raw_chars(err.replace("\r\x1b[K", ""))
        assert "\\x1b]0;PWNED" in out


def test_error_message_quoting_a_hostile_path_is_one_inert_line(hostile_dir):
    bad = hostile_dir / f"broken{FILE_PART}\u202e.json"
    bad.write_text('{"traceEvents": [}')
    rc, out, err = run_in_process(["analyze", str(bad), "-q"])
    assert rc == 2 and err.count("\n") == 1
    assert not raw_chars(err) and "\\x1b]0;PWNED" in err and "\\u202e" in err


@settings(max_examples=12, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(st.text(alphabet=st.sampled_from(UNSAFE_CHARS[:-4] + list("ab[]=<>&*_`#| ")), min_size=1, max_size=24))
def test_any_hostile_string_in_every_kineto_field_stays_inert(tmp_path_factory, s):
    """Property: whatever mix of those characters a trace holds, in every kept field at once."""
    from trainscope import api
    from trainscope.reports.formats import render

    path = write_kineto(tmp_path_factory.mktemp("prop") / "t.json", payload=s, surrogate=False)
    report = api.analyze(str(path))
    for fmt in ("text", "markdown", "html"):
        out = str(render(fmt, report.output()))
        assert not raw_chars(out), (fmt, raw_chars(out)[:3])
        assert "DEV:" + visible(s) in plain(out, fmt)


# --- the apps: every frame they draw ----------------------------------------------------------------


def frame(app) -> tuple[str, set]:
    """The whole screen as the compositor would write it: its text and any hyperlinks in its styles."""
    strips = app.screen._compositor.render_strips()
    text = "\n".join("".join(seg.text for seg in strip) for strip in strips)
    links = {seg.style.link for strip in strips for seg in strip if seg.style is not None and seg.style.link}
    return text, links


async def _settled(app, pilot) -> None:
    """Until what the last key started is drawn: the app idle, its workers (threads that prepare a
    rank, the ranks side by side, the late arrivals) done and what they posted processed — the
    event itself, not a fixed pause (a quarter second per key before, which a loaded machine can outlast)."""
    from textual.worker import WorkerCancelled

    await pilot.pause()
    for _ in range(20):  # a worker's callback may start another (a rank prepared, then its late arrivals)
        running = [w for w in app.workers if not w.is_finished]
        if not running:
            return
        try:
            await app.workers.wait_for_complete(running)
        except WorkerCancelled:  # an exclusive group replaced it: the next pass waits for its successor
            pass
        await pilot.pause()
    raise AssertionError(f"the app's workers never settled: {[w.name for w in running]}")


async def _visit(app, pilot, ready, keys) -> list[str]:
    for _ in range(1200):
        await pilot.pause(0.05)
        if ready():
            break
    else:
        raise AssertionError("the app never showed its result")
    await _settled(app, pilot)
    frames = []
    for key in keys:
        await pilot.press(key)
        await _settled(app, pilot)
        text, links = frame(app)
        assert not raw_chars(text), (key, raw_chars(text)[:4])
        assert not links, (key, links)
        frames.append(text)
    return frames


def toasts(app) -> list[str]:
    """Every notification the app raised since :func:`tests.test_tui.notices`, as its toast draws it."""
    from tests.test_tui import toasts as kept

    return kept(app)


ANALYZE_KEYS = ["1", "2", "right", "right", "n", "3", "4", "down", "5", "6", "7", "8", "question_mark", "escape"]


@pytest.mark.parametrize("kind", ["kineto", "nsys", "ranks"])
def test_analyze_app_draws_no_raw_character_on_any_tab(traces, results, kind):
    from tests.test_tui import notices
    from trainscope.tui.app import AnalyzeApp
    from trainscope.tui.state import session_from

    async def go():
        app = AnalyzeApp(str(traces[kind]), session=session_from(results[kind]))
        notices(app)  # kept from the start: Textual drops a notice 6 s after its post
        async with app.run_test(size=(160, 50)) as pilot:
            ready = lambda: app.session is not None and app.query_one("#tabs").display  # noqa: E731
            frames = await _visit(app, pilot, ready, ANALYZE_KEYS + (["7", "enter", "R"] if kind == "ranks" else []))
            app.notify(f"written to {traces[kind]}", markup=False)  # what an export says
            await pilot.pause(0.1)
            return frames, toasts(app)

    frames, notes = asyncio.run(go())
    overview = frames[0]
    assert "\\x1b]0;PWNED" in overview.splitlines()[0]  # the header: the file name, spelled out
    assert "DEV:x\\x1b]0;PWNED" in overview
    assert not raw_chars("\n".join(notes)) and any("\\x1b]0;PWNED" in n for n in notes)


def test_diff_app_draws_no_raw_character_on_any_tab(traces, results):
    from trainscope.tui.diff_app import DiffApp

    r = results["diff"]

    async def go():
        app = DiffApp(str(traces["kineto"]), str(traces["nsys"]), diff=r.diff, gate=r.gate)
        async with app.run_test(size=(160, 50)) as pilot:
            return await _visit(app, pilot, lambda: app.query_one("#tabs").display, ["1", "2", "3", "down", "4"])

    frames = asyncio.run(go())
    assert "DEV:x\\x1b]0;PWNED" in frames[0] and "\\x1b]0;PWNED" in frames[0].splitlines()[0]


def test_memory_app_draws_no_raw_character(traces):
    from trainscope.tui.memory_app import MemoryApp

    async def go():
        app = MemoryApp(str(traces["snapshot"]))
        async with app.run_test(size=(160, 50)) as pilot:
            return await _visit(app, pilot, lambda: app.peak is not None, ["down", "down", "enter", "question_mark"])

    frames = asyncio.run(go())
    assert "FUNC:x\\x1b]0;PWNED" in frames[0]


def test_documents_handed_to_the_app_are_made_visible_once():
    """tui/tabs.shown: what the panes get; numbers and structure unchanged."""
    from trainscope.tui.tabs import shown

    doc = {"device": {"name": PAYLOAD}, "steps": [{"label": PAYLOAD, "ms": 1.5}], "change": "a\nb"}
    out = shown(doc)
    assert out == safe_strings(doc) and out["steps"][0]["ms"] == 1.5 and out["change"] == "a\nb"
    assert not raw_chars(json.dumps(out, ensure_ascii=False)) and shown(None) is None
