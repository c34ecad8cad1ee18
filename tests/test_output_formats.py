"""The output format table (reports/formats.py): one row per format, read by ``--format`` of every
report command, ``--report FILE`` (and the api's ``save``/``render_for``) and the apps' export."""

from __future__ import annotations

import asyncio
import zlib

import pytest

from tests.conftest import KINETO

MI250 = "hta_mi250_minitoy_train.json.gz"  # a small trace: the analysis takes well under a second


def _toy(out) -> bytes:
    """The toy format: one line per finding, "id<TAB>severity<TAB>stake %", zlib-compressed (a
    binary format, so the bytes path of every consumer is taken too)."""
    lines = [f"{f['id']}\t{f['severity']}\t{f['stake_pct']:.1f}" for f in out.doc["findings"]]
    return zlib.compress(("verdict\t" + out.doc["verdict"]["axis"] + "\n" + "\n".join(lines) + "\n").encode())


def _choices(command: str) -> tuple:
    from trainscope.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return tuple(next(a for a in sub.choices[command]._actions if a.dest == "format").choices)


def test_adding_a_format_is_its_renderer_and_one_row(tmp_path, monkeypatch, capsysbinary):
    """The worked example: a toy format (the findings as compressed TSV lines) is offered by
    ``analyze --format``, written for ``--report x.toy`` and ``Report.save``, and by the app's
    export to a .toy path, through one new row and its renderer; nothing else changes. It renders
    analyses only, so ``diff`` does not offer it and a diff report named .toy is Markdown."""
    import trainscope.reports.formats as formats
    import trainscope.reports.renderers as renderers
    from trainscope import api
    from trainscope.cli import main

    assert "toy" not in _choices("analyze")
    monkeypatch.setattr(renderers, "_toy", _toy, raising=False)
    row = formats.Writer(
        "toy", "toy", (".toy",), "trainscope.reports.renderers:_toy", "application/x-toy", True, ("analysis",)
    )
    monkeypatch.setattr(formats, "WRITERS", formats.WRITERS + (row,))
    trace = str(KINETO / MI250)
    report = api.analyze(trace)
    want = _toy(report.output())
    text = zlib.decompress(want).decode()
    assert text.startswith("verdict\t") and "\t" in text.splitlines()[1]  # a finding line: the toy has content

    # --format: offered by analyze (not by diff, plan or memory), printed as bytes on stdout
    assert _choices("analyze") == ("text", "json", "markdown", "html", "toy")
    assert all("toy" not in _choices(c) for c in ("diff", "plan", "memory"))
    assert main(["analyze", trace, "--format", "toy", "-q"]) == 0
    assert capsysbinary.readouterr().out == want

    # --report FILE.toy: the toy, and no note (the name says the format)
    out = tmp_path / "r.toy"
    assert main(["analyze", trace, "--format", "json", "-q", "--report", str(out)]) == 0
    assert out.read_bytes() == want and b"written as" not in capsysbinary.readouterr().err
    assert report.save(str(tmp_path / "s.TOY")) and (tmp_path / "s.TOY").read_bytes() == want
    assert report.render_for("x.toy") == want

    # a diff does not render as toy: Markdown under that name, as for any unclaimed suffix
    w, named = formats.for_path("d.toy", "diff")
    assert (w.name, named) == ("markdown", False)

    # the app: its --report path (written once loaded) and `e` (written again), in the format the name says
    from tests.test_tui import _ready
    from tests.test_tui import session
    from trainscope.tui.app import AnalyzeApp

    app_out = tmp_path / "app.toy"

    async def go():
        app = AnalyzeApp(trace, session=session(MI250), report_path=str(app_out))
        async with app.run_test(size=(100, 30)) as pilot:
            await _ready(app, pilot)
            loaded = list(app.exported)
            app_out.unlink()
            await pilot.press("e")
            await pilot.pause()
            return loaded, app.exported

    assert asyncio.run(go()) == ([str(app_out)], [str(app_out)] * 2)
    assert app_out.read_bytes() == want


@pytest.mark.parametrize(
    "name,document,claimed",
    [
        ("r.html", "html", True),
        ("R.HTM", "html", True),
        ("r.json", "json", True),
        ("r.md", "markdown", True),
        ("r.markdown", "markdown", True),
        ("r.txt", "markdown", True),
        ("report", "markdown", True),  # no suffix: the default, silently
        ("r.pdf", "markdown", False),  # another suffix: the default, said on stderr by the CLI
        ("dir.v2/report", "markdown", True),  # a dot in a folder name is not a suffix
        ("r.json.gz", "markdown", False),
    ],
)
def test_a_report_file_is_written_in_the_format_its_name_says(name, document, claimed):
    from trainscope.reports.formats import DOCUMENTS
    from trainscope.reports.formats import for_path

    for doc in DOCUMENTS:
        w, named = for_path(name, doc)
        assert (w.name, named) == (document, claimed)


def test_the_longest_suffix_wins(monkeypatch):
    import trainscope.reports.formats as formats

    row = formats.Writer("trace-json", "trace", (".trace.json",), "trainscope.reports.renderers:json_document", "x")
    monkeypatch.setattr(formats, "WRITERS", (row,) + formats.WRITERS)
    assert formats.for_path("a.trace.json", "analysis")[0].name == "trace-json"
    assert formats.for_path("a.json", "analysis")[0].name == "json"


def test_the_note_and_the_help_say_the_rule_from_the_table():
    from trainscope.reports.formats import suffix_help

    assert suffix_help("analysis") == "JSON for .json, HTML for .html/.htm, Markdown otherwise"


def test_a_format_renders_only_the_documents_its_row_names():
    from trainscope.reports.formats import Output
    from trainscope.reports.formats import Writer
    from trainscope.reports.formats import render

    row = Writer("x", "X", (".x",), "trainscope.reports.renderers:json_document", "x", documents=("plan",))
    with pytest.raises(ValueError, match="does not render a analysis report"):
        render(row, Output("analysis", {}))


def test_every_command_prints_every_format_the_table_gives_it(tmp_path, capsys):
    """``--format html`` (new with the table) prints the same page ``--report x.html`` writes, for
    each document; the other formats print what the api's to_* methods give."""
    from trainscope import api
    from trainscope.cli import main
    from trainscope.reports.output import to_json

    trace = str(KINETO / MI250)
    runs = {
        "analysis": (["analyze", trace, "-q"], lambda: api.analyze(trace)),
        "plan": (["plan", "--params", "1.5B", "--gpu", "a100-80"], lambda: api.plan("params=1.5B", gpu="a100-80")),
    }
    for document, (argv, make) in runs.items():
        result = make()
        want = {
            "text": result.to_text(),
            "json": to_json(result.to_dict()),
            "markdown": result.to_markdown(),
            "html": result.to_html(),
        }
        for fmt, expected in want.items():
            assert main(argv + ["--format", fmt]) == 0
            assert capsys.readouterr().out == expected, (document, fmt)
        page = tmp_path / f"{document}.html"
        if document == "analysis":
            assert main(argv + ["--format", "json", "--report", str(page)]) == 0
            capsys.readouterr()
            assert page.read_text() == want["html"] and "<svg" in want["html"]


def test_the_end_of_a_watch_is_a_document_of_the_table(tmp_path, capsys):
    """``watch --report FILE`` follows the table like ``analyze --report``: Markdown for .md (what
    it always wrote), the summary document for .json, a page for .html, and the note for a suffix
    no format claims."""
    import json

    from trainscope.analyzers.live.engine import LiveAnalyzer
    from trainscope.common import write_report
    from trainscope.reports.live import summary_dict
    from trainscope.reports.live import summary_markdown
    from trainscope.reports.renderers import WatchSummary
    from trainscope.traces.safe_text import visible_lines

    st = LiveAnalyzer().summary()
    info = {"target": "python train.py", "exit_code": 3}
    out = WatchSummary(st, info).output()
    for name in ("w.md", "w.json", "w.html", "w.pdf"):
        write_report(str(tmp_path / name), out)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "w.pdf: written as Markdown" in err
    md = (tmp_path / "w.md").read_text()
    assert md.startswith("# trainscope watch — python train.py") and "job exit code 3" in md
    # the Markdown is summary_markdown's (up to its timestamp line)
    want = visible_lines(summary_markdown(st, info)).splitlines()
    assert [line for line in md.splitlines() if not line.startswith("*")] == [
        line for line in want if not line.startswith("*")
    ]
    assert json.loads((tmp_path / "w.json").read_text()) == json.loads(json.dumps(summary_dict(st, info)))
    page = (tmp_path / "w.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "trainscope watch" in page and "job exit code 3" in page


def test_format_takes_the_tables_aliases_in_any_case(capsys):
    """``--format md`` / ``htm`` / ``HTML`` (what users type) print the row's format on every
    report command; the help still lists only the rows' names, and a name no row has is still
    argparse's one-line error with exit 2 naming the real choices."""
    import trainscope.reports.formats as formats
    from trainscope.cli import main

    assert formats.canonical("md") == "markdown" and formats.canonical("HTM") == "html"
    assert formats.canonical("Markdown") == "markdown" and formats.canonical("pdf") == "pdf"
    assert formats.writer("MD").name == "markdown"
    argv = ["plan", "--params", "1.5B", "--gpu", "a100-80"]
    assert main(argv + ["--format", "markdown"]) == 0
    want_md = capsys.readouterr().out
    assert main(argv + ["--format", "html"]) == 0
    want_html = capsys.readouterr().out
    for alias, want in (("md", want_md), ("MD", want_md), ("htm", want_html), ("HTML", want_html)):
        assert main(argv + ["--format", alias]) == 0
        assert capsys.readouterr().out == want, alias
    for command in ("analyze", "diff", "plan", "memory"):
        assert _choices(command)[:4] == ("text", "json", "markdown", "html")
    with pytest.raises(SystemExit) as e:
        main(argv + ["--format", "pdf"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'pdf'" in err and "'markdown'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["analyze", str(KINETO / MI250), "--no-tui", "--report", "{missing}/r.md"], "--report"),
        (["analyze", str(KINETO / MI250), "--no-tui", "--json", "{dir}"], "--json"),
        (["analyze", str(KINETO / MI250), "--no-tui", "--perfetto", "{missing}/p.json"], "--perfetto"),
        (["diff", str(KINETO / MI250), str(KINETO / MI250), "--no-tui", "--report", "{dir}"], "--report"),
        (["memory", str(KINETO / MI250), "--no-tui", "--json", "{missing}/m.json"], "--json"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_any_trace_is_read(
    tmp_path, monkeypatch, capsys, argv, flag
):
    """``--report``/``--json``/``--perfetto`` into a folder that does not exist or onto a directory:
    one line and exit 2 at once, as ``watch`` does, not after analyzing the trace (a 1 GB trace
    costs ~15 s before the write fails)."""
    from trainscope import api
    from trainscope.cli import main

    def never(*a, **k):
        raise AssertionError("the trace was read before the output was checked")

    for name in ("analyze", "diff", "memory"):
        monkeypatch.setattr(api, name, never)
    argv = [a.format(missing=tmp_path / "no-such-folder", dir=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"trainscope: {flag} ") and len(err.splitlines()) == 1
    assert "folder does not exist" in err or "is a directory" in err


def test_the_apps_export_message_shows_a_path_with_brackets_as_it_is(tmp_path):
    """The app's export notices interpolate the file path (and elsewhere kernel names, allocation
    sites, the search text) — as plain text, not Textual markup: a folder named "run[/b]" raised
    MarkupError (closing tag without an opening one) when the notice was drawn, and "[b]" vanished."""
    from tests.test_tui import _ready
    from tests.test_tui import notices
    from tests.test_tui import session
    from tests.test_tui import toasts
    from tests.test_tui import until
    from trainscope.tui.app import AnalyzeApp

    target = tmp_path / "run[/b]" / "r.md"  # its folder does not exist: the "cannot write" notice

    async def go():
        app = AnalyzeApp(str(KINETO / MI250), session=session(MI250), report_path=str(target))
        notices(app)  # kept from the start: Textual drops a notice 6 s after its post
        async with app.run_test(size=(100, 30)) as pilot:
            await _ready(app, pilot)
            # the report is written (here: refused) in a background thread: wait for its notice
            await until(pilot, lambda: any("cannot write" in str(n.message) for n in notices(app)))
            return toasts(app)  # as the toast draws it

    messages = asyncio.run(go())
    assert any(m.startswith(f"cannot write {target}: ") for m in messages), messages


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["analyze", "{t}", "--no-tui", "--report", "{t}"], "--report"),
        (["analyze", "{t}", "--no-tui", "--json", "{t}"], "--json"),
        (["diff", "{t}", str(KINETO / MI250), "--no-tui", "--report", "{t}"], "--report"),
        (["memory", "{t}", "--no-tui", "--json", "{t}"], "--json"),
    ],
)
def test_a_report_written_onto_its_own_input_is_refused(tmp_path, monkeypatch, capsys, argv, flag):
    """``--report run.json.gz`` (or ``--json``) naming the input replaced the trace by the report
    (a Markdown file under the trace's name, the trace gone): one line, exit 2, the input untouched."""
    from trainscope.cli import main

    trace = tmp_path / "run.json.gz"
    trace.write_bytes((KINETO / MI250).read_bytes())
    before = trace.read_bytes()
    monkeypatch.chdir(tmp_path)
    argv = [a.format(t=str(trace) if i < 2 else "./run.json.gz") for i, a in enumerate(argv)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"trainscope: {flag} ./run.json.gz: is the input: writing the report there would overwrite it"
    assert trace.read_bytes() == before


def test_gpu_metrics_line_in_every_renderer():
    """No bundled trace carries Nsight GPU_METRICS, so the line is checked on a document given one:
    each renderer shows the figures present, in the same words, and leaves out a missing one."""
    from trainscope.api import analyze
    from trainscope.reports.html import render_html
    from trainscope.reports.markdown import render_markdown
    from trainscope.reports.text import render_text

    doc = analyze(str(KINETO / MI250)).to_dict()
    doc["gpu_metrics"] = {"sm_active_pct": 71.3, "tensor_active_pct": None, "dram_bandwidth_pct": 40.0, "samples": 1234}
    for out in (render_text(doc), render_markdown(doc), render_html(doc)):
        assert "SM active 71.3 %, DRAM bandwidth 40.0 %" in out
        assert "tensor active" not in out
        assert "1,234 samples" in out or "1234 samples" in out
