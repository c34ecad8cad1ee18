"""mypy strict on traces/ and analyzers/ (configuration in pyproject.toml), run as CI runs it:
``python tools/typecheck.py``. Slow lane: a cold run takes about half a minute."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tools" / "typecheck.py"


def _typecheck_module():  # tools/ is no package: load the script by path
    spec = importlib.util.spec_from_file_location("typecheck", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="mypy is not installed (it comes with the test extra: pip install -e '.[test]')",
)
def test_traces_and_analyzers_type_check():
    proc = subprocess.run([sys.executable, str(SCRIPT)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout


def test_paths_map_back_to_the_repository(tmp_path):
    tc = _typecheck_module()
    tree = tmp_path / "tree"
    out = tc.map_output(
        f"{tree}/trainscope/analyzers/deep/second_opinion.py:12: error: x  [arg-type]\n"
        "trainscope/traces/model.py:3:5: note: y\n"
        "trainscope/commands/analyze.py:7: error: z\n"
        "Found 2 errors in 2 files (checked 65 source files)\n",
        tree,
    )
    assert out.splitlines() == [
        "analyzers/deep/second_opinion.py:12: error: x  [arg-type]",
        "traces/model.py:3:5: note: y",
        "trainscope/commands/analyze.py:7: error: z",
        "Found 2 errors in 2 files (checked 65 source files)",
    ]


def test_the_tree_holds_the_package_as_installed(tmp_path):
    tc = _typecheck_module()
    pkg = tc.build_tree(tmp_path)
    for name in ("analyzers", "collectors", "traces", "reports", "tui"):
        assert (pkg / name).resolve() == REPO / name
    assert (pkg / "__init__.py").resolve() == REPO / "trainscope" / "__init__.py"
    assert (pkg / "commands").resolve() == REPO / "trainscope" / "commands"
    assert (pkg / "analyzers" / "findings" / "base.py").is_file()
