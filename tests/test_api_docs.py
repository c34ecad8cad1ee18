"""Every example in docs/api.md marked ``<!-- runnable -->`` runs as written from the repository root
(its asserts are the documented results), each in a fresh interpreter like a reader's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"
_RUNNABLE = re.compile(r"<!-- runnable -->\n```python\n(.*?)```", re.S)


def _examples() -> list[str]:
    return _RUNNABLE.findall(DOC.read_text())


def test_the_doc_has_runnable_examples():
    blocks = _examples()
    assert len(blocks) >= 3
    assert any("jobs=" in b and "rank_view" in b for b in blocks)  # the rank-directory example
    assert any("job_environment" in b and "follow" in b for b in blocks)  # the launched-job watch


@pytest.mark.parametrize("index", range(len(_examples())))
def test_example_runs(index):
    code = _examples()[index]
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, f"example {index + 1} of docs/api.md:\n{code}\n--- stderr:\n{p.stderr[-3000:]}"
