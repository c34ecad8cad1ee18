"""One way for a path (issue 40 item 5) and the CLI's start-up (item 2): a flag dependency is checked
in one place (``trainscope.api.check_options``), the result object is built complete (nothing sets
a field of a :class:`~trainscope.api.Report` after it was made), and a command line loads only the
module of the command it names (``trainscope.cli.COMMANDS``)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA
from trainscope import api
from trainscope.cli import COMMANDS, build_parser, command_named, main

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
