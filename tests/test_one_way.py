"""One way for a path (issue 40 item 5) and the CLI's start-up (item 2): a flag dependency is checked
in one place (``trainscope.api.check_options``), the result object is built complete (nothing sets
a field of a :class:`~trainscope.api.Report` after it was made), and a command line loads only the
module of the command it names (``trainscope.cli.COMMANDS``)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA
from trainscope import api
from trainscope.cli import COMMANDS
from trainscope.cli import build_parser
from trainscope.cli import command_named
from trainscope.cli import main

ROOT = Path(__file__).resolve().parent.parent
SMALL = str(DATA / "cpu" / "fast.pt.trace.json.gz")
RANKS = str(DATA / "gloo")


def test_deep_step_without_deep_is_one_line_and_exit_2(capsys):
    assert main(["analyze", SMALL, "--deep-step", "5", "--format", "json"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", "trainscope: --deep-step needs --deep\n")
    with pytest.raises(api.BadInput, match=r"^--deep-step needs --deep$"):
        api.analyze(SMALL, deep_step="5")


def test_the_flag_dependency_is_checked_in_one_place():
    """The message is written once in trainscope's own code: the CLI and the api call one check."""
    sources = [p for d in ("trainscope", "analyzers", "collectors", "reports", "tui") for p in (ROOT / d).rglob("*.py")]
    holders = [p.relative_to(ROOT).as_posix() for p in sources if "needs --deep" in p.read_text(encoding="utf-8")]
    assert holders == ["trainscope/api/analysis.py"]
    with pytest.raises(api.BadInput, match="jobs must be at least 1"):
        api.check_options(jobs=0)
    assert api.check_options() is None


def test_a_report_is_built_complete(monkeypatch):
    """The rank reduce (stragglers, story, headline rank) is done before the Report is made: a Report
    that refuses any field set after its construction still comes back from a rank directory."""
    import trainscope.api.analysis as analysis

    class Frozen(api.Report):
        def __post_init__(self) -> None:
            object.__setattr__(self, "_built", True)

        def __setattr__(self, name, value):
            if getattr(self, "_built", False):
                raise AssertionError(f"Report.{name} set after the report was built")
            object.__setattr__(self, name, value)

    monkeypatch.setattr(analysis, "Report", Frozen)
    r = api.analyze(RANKS, jobs=1)
    assert isinstance(r, Frozen) and len(r.ranks) == 2
    assert r.story is not None and r.straggler_analysis is r.story and r.main_index == r.story.headline_index
    assert r.stragglers is not None and list(r.stragglers)[-1] == "ranks_view"
    assert r.summaries is not None and len(r.summaries) == 2
    assert {f.name for f in dataclasses.fields(api.Report)} >= {"stragglers", "story", "summaries"}


def test_a_command_line_loads_only_its_command():
    code = (
        "import sys\nfrom trainscope.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('trainscope.commands.', 'trainscope.tui', "
        "'textual'))))"
    )
    loaded = {}
    for argv in (["--help"], ["thresholds"]):
        p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
        loaded[argv[0]] = eval(p.stdout.splitlines()[-1])
    assert loaded["--help"] == []  # every command's help line from the table, no module
    assert "trainscope.commands.thresholds" in loaded["thresholds"]
    assert not [
        m
        for m in loaded["thresholds"]
        if m.startswith("trainscope.commands.") and m.count(".") == 2 and m != "trainscope.commands.thresholds"
    ]


def test_the_table_names_every_command_and_the_full_parser_has_them_all():
    assert command_named(["--version"]) is None and command_named(["-h", "diff", "a"]) == "diff"
    assert command_named(["nope"]) is None
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert list(sub.choices) == list(COMMANDS)
    for name, parser in sub.choices.items():
        assert parser.get_default("run") is not None, name  # each module registered its arguments


def test_a_printed_analysis_loads_no_terminal_app():
    """The apps (Textual) are imported only when one opens (trainscope.common.APPS): a printed
    analysis loads neither them nor Textual."""
    code = (
        "import sys\nfrom trainscope.cli import main\n"
        f"main(['analyze', {SMALL!r}, '--format', 'json', '--no-cache'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('textual') or m.endswith('app')), file=sys.stderr)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.startswith("{") and eval(p.stderr.splitlines()[-1]) == []


def test_save_diff_leaves_the_result_as_it_was(tmp_path):
    """``diff --save`` saves both traces as runs; the DiffResult it was given is not changed after
    it was built (the command makes the comparison of the saved runs with dataclasses.replace)."""
    result = api.diff(SMALL, str(DATA / "cpu" / "slow.pt.trace.json.gz"))
    before = result.to_dict()
    b, a, _ = api.save_diff(result, tmp_path / "runs.db")
    assert (result.before_run, result.after_run) == (None, None) and result.to_dict() == before
    assert b.id != a.id


# -- one description of an input (trainscope.api.inputs.describe_input) ----------------------------


def test_each_kind_of_input_is_described_once(tmp_path):
    from trainscope.api.inputs import InputDescription
    from trainscope.api.inputs import describe_input

    one = describe_input(SMALL)
    assert (one.kind, one.given, one.rank_files) == ("file", SMALL, ())
    assert os.fspath(one) == SMALL and describe_input(one) is one  # a path-like the api takes as it is
    ranks = describe_input(RANKS)
    assert ranks.kind == "ranks" and ranks.is_rank_set
    assert [os.path.basename(f) for f in ranks.rank_files] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    pattern = describe_input(os.path.join(RANKS, "rank*.json.gz"))
    assert pattern.kind == "ranks" and pattern.rank_files == ranks.rank_files
    export = tmp_path / "report.arrowdir"  # a folder that is one Nsight export, not a set of ranks
    export.mkdir()
    (export / "StringIds.arrow").write_bytes(b"")
    assert describe_input(str(export)) == InputDescription(str(export), "export")
    # a run of the history only where runs are meant (diff's sides), and only without a file of that name
    assert describe_input("latest:resnet").kind == "file"
    assert describe_input("latest:resnet", runs=True) == InputDescription("latest:resnet", "run")
    (tmp_path / "12").write_bytes(b"{}")
    assert describe_input(str(tmp_path / "12"), runs=True).kind == "file"


def test_every_command_resolves_its_inputs_through_one_function(monkeypatch):
    """analyze, memory and diff hand the api the description resolve_inputs made, not the raw path."""
    from trainscope.api.inputs import InputDescription

    seen: dict[str, tuple[object, ...]] = {}

    def stop(name):
        def call(*a, **k):
            seen[name] = a
            raise api.BadInput("stopped")

        return call

    for name in ("analyze", "memory", "diff"):
        monkeypatch.setattr(api, name, stop(name))
    assert main(["analyze", RANKS, "--format", "json"]) == 2
    assert main(["memory", str(DATA / "memory" / "mem_oom_flexgen_opt.pickle"), "--format", "json"]) == 2
    assert main(["diff", SMALL, "latest", "--format", "json"]) == 2
    assert [type(a) for args in seen.values() for a in args] == [InputDescription] * 4
    assert seen["analyze"][0].kind == "ranks" and seen["memory"][0].kind == "file"
    assert [d.kind for d in seen["diff"]] == ["file", "run"]
    commands = [p.read_text(encoding="utf-8") for p in (ROOT / "trainscope" / "commands").glob("*.py")]
    assert not [text for text in commands if "check_outputs(" in text or "is_run_ref(" in text]


def test_a_report_is_frozen_and_deep_makes_a_new_one(monkeypatch):
    """Nothing sets a field of a built Report: ``report.deep = …`` raises; analyze(deep=True) builds
    the report with HTA's section (a new report sharing the first one's memo), run_deep returns it."""
    import trainscope.api.analysis as analysis

    calls = []

    def fake_deep(trace, main, rules, step, progress):
        calls.append((trace, step))
        return "hta"

    monkeypatch.setattr(analysis, "check_deep_available", lambda: {"traceinsight": "test"})
    monkeypatch.setattr(analysis, "deep_analysis", fake_deep)
    monkeypatch.setattr(analysis, "deep_dict", lambda d: {"status": "ok", "from": d})
    plain = api.analyze(RANKS, jobs=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.deep = {"status": "ok"}  # type: ignore[misc]
    assert plain.deep is None and analysis.run_deep(plain, "@1") == {"status": "ok", "from": "hta"}
    assert plain.deep is None  # run_deep returned the section; the report it read is unchanged
    deep = api.analyze(RANKS, jobs=1, deep=True, deep_step="@1")
    assert deep.deep == {"status": "ok", "from": "hta"} and calls[-1][1] == "@1"
    assert deep.to_dict()["deep"] == {"status": "ok", "from": "hta"}
    assert deep._memo.loaded == {deep.main_index: calls[-1][0]}  # the trace HTA read is the report's: read once
    assert deep.main_trace is calls[-1][0]
