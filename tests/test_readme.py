"""Every example in README.md runs as written, from a fresh clone, and exits as the README says.

Shell examples: each command line of a ```sh block, and each ``$ ``-prompted line of a ```text
block (a transcript). Python examples: each ```python block, run whole. The lines of one block
run in order in one shell, so a ``cd`` carries to the next line, as it would for a reader. The
expected exit code is 0 unless the line ends with a comment ``# exit N``. A line whose comment
says ``not run by tests/test_readme.py`` is not run, and must say why. ``pip install`` steps are
not run (they would reinstall the package under test into this environment); the rest of their
line is.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import suite_collected

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
NOT_RUN = "not run by tests/test_readme.py"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass
class Example:
    block: int
    kind: str  # "sh" | "python"
    text: str  # the command line, or the whole Python block
    expect: int = 0
    skip: str | None = None  # why it is not run


def _command(line: str) -> tuple[str, int, str | None]:
    """The command without its trailing comment, its expected exit code, and why it is not run."""
    cmd, comment = line, ""
    # A '#' starts a comment outside quotes: find the first such position.
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            cmd, comment = line[:i].rstrip(), line[i + 1 :].strip()
            break
    m = re.search(r"\bexit (\d+)\b", comment)
    skip = comment if NOT_RUN in comment else None
    return cmd, int(m.group(1)) if m else 0, skip


def examples(text: str) -> list[Example]:
    out: list[Example] = []
    for n, m in enumerate(FENCE.finditer(text)):
        lang, body = m.group(1), m.group(2)
        if lang == "python":
            out.append(Example(n, "python", body))
            continue
        if lang == "sh":
            lines = [ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        elif lang in ("text", "console"):
            lines = [ln[2:] for ln in body.splitlines() if ln.startswith("$ ")]
        else:
            continue
        for ln in lines:
            cmd, expect, skip = _command(ln)
            out.append(Example(n, "sh", cmd, expect, skip))
    return out


def printed_comments(block: str) -> list[tuple[int, str]]:
    """In a Python example, ``print(...)  # OUTPUT`` states what that print shows: (the print's
    index among the block's prints, OUTPUT). A block with a print in a loop states none."""
    prints = [ln.strip() for ln in block.splitlines() if ln.strip().startswith("print(")]
    out = []
    for i, ln in enumerate(prints):
        if "  # " in ln:
            out.append((i, ln.rsplit("  # ", 1)[1].strip()))
    return out


def _without_pip_install(cmd: str) -> str:
    parts = [p.strip() for p in cmd.split("&&")]
    for p in parts:
        if p.startswith("pip install"):
            assert re.fullmatch(r"pip install -e (\.|\"\.\[\w+\]\")", p), f"README installs something else: {p}"
    return " && ".join(p for p in parts if not p.startswith("pip install"))


def test_readme_examples_parse():
    ex = examples(README.read_text())
    cmds = [e.text for e in ex if e.kind == "sh"]
    # The quick start is exactly two commands, and the README shows every command of the CLI.
    quick = README.read_text().split("## Quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert len([ln for ln in quick.splitlines() if ln.strip()]) == 2
    for sub in ("analyze", "diff", "plan", "memory", "watch", "thresholds"):
        assert any(c.startswith(f"trainscope {sub}") for c in cmds), sub
    assert [e.expect for e in ex if "--fail-if-slower" in e.text] == [3, 0]  # a regression; the history's gate passes
    assert all(e.skip for e in ex if NOT_RUN in (e.skip or "")) and all(
        len(e.skip) > len(NOT_RUN) + 5 for e in ex if e.skip
    )


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    if not shutil.which("git"):
        pytest.skip("git is not installed: the README test runs the examples in a fresh clone")
    dst = tmp_path_factory.mktemp("readme") / "trainscope"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dst)], check=True, capture_output=True, timeout=120)
    return dst


def test_readme_examples_run_from_a_fresh_clone(clone):
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        NO_COLOR="1",
        TERM="dumb",
    )
    env.pop("TRAINSCOPE_DEBUG", None)
    failures, ran, skipped = [], 0, []
    by_block: dict[int, list[Example]] = {}
    for e in examples(README.read_text()):  # the working tree's README: edits are tested before a commit
        by_block.setdefault(e.block, []).append(e)
    for block in by_block.values():
        cwd = clone
        for e in block:
            if e.skip:
                skipped.append(e.text)
                continue
            if e.kind == "python":
                p = subprocess.run(
                    [sys.executable, "-c", e.text], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
                )
                cmd = "python block: " + e.text.splitlines()[0]
                printed = p.stdout.splitlines()
                for i, want in printed_comments(e.text):
                    got = printed[i] if i < len(printed) else "(nothing)"
                    if p.returncode == 0 and got != want:
                        failures.append(f"{cmd}\n  print #{i + 1} printed {got!r}; the README's comment says {want!r}")
            else:
                cmd = _without_pip_install(e.text)
                if not cmd:
                    continue
                # One shell per line; `cd` carries on through the block, as for a reader typing it.
                script = f'cd {shlex.quote(str(cwd))} || exit 99\n{cmd}\nrc=$?\necho "__cwd__=$PWD" >&2\nexit $rc'
                p = subprocess.run(
                    ["bash", "-c", script],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    stdin=subprocess.DEVNULL,
                )
                m = re.search(r"__cwd__=(.*)$", p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "")
                if m and p.returncode == e.expect:
                    cwd = Path(m.group(1))
            ran += 1
            if p.returncode != e.expect:
                failures.append(f"{cmd}\n  exit {p.returncode}, README says {e.expect}\n  {p.stderr.strip()[-400:]}")
    assert not failures, "\n".join(failures)
    assert ran >= 12
    assert len(skipped) <= 3, skipped


def test_the_conventions_are_read_as_documented():
    text = (
        "```sh\ntrainscope diff a b --fail-if-slower 5   # exit 3: a regression\n"
        "echo '# not a comment' && true\n"
        "python -m slow_job   # slow: " + NOT_RUN + "\n```\n"
        "```text\n$ cd runs\noutput line\n$ false   # exit 1\n```\n"
    )
    ex = examples(text)
    assert [(e.text, e.expect, bool(e.skip)) for e in ex] == [
        ("trainscope diff a b --fail-if-slower 5", 3, False),
        ("echo '# not a comment' && true", 0, False),
        ("python -m slow_job", 0, True),
        ("cd runs", 0, False),
        ("false", 1, False),
    ]
    assert _without_pip_install('pip install -e ".[test]" && python -m pytest') == "python -m pytest"
    with pytest.raises(AssertionError):
        _without_pip_install("pip install torch && true")  # the README installs only from the checkout


def _regen():
    """tools/regen_transcripts.py as a module."""
    import importlib.util

    if "regen_transcripts" in sys.modules:
        return sys.modules["regen_transcripts"]
    spec = importlib.util.spec_from_file_location("regen_transcripts", ROOT / "tools" / "regen_transcripts.py")
    regen = importlib.util.module_from_spec(spec)
    sys.modules["regen_transcripts"] = regen
    spec.loader.exec_module(regen)
    return regen


def test_doc_transcripts_are_the_programs_output():
    """Every reproducible ``$ trainscope …`` transcript in README.md and docs/ is what the program
    prints today (tools/regen_transcripts.py rewrites them; it lists the ones it cannot rerun)."""
    regen = _regen()
    docs = [README, *sorted((ROOT / "docs").glob("*.md"))]
    checked = [t for d in docs for t in regen.transcripts(d) if t.skip is None]
    assert len(checked) >= 6  # the analyze, diff, plan and memory transcripts of the guide and README
    assert regen.main(["--check", *map(str, docs)]) == 0, "stale transcripts: run python tools/regen_transcripts.py"


def test_transcript_excerpts_keep_their_shape():
    regen = _regen()
    real = ["head 1", "VERDICT  X 0.90", "  why", "", "Evidence", "  a long line that goes on", "tail"]
    shown = ["head 0", "VERDICT  X 0.50", "…", "Evidence", "  a long line…"]
    assert regen.regenerate(shown, real) == ["head 1", "VERDICT  X 0.90", "…", "Evidence", "  a long line…"]
    with pytest.raises(ValueError):
        regen.regenerate(["Nothing like it"], real)


def test_printed_comments_are_read_as_documented():
    block = "r = f()\nprint(r.a, r.b)          # data 0.82\nprint(r.c)\nprint(r.d)  # 3\n"
    assert printed_comments(block) == [(0, "data 0.82"), (2, "3")]


def _collected_by_a_fresh_pytest() -> int:
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # Only the closing line: the listing itself is megabytes of test ids (some hold long digit runs).
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    n = re.match(r"(\d+) tests? collected", last)
    assert n, p.stdout[-2000:]
    return int(n.group(1))


def test_the_readmes_test_count_is_the_suites(request):
    """The README states the suite's size ("≈ N tests"): within 5 % of what pytest collects — the
    count this run's own collection made when it collected the whole suite (tests/conftest.py:
    suite_collected), else a fresh `pytest --collect-only`."""
    m = re.search(r"≈ ([\d,]+) tests\)", README.read_text())
    assert m, "the README no longer states the number of tests"
    stated = int(m.group(1).replace(",", ""))
    collected = suite_collected(request.config) or _collected_by_a_fresh_pytest()
    assert abs(collected - stated) <= 0.05 * collected, f"README says ≈ {stated:,} tests; pytest collects {collected:,}"


def test_the_readmes_benchmark_rows_are_the_golden_verdicts():
    """The labeled-benchmark table's verdicts and confidences (README, "Diagnosis accuracy") are the
    ones the golden documents hold for the bundled traces — a verdict or confidence that moves with a
    commit moves in the README too (it said `# data 0.9` where the code printed 0.82)."""
    import json as _json

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(
        r"^\| ([\w.\-]+)(?: \(Nsight\))? \| [^|]* \| [^|]* \| ([\w\-/ ]+): ([\w\-/]+) \((\d\.\d\d)\) \|", text, re.M
    )
    checked = 0
    for name, _cls, finding, conf in rows:
        golden = list((ROOT / "tests" / "golden").glob(f"analyze-*-{name}.json"))
        if not golden:
            continue  # public/ and steady/ rows: held by tests/test_steady_properties.py and the benchmark
        v = _json.loads(golden[0].read_text(encoding="utf-8"))["verdict"]
        assert (v["bottleneck"] or v["axis"], f"{v['confidence']:.2f}") == (finding, conf), name
        checked += 1
    assert checked >= 10, rows
