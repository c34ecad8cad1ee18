"""The fix catalog (analyzers/findings/fixes.toml): every fix's texts are data, read once at import.
Every catalog entry is the texts of exactly one declared fix and every declared fix's texts come from
the catalog; a fix the catalog lacks fails the import; the file travels as package data."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from trainscope.analyzers.findings import REGISTRY
from trainscope.analyzers.findings.base import Fix
from trainscope.analyzers.findings.catalog import CATALOG
from trainscope.analyzers.findings.catalog import CATALOG_FILE
from trainscope.analyzers.findings.catalog import FixEntry
from trainscope.analyzers.findings.catalog import catalog_fix
from trainscope.analyzers.findings.catalog import entry
from trainscope.analyzers.findings.catalog import parse

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ("title", "pytorch", "native", "basis", "whatif_label")
PLACEHOLDER = re.compile(r"\{[A-Z][A-Z0-9_]*\}")  # "{NODE_HINT}": filled by the declaring module


def _declared() -> list[Fix]:
    """Every fix the registry declares (a fix two findings share counts once)."""
    seen: dict[int, Fix] = {}
    for s in REGISTRY.values():
        for f in (s.fix, *s.alternatives):
            if f is not None:
                seen.setdefault(id(f), f)
    return list(seen.values())


def _says(e: FixEntry, f: Fix) -> bool:
    """Whether fix ``f`` says what entry ``e`` says (a placeholder stands for any filled text)."""
    for k in TEXTS:
        parts = re.split(f"({PLACEHOLDER.pattern})", getattr(e, k))  # text, placeholder, text, ...
        pattern = "".join(".+?" if i % 2 else re.escape(p) for i, p in enumerate(parts))
        if not re.fullmatch(pattern, getattr(f, k), re.S):
            return False
    return True


def test_every_entry_is_one_declared_fix_and_every_fix_comes_from_the_catalog():
    fixes = _declared()
    assert len(fixes) >= 30  # every family declares its fixes here
    used: dict[tuple[str, str | None], list[str]] = {k: [] for k in CATALOG}
    for f in fixes:
        keys = [k for k, e in CATALOG.items() if k[0] == f.rec_id and _says(e, f)]
        assert len(keys) == 1, f"fix {f.rec_id}: its texts match catalog entries {keys} (want exactly one)"
        used[keys[0]].append(f.rec_id)
        for k in ("pytorch", "native"):
            assert not PLACEHOLDER.search(getattr(f, k)), f"fix {f.rec_id}: {k} keeps an unfilled placeholder"
    orphans = [k for k, users in used.items() if not users]
    twice = {k: users for k, users in used.items() if len(users) > 1}
    assert not orphans, f"catalog entries no finding declares: {orphans}"
    assert not twice, f"catalog entries declared by more than one fix: {twice}"


def test_the_catalog_is_the_texts_the_fixes_render():
    """One fix's texts, by hand: what the file says is what the registry's fix says and renders."""
    f = REGISTRY["host/sync"].fix
    assert f is not None
    e = entry("remove-syncs")
    assert (f.title, f.pytorch, f.native, f.basis) == (e.title, e.pytorch, e.native, e.basis)
    assert f.pytorch.startswith("# keep metrics on the GPU") and not f.pytorch.endswith("\n")
    assert e.basis.format(stake=12.345) == "removing the 12.3 % GPU idle during syncs"
    # a variant replaces only the fields it sets
    base, variant = entry("reduce-memory"), entry("reduce-memory", "not-training")
    assert variant.basis != base.basis and (variant.title, variant.pytorch) == (base.title, base.pytorch)
    # a fill replaces its placeholder in the code, nowhere else
    assert "nsys profile --cuda-graph-trace=node python" in REGISTRY["algorithm/graph-replays"].fix.pytorch


def test_a_fix_the_catalog_lacks_fails_loudly():
    with pytest.raises(LookupError, match=r"fix \[no-such-fix\] is not in the fix catalog"):
        catalog_fix("no-such-fix", projection="none")
    with pytest.raises(LookupError, match=r"fix \[remove-syncs.no-such-variant\]"):
        entry("remove-syncs", "no-such-variant")


def test_a_fix_missing_from_the_file_fails_the_import():
    """Drop one table from what the file parses to: importing the findings fails, naming the fix."""
    code = (
        "import tomllib\n"
        "real = tomllib.loads\n"
        "def loads(text, **kw):\n"
        "    d = real(text, **kw)\n"
        "    d.pop('remove-syncs')\n"
        "    return d\n"
        "tomllib.loads = loads\n"
        "import trainscope.analyzers.findings\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode != 0
    assert "LookupError: fix [remove-syncs] is not in the fix catalog" in run.stderr


@pytest.mark.parametrize(
    ("toml", "error"),
    [
        ("[a]\ntitle = 't'\npytorch = 'p'\n", r"\[a\] lacks \['native'\]"),
        ("[a]\ntitle = 't'\npytorch = 'p'\nnative = 'n'\npytroch = 'x'\n", r"\[a\] has unknown fields \['pytroch'\]"),
        ("[a]\ntitle = 't'\npytorch = 'p'\nnative = 'n'\n[a.v]\nbasys = 'b'\n", r"\[a\.v\] has unknown fields"),
        ("[a]\ntitle = 't'\npytorch = 'p'\nnative = 'n'\nbasis = 1\n", r"\[a\] fields \['basis'\] are not strings"),
    ],
)
def test_a_malformed_entry_is_refused(toml, error):
    with pytest.raises(ValueError, match=error):
        parse(toml)


def test_multi_line_code_keeps_its_lines_exactly():
    """A literal multi-line string: the newline after the opening quotes is dropped, backslashes and
    braces are the code's own, and the last line has no newline after it."""
    got = parse("[a]\ntitle = 't'\npytorch = '''\nx = {k: v}\ny = 'a\\n'  # c'''\nnative = 'n'\n")
    assert got[("a", None)].pytorch == "x = {k: v}\ny = 'a\\n'  # c"


def test_the_catalog_is_package_data():
    """pyproject.toml ships the file with its package, from the folder the package maps to."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    pkg = "trainscope.analyzers.findings"
    assert CATALOG_FILE in cfg["package-data"][pkg]
    folder = ROOT / cfg["package-dir"]["trainscope.analyzers"] / "findings"
    assert (folder / CATALOG_FILE).is_file()
    assert resources.files(pkg).joinpath(CATALOG_FILE).read_text(encoding="utf-8") == (folder / CATALOG_FILE).read_text(
        encoding="utf-8"
    )


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_built_package_carries_the_catalog(tmp_path):
    """setuptools' build_py lays the package out as a wheel holds it (package data included, no
    editable mapping); the findings import from that layout alone."""
    pytest.importorskip("setuptools", reason="building needs setuptools in this environment")
    lib = tmp_path / "lib"
    build = subprocess.run(
        [sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py", "--build-lib", str(lib)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    assert (lib / "trainscope" / "analyzers" / "findings" / CATALOG_FILE).is_file()
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import trainscope.analyzers.findings as f, trainscope.analyzers.findings.catalog as c; "
            "print(c.__file__); print(len(c.CATALOG), len(f.REGISTRY))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(lib)),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    where, counts = run.stdout.splitlines()
    assert where.startswith(str(lib))
    assert counts == f"{len(CATALOG)} {len(REGISTRY)}"
