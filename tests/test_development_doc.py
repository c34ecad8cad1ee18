"""docs/development.md stays true: every repository path it names exists, every ``file::test`` names a
test in that file, and its map names every sub-package and shared module of ``analyzers/``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "development.md"

# A path as the doc writes it, in backticks or as the comment heading a code block: a folder (ends
# with "/") or a file with a suffix, optionally "::test" or a glob; "<name>" stands for any one name.
_SUFFIX = r"\.(?:py|md|toml|json|c|svg)"
_TOKEN = r"[\w.<>*/-]+(?:/|" + _SUFFIX + r")(?:::\w+)?"
_BACKTICK = re.compile(r"`(" + _TOKEN + r")`")
_COMMENT = re.compile(r"^# (" + _TOKEN + r")", re.M)


def named_paths(text: str) -> list[str]:
    return sorted(set(_BACKTICK.findall(text)) | set(_COMMENT.findall(text)))


def missing(token: str) -> str | None:
    """Why ``token`` names nothing in the repository, or None."""
    path, _, test = token.partition("::")
    pattern = re.sub(r"<[\w-]+>", "*", path.rstrip("/"))
    hits = [p for p in ROOT.glob(pattern) if p.is_dir() == path.endswith("/")] if pattern else []
    if not hits:
        return f"{token}: no such {'folder' if path.endswith('/') else 'file'}"
    if test:
        tree = ast.parse(hits[0].read_text())
        if not any(isinstance(n, ast.FunctionDef) and n.name == test for n in ast.walk(tree)):
            return f"{token}: no test {test} in {path}"
    return None


def test_the_doc_names_paths():
    paths = named_paths(DOC.read_text())
    assert len(paths) >= 60
    assert "analyzers/trace/analysis.py" in paths and "tui/tabs.py" in paths
    assert "tests/test_formats.py::test_adding_a_format_is_its_reader_and_one_row" in paths


@pytest.mark.parametrize("token", named_paths(DOC.read_text()))
def test_every_path_the_doc_names_exists(token):
    assert missing(token) is None, missing(token)


def test_a_wrong_path_is_caught():
    assert missing("analyzers/steps.py") == "analyzers/steps.py: no such file"
    assert missing("analyzers/trace/") is None and missing("analyzers/nowhere/") is not None
    assert missing("analyzers/findings/<family>.py") is None
    assert "no test" in missing("tests/test_formats.py::test_that_is_not_there")
    assert named_paths("see `analyzers/rules.py` and `data/io-stall`\n# reports/formats.py\n") == [
        "analyzers/rules.py",
        "reports/formats.py",
    ]


def test_the_map_names_every_part_of_analyzers():
    text = DOC.read_text()
    subs = [p.name for p in sorted((ROOT / "analyzers").iterdir()) if (p / "__init__.py").is_file()]
    top = [p.name for p in sorted((ROOT / "analyzers").glob("*.py")) if p.name != "__init__.py"]
    unnamed = [f"analyzers/{s}/" for s in subs if f"`analyzers/{s}/`" not in text]
    unnamed += [f"analyzers/{m}" for m in top if f"`analyzers/{m}`" not in text]
    assert not unnamed, f"docs/development.md does not place {unnamed}"
