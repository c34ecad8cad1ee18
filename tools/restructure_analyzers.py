#!/usr/bin/env python3
"""Restructure ``analyzers/`` by pipeline (issue 40 item 1): one run, deterministic, refuses twice.

``analyzers/`` held ~70 flat modules told apart by file-name prefixes. This script moves each one
(``git mv``) into the sub-package of the pipeline it serves, per :data:`TABLE` below (one row per
module: old name → new path), and rewrites every reference to it in the repository:

- ``from trainscope.analyzers.X import …``, ``import trainscope.analyzers.X [as …]`` and every other
  dotted name ``trainscope.analyzers.X…`` / ``analyzers.X…`` (mock.patch targets, docstrings,
  ``:mod:`` roles, comments);
- ``from trainscope.analyzers import X, Y`` (and relative imports inside ``analyzers/``, made
  absolute as tests/test_layering.py requires), regrouped by the package each name now lives in —
  a module renamed here keeps its local name with ``as``;
- paths ``analyzers/X.py`` in code, comments, docs/*.md and README.md, and the Markdown anchors
  made from headings that name such a path (``#…-analyzersmodule_treepy``);
- ``pyproject.toml``'s package list (every new sub-package is installed, also in a wheel);
- ``tests/test_layering.py``: the names the front ends may import (keys of
  ``ALLOWED_FROM_ANALYZERS``/``VIEW_CLASSES``) and the new rules (:data:`LAYERING_RULES`): ``trace/``
  imports no pipeline sub-package, the pipelines import ``trace/``, ``findings/`` and the shared
  modules, never one another, with the exceptions kept stated there.

Then it runs ``ruff format`` on the Python files it changed (a longer import may need a wrap) and
prints what it did. It refuses to run on a dirty work tree, a second time (``analyzers/trace/``
exists), or when ``analyzers/`` holds a module the table does not place (add its row). Nothing in
``tests/golden/`` or ``tests/data/`` is touched, nor the strings in :data:`KEEP` (text that reaches a
golden document).

    python tools/restructure_analyzers.py            # apply
    python tools/restructure_analyzers.py --dry-run  # say what would change, change nothing
    python tools/restructure_analyzers.py --graph    # the cross-package imports of this mapping

Standard library only (``git`` and, when installed, ``ruff`` are run as programs).
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PKG = "trainscope.analyzers"

# old module (analyzers/OLD.py)   →   new path under analyzers/ (without .py)
# A module is renamed where its old name did not say what it holds (seven things were called
# "memory") and loses the prefix its sub-package now says (live_split → live/split).
TABLE_TEXT = """
# trace/: one trace in, one Analysis out — steps, breakdown, sinks, host idle, GPU gaps, kernels,
# cost, roofline, MFU, repairs, context, verdict, recommendations, what-if (analysis.judge)
analysis          trace/analysis
attention         trace/attention
breakdown         trace/breakdown
busy_bound        trace/busy_bound
context           trace/context
copy_traffic      trace/copy_traffic
cost              trace/cost
frame_names       trace/frame_names
fusion            trace/fusion
gpu_gaps          trace/gpu_gaps
gpu_metrics       trace/gpu_metrics
heap              trace/heap
host_device       trace/host_device
host_idle         trace/host_idle
host_only         trace/host_only
hw_counters       trace/hw_counters
kernel_families   trace/kernel_families
kernels           trace/kernels
memory            trace/allocator_peak
mfu               trace/mfu
module_tree       trace/module_tree
one_off           trace/one_off
op_formulas       trace/op_formulas
phases            trace/phases
range_steps       trace/range_steps
recommendations   trace/recommendations
recording         trace/record_options
repairs           trace/repairs
roofline          trace/roofline
sinks             trace/sinks
steps             trace/steps
verdict           trace/verdict
whatif            trace/whatif
# ranks/: a set of ranks — per-rank summaries aligned on their collectives, the one rank story
ranks             ranks/alignment
rank_story        ranks/story
rank_lanes        ranks/lanes
late_collectives  ranks/late_collectives
straggler_test    ranks/straggler_test
stragglers        ranks/stragglers
# live/: trainscope watch and counter-only recordings — a sliding window of sampled counters
live              live/engine
live_memory       live/memory_creep
live_ranks        live/rank_window
live_split        live/split
live_verdict      live/verdict
live_window       live/window_stats
# snapshot/: trainscope memory — CUDA memory snapshots and profiler memory timelines
snapshot_memory   snapshot/summary
memory_peak       snapshot/peak
timeline_memory   snapshot/timeline_peak
# plan/: trainscope plan — the training-memory ledger of a model description
ledger            plan/ledger
memory_devices    plan/gpu_memory
# compare/: two runs — diff, the gate, the module-tree diff, the run history
diff              compare/diff
history           compare/history
stats             compare/stats
tree_diff         compare/tree_diff
# deep/: analyze --deep — Holistic Trace Analysis' critical path and launch statistics
critical_path     deep/critical_path
deep              deep/second_opinion
launch_stats      deep/launch_stats
# views/: the models the views draw from one trace — timeline lanes, a window as a list, what
# launched a kernel, memory curves
kernel_launch     views/kernel_launch
memory_usage      views/memory_curve
timeline          views/timeline
window            views/trace_window
"""

# Modules that stay at the top of analyzers/: shared by several pipelines (rules, devices, shapes,
# kernel_match, plural) or domain-free numpy algorithms beside intervals (codes, membership,
# nesting). Counted with __init__.py against the limit of 12 top-level modules.
SHARED = ("rules", "intervals", "codes", "devices", "shapes", "kernel_match", "plural", "membership", "nesting")
KEPT_PACKAGES = ("findings",)
MAX_TOP_MODULES = 12  # files analyzers/*.py, __init__.py included

# The sub-packages' docstrings (their __init__.py).
PACKAGES = {
    "trace": "One trace in, one :class:`~trainscope.analyzers.trace.analysis.Analysis` out: steps, breakdown, "
    "sinks, host idle, GPU gaps, kernels, cost, roofline, MFU, repairs, context, verdict, "
    "recommendations, what-if (``analysis.judge``). Imports no other pipeline.",
    "ranks": "A set of ranks: a small summary per rank, the ranks aligned on their collectives' ends, the "
    "one rank story (arrival order, stragglers, late collectives, lanes side by side).",
    "live": "The live engine (``trainscope watch``, counter-only recordings): window statistics over "
    "sampled counters, the live measures' verdict, the step split, per-rank windows, memory creep.",
    "snapshot": "``trainscope memory``: CUDA memory snapshots (peak, fragmentation, live set at the "
    "peak) and profiler memory timelines (peak by category).",
    "plan": "``trainscope plan``: the training-memory ledger of a model description, checked against the "
    "memory capacity of known GPUs.",
    "compare": "Two runs: before and after (diff, gate, statistics), the module trees compared, the run "
    "history's stored summaries.",
    "deep": "``analyze --deep``: a second opinion from Holistic Trace Analysis (critical path, launch "
    "statistics), an optional dependency.",
    "views": "The models the views draw from one analyzed trace: timeline lanes, a time window as a "
    "list, what launched a kernel, device memory over time.",
}

# Text that reaches a golden document (tests/golden/*.json must stay byte-identical): left as it is.
KEEP = (("reports/document.py", "one-off costs found from the trace's evidence (analyzers/one_off.py)"),)

# Prose that names a module by its file name alone, relative to "analyzers/" said before it.
# Applied when found; one not found is reported (its file changed since this table was written).
DOC_EDITS = (
    (
        "docs/tui.md",
        '- The models the screens draw are pure functions in `analyzers/`: `timeline.py` (lanes and "what\n'
        '  is under the cursor"), `whatif.py` (combined projections), `memory_usage.py` (memory over time).',
        "- The models the screens draw are pure functions in `analyzers/`: `views/timeline.py` (lanes and\n"
        '  "what is under the cursor"), `trace/whatif.py` (combined projections), `views/memory_curve.py`\n'
        "  (memory over time).",
    ),
    (
        "docs/watch.md",
        "## Live rules (`analyzers/live.py`, `live_window.py`, `live_verdict.py`)",
        "## Live rules (`analyzers/live/engine.py`, `window_stats.py`, `verdict.py`)",
    ),
    (
        "docs/guide.md",
        "| `analyzers/` | `trainscope.analyzers` | pure functions: steps, breakdown, kernel classes, memory, MFU, "
        "rules table, verdict, recommendations, timeline lanes, what-if projections, live rules, diff, memory "
        "ledger, HTA critical path and stragglers |",
        "| `analyzers/` | `trainscope.analyzers` | pure functions, one sub-package per pipeline: `trace/` (one "
        "trace: steps, breakdown, kernel classes, MFU, verdict, recommendations, what-if), `ranks/` (rank "
        "alignment, stragglers), `live/` (live rules), `snapshot/` (memory snapshots), `plan/` (memory "
        "ledger), `compare/` (diff, history), `deep/` (HTA critical path), `views/` (timeline lanes); "
        "`findings/` the registry; shared beside them: the rules table, intervals, devices, codes, shapes "
        "(docs/development.md) |",
    ),
)
# Anchors of headings whose text one of DOC_EDITS changes: old anchor → new anchor.
ANCHOR_EDITS = {
    "#live-rules-analyzerslivepy-live_windowpy-live_verdictpy": "#live-rules-analyzersliveenginepy-window_statspy-verdictpy"
}

SKIP_PREFIXES = ("tests/golden/", "tests/data/", "tests/__snapshots__/", "docs/img/")
TEXT_SUFFIXES = (".py", ".md", ".toml", ".cfg", ".ini", ".txt", ".rst", ".yml", ".yaml")
THIS = "tools/restructure_analyzers.py"


def parse_table(text: str = TABLE_TEXT) -> dict[str, str]:
    table: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        old, new = line.split()
        assert old not in table, f"{old}: two rows"
        table[old] = new
    news = list(table.values())
    assert len(set(news)) == len(news), "two modules moved to one path"
    return table


TABLE = parse_table()
NEW_DOTTED = {old: new.replace("/", ".") for old, new in TABLE.items()}
_OLD_ALT = "|".join(sorted(map(re.escape, TABLE), key=len, reverse=True))


# -- the import graph (--graph, and the check after applying) ------------------------------------------


def package_of(module: str) -> str | None:
    """The part of analyzers/ a module ``trainscope.analyzers.…`` (new layout) belongs to: a pipeline
    sub-package, ``findings``, ``shared`` (a top-level module), or None outside analyzers."""
    if module == PKG:
        return "shared"
    if not module.startswith(PKG + "."):
        return None
    head = module[len(PKG) + 1 :].split(".")[0]
    if head in PACKAGES or head in KEPT_PACKAGES:
        return head
    return "shared"


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PKG, *parts])


def _absolute(node: ast.ImportFrom, module: str, is_pkg: bool) -> str:
    """The absolute module of a (possibly relative) ``from … import``."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(path: Path, module: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) for each trainscope.analyzers module ``path`` imports, anywhere in it; a name
    imported from a package counts as that module when it is one."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith(PKG)]
        elif isinstance(node, ast.ImportFrom):
            mod = _absolute(node, module, path.name == "__init__.py")
            if not mod.startswith(PKG):
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.append((node.lineno, sub if sub in known else mod))
    return out


def graph(root: Path, mapping: dict[str, str] | None) -> list[tuple[str, str, str, str, int]]:
    """Cross-package imports: (from package, to package, file, imported module, line). ``mapping``
    (old → new dotted) places the modules of a flat analyzers/ as the table would; None reads the
    tree as it is."""
    files = sorted(root.rglob("*.py"))
    names = {p: _module_name(p, root) for p in files}
    known = set(names.values())

    def place(mod: str) -> str:
        if mapping is None or not mod.startswith(PKG + "."):
            return mod
        head, _, rest = mod[len(PKG) + 1 :].partition(".")
        if head in mapping:
            return ".".join(filter(None, (PKG, mapping[head], rest)))
        return mod

    out = []
    for p in files:
        me = place(names[p])
        mine = package_of(me)
        for line, target in imported_modules(p, names[p], known):
            to = package_of(place(target))
            if to and to != mine:
                out.append((mine or "?", to, str(p.relative_to(root.parent)), place(target), line))
    return out


# The rules of tests/test_layering.py, as data: which package may import which.
ALLOWED = {
    "shared": {"shared"},
    "findings": {"shared", "trace"},
    "trace": {"shared", "findings"},
    **{p: {"shared", "findings", "trace"} for p in PACKAGES if p != "trace"},
}


def print_graph(mapping: dict[str, str] | None) -> None:
    edges = graph(REPO / "analyzers", mapping)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for a, b, *_ in edges:
        counts[a, b] += 1
    print("imports between parts of analyzers/ (from → to: import statements)")
    for (a, b), n in sorted(counts.items()):
        ok = b in ALLOWED.get(a, set())
        print(f"  {a:9} → {b:9} {n:4}{'' if ok else '   ← outside the rules'}")
    print("outside the rules:")
    for a, b, f, target, line in edges:
        if b not in ALLOWED.get(a, set()):
            print(f"  {f}:{line}: {a} → {target}")


# -- rewriting -------------------------------------------------------------------------------------------

_DOTTED = re.compile(r"(?<![\w.])((?:trainscope\.)?analyzers)\.(" + _OLD_ALT + r")(?!\w)")
_PATH = re.compile(r"(?<![\w.])analyzers/(" + _OLD_ALT + r")\.py(?!\w)")
_ANCHOR_TOKEN = re.compile(r"#[A-Za-z0-9_-]+")
_ANCHOR_MOD = re.compile(r"analyzers(" + _OLD_ALT + r")py(?![a-z0-9_])")


def rewrite_text(rel: str, text: str) -> str:
    """Every dotted name and path of a moved module in ``text`` (file ``rel``), the KEEP strings aside."""
    held = {}
    for path, literal in KEEP:
        if path == rel and literal in text:
            token = f"\0KEEP{len(held)}\0"
            held[token] = literal
            text = text.replace(literal, token)
    text = _DOTTED.sub(lambda m: f"{m.group(1)}.{NEW_DOTTED[m.group(2)]}", text)
    text = _PATH.sub(lambda m: f"analyzers/{TABLE[m.group(1)]}.py", text)
    if rel.endswith(".md"):
        for old, new in ANCHOR_EDITS.items():
            text = text.replace(old + ")", new + ")")
        text = _ANCHOR_TOKEN.sub(
            lambda t: _ANCHOR_MOD.sub(lambda m: "analyzers" + TABLE[m.group(1)].replace("/", "") + "py", t.group(0)),
            text,
        )
    for token, literal in held.items():
        text = text.replace(token, literal)
    return text


def _module_of_file(rel: str) -> tuple[str, bool] | None:
    """(dotted module, is a package) of a repository .py file inside analyzers/, else None."""
    p = Path(rel)
    if p.parts[0] != "analyzers":
        return None
    parts = list(p.with_suffix("").parts[1:])
    is_pkg = parts[-1] == "__init__"
    if is_pkg:
        parts = parts[:-1]
    return ".".join([PKG, *parts]), is_pkg


def rewrite_imports(rel: str, text: str) -> str:
    """``from trainscope.analyzers import a, b as c`` regrouped by the package each name now lives in,
    and relative imports inside analyzers/ made absolute (after :func:`rewrite_text`)."""
    tree = ast.parse(text, filename=rel)
    here = _module_of_file(rel)
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            if here is None:
                continue
            module = _absolute(node, *here)
            old_module = module
            # a relative import names an old module; map it as the dotted pass maps absolute names
            module = _DOTTED.sub(lambda m: f"{m.group(1)}.{NEW_DOTTED[m.group(2)]}", module)
        else:
            module = old_module = node.module or ""
        if module != PKG and not node.level:
            continue
        groups: dict[str, list[str]] = defaultdict(list)
        for a in node.names:
            if module == PKG and a.name in TABLE:
                new_pkg, _, new_name = NEW_DOTTED[a.name].rpartition(".")
                local = a.asname or a.name
                groups[f"{PKG}.{new_pkg}"].append(new_name if local == new_name else f"{new_name} as {local}")
            else:
                groups[module].append(a.name if not a.asname else f"{a.name} as {a.asname}")
        if not node.level and list(groups) == [old_module]:
            continue  # nothing moved
        start = offsets[node.lineno - 1] + len(lines[node.lineno - 1].encode()[: node.col_offset].decode())
        end = offsets[node.end_lineno - 1] + len(lines[node.end_lineno - 1].encode()[: node.end_col_offset].decode())
        indent = lines[node.lineno - 1][: len(lines[node.lineno - 1]) - len(lines[node.lineno - 1].lstrip())]
        at_line_start = text[offsets[node.lineno - 1] : start].strip() == ""
        sep = "\n" + indent if at_line_start else "; "
        stmts = [f"from {mod} import {', '.join(names)}" for mod, names in groups.items()]
        edits.append((start, end, sep.join(stmts)))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


_ALLOWED_BLOCK = re.compile(r"(ALLOWED_FROM_ANALYZERS:.*?\nFORBIDDEN_PACKAGES)", re.S)
_KEY = re.compile(r'(?<=[\s(])"(' + _OLD_ALT + r')"(?=\s*[:,])')


def rewrite_layering(text: str) -> str:
    """tests/test_layering.py: the keys of ALLOWED_FROM_ANALYZERS and VIEW_CLASSES (module names
    under trainscope.analyzers) follow the table; the new rules are appended."""
    m = _ALLOWED_BLOCK.search(text)
    if m is None:
        raise SystemExit("tests/test_layering.py: ALLOWED_FROM_ANALYZERS … FORBIDDEN_PACKAGES not found")
    block = _KEY.sub(lambda k: f'"{NEW_DOTTED[k.group(1)]}"', m.group(1))
    text = text[: m.start()] + block + text[m.end() :]
    if "def test_trace_imports_no_pipeline" not in text:
        if "\nimport re\n" not in text:
            text = text.replace("\nimport importlib\n", "\nimport importlib\nimport re\n", 1)
        text = text.rstrip("\n") + "\n\n\n" + LAYERING_RULES.lstrip("\n")
    return text


_PACKAGES_LIST = re.compile(r'(packages = \[\n(?:    "[^"]+",\n)*?    "trainscope\.analyzers\.findings",\n)')


def rewrite_pyproject(text: str) -> str:
    m = _PACKAGES_LIST.search(text)
    if m is None:
        raise SystemExit('pyproject.toml: "trainscope.analyzers.findings" not found in [tool.setuptools] packages')
    add = "".join(f'    "{PKG}.{p}",\n' for p in PACKAGES)
    return text[: m.end()] + add + text[m.end() :]


LAYERING_RULES = '''
# --- analyzers by pipeline (issue 40; tools/restructure_analyzers.py made the layout) ----------------
# analyzers/ holds one sub-package per pipeline — trace/ (one trace), ranks/, live/, snapshot/, plan/,
# compare/, deep/, views/ — with findings/ (the registry) and the shared modules at the top beside them.
# trace/ imports none of the other pipelines; the other pipelines import trace/, findings/ and the
# shared modules, never one another; findings/ imports trace/ and the shared modules; a shared module
# imports only shared modules. Every import counts, at the top, in a function or under TYPE_CHECKING.
PIPELINES = ("trace", "ranks", "live", "snapshot", "plan", "compare", "deep", "views")
MAY_IMPORT = {
    "shared": {"shared"},
    "findings": {"shared", "trace"},
    "trace": {"shared", "findings"},
    **{p: {"shared", "findings", "trace"} for p in PIPELINES if p != "trace"},
}
# The exceptions kept: (importing file, or a folder for all its files; imported module) → the reason.
# An entry no import uses any more fails (test_pipeline_exceptions_are_all_used).
PIPELINE_EXCEPTIONS = {
    ("analyzers/trace/analysis.py", "trainscope.analyzers.live.engine"): "a trace of sampled counters only "
    "(a `watch --record` recording, an nvidia-smi CSV) has no events for the trace rules: analyze() judges it "
    "with the live rules, in a function (issue 40 item 5 moves this choice out of the trace pipeline)",
    ("analyzers/compare/diff.py", "trainscope.analyzers.ranks.alignment"): "a side of a diff is a rank set: "
    "summarize_run maps each rank to its RankSummary (kernel times, shapes), the map the rank pipeline "
    "runs; the diff reads nothing else of ranks/",
    ("analyzers/findings/", "trainscope.analyzers.live.window_stats"): "the registry declares each "
    "finding's live rule (LiveMeasure) over the live window's statistics: WindowStats, the type only, "
    "under TYPE_CHECKING",
    ("analyzers/findings/live.py", "trainscope.analyzers.live.memory_creep"): "machine/memory-creep's live "
    "measure is the creep fit over the window's memory series (memory_creeps): the registry declares it",
    ("analyzers/findings/memory.py", "trainscope.analyzers.snapshot.summary"): "the memory findings' "
    "snapshot rule reads a DeviceSnapshotMemory: the type only, under TYPE_CHECKING",
}
MAX_TOP_MODULES = 12  # analyzers/*.py, __init__.py included; sub-packages are not modules


def _part(module: str) -> str | None:
    """The part of analyzers/ a module belongs to: a pipeline, "findings", "shared", None outside."""
    if module == "trainscope.analyzers":
        return "shared"
    if not module.startswith("trainscope.analyzers."):
        return None
    head = module.split(".")[2]
    return head if head in PIPELINES or head == "findings" else "shared"


def _own_module(path: Path) -> str:
    parts = list(path.relative_to(ROOT / "analyzers").with_suffix("").parts)
    return ".".join(["trainscope", "analyzers", *(parts[:-1] if parts[-1] == "__init__" else parts)])


_KNOWN = {_own_module(p) for p in ANALYZERS}


def _analyzer_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) per trainscope.analyzers module imported; ``from pkg import mod`` is ``pkg.mod``."""
    out = []
    for line, module, names in _imports(path):
        if not module.startswith("trainscope.analyzers"):
            continue
        subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in _KNOWN]
        out += [(line, s) for s in subs] or [(line, module)]
    return out


def _excepted(where: str, target: str) -> tuple[str, str] | None:
    """The PIPELINE_EXCEPTIONS entry that allows ``where`` to import ``target``, if any."""
    for key in PIPELINE_EXCEPTIONS:
        if key[1] == target and (where == key[0] or (key[0].endswith("/") and where.startswith(key[0]))):
            return key
    return None


def _pipeline_violations(path: Path, own: str | None = None) -> list[str]:
    """What ``path`` (module ``own``, by default its place under analyzers/) imports against the rules."""
    mine = _part(own or _own_module(path))
    where = _rel(path) if path.is_relative_to(ROOT) else path.name
    bad = []
    for line, target in _analyzer_imports(path):
        to = _part(target)
        if to is None or to == mine or to in MAY_IMPORT[mine] or _excepted(where, target):
            continue
        bad.append(f"{where}:{line}: {mine} imports {target} ({to})")
    return bad


def test_analyzers_are_grouped_by_pipeline():
    top = sorted(p.name for p in (ROOT / "analyzers").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules at the top of analyzers/: {top}"
    subs = {p.name for p in (ROOT / "analyzers").iterdir() if (p / "__init__.py").is_file()}
    assert subs == set(PIPELINES) | {"findings"}


@pytest.mark.parametrize("path", ANALYZERS, ids=_rel)
def test_trace_imports_no_pipeline_and_pipelines_not_one_another(path):
    bad = _pipeline_violations(path)
    assert not bad, "\\n".join(bad)


def test_pipeline_exceptions_are_all_used():
    used = {_excepted(_rel(p), t) for p in ANALYZERS for _, t in _analyzer_imports(p)}
    assert set(PIPELINE_EXCEPTIONS) <= used, sorted(set(PIPELINE_EXCEPTIONS) - used)


def test_a_cross_pipeline_import_is_caught(tmp_path):
    """The rule fires on a pipeline importing another, wherever the import sits, and not on trace/,
    findings/ or a shared module."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from trainscope.analyzers.trace.steps import StepSegmentation\\n"
        "from trainscope.analyzers.findings.base import Finding\\n"
        "def f():\\n    from trainscope.analyzers.live import engine\\n"
        "    from trainscope.analyzers import rules\\n"
    )
    bad = _pipeline_violations(probe, "trainscope.analyzers.ranks.probe")
    assert bad == ["probe.py:4: ranks imports trainscope.analyzers.live.engine (live)"]
    assert _pipeline_violations(probe, "trainscope.analyzers.trace.probe") == [
        "probe.py:4: trace imports trainscope.analyzers.live.engine (live)"
    ]


def test_every_analyzers_package_is_installed():
    """pyproject.toml lists packages one by one: a sub-package not listed is missing from a wheel."""
    block = re.search(r"\\[tool\\.setuptools\\]\\npackages = \\[(.*?)\\]", (ROOT / "pyproject.toml").read_text(), re.S)
    listed = set(re.findall(r'"([\\w.]+)"', block.group(1)))
    found = {_own_module(p) for p in ANALYZERS if p.name == "__init__.py"}
    assert found <= listed, sorted(found - listed)
'''


# -- the run ----------------------------------------------------------------------------------------------


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def text_files() -> list[str]:
    out = []
    for rel in git("ls-files", "-z").split("\0"):
        if not rel or rel == THIS or rel.startswith(SKIP_PREFIXES):
            continue
        p = REPO / rel
        if not p.is_file() or p.is_symlink():
            continue
        if not (rel.endswith(TEXT_SUFFIXES) or rel.startswith(".ci/") or Path(rel).suffix == ""):
            continue
        raw = p.read_bytes()
        if b"\0" in raw:
            continue
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        out.append(rel)
    return out


def preflight(allow_dirty: bool) -> None:
    ana = REPO / "analyzers"
    if (ana / "trace").exists():
        raise SystemExit("already applied: analyzers/trace/ exists. Nothing done.")
    if not allow_dirty and git("status", "--porcelain", "--untracked-files=no").strip():
        raise SystemExit("the work tree has changes: commit or stash them first (or --allow-dirty). Nothing done.")
    flat = sorted(p.stem for p in ana.glob("*.py") if p.name != "__init__.py")
    unplaced = [m for m in flat if m not in TABLE and m not in SHARED]
    missing = [m for m in TABLE if not (ana / f"{m}.py").is_file()]
    taken = [n for n in TABLE.values() if (ana / f"{n}.py").exists()]
    clash = [p for p in PACKAGES if (ana / p).exists() and not (ana / f"{p}.py").is_file()]
    problems = []
    if unplaced:
        problems.append(f"modules the table does not place (add a row to TABLE_TEXT or SHARED): {unplaced}")
    if missing:
        problems.append(f"rows whose module is gone from analyzers/ (remove or fix the row): {missing}")
    if taken:
        problems.append(f"destinations that exist already: {taken}")
    if clash:
        problems.append(f"sub-package names already taken by a folder: {clash}")
    top = len(SHARED) + 1
    if top > MAX_TOP_MODULES:
        problems.append(f"{top} top-level modules would remain (limit {MAX_TOP_MODULES})")
    if problems:
        raise SystemExit("refused:\n  " + "\n  ".join(problems))


def apply(dry_run: bool, allow_dirty: bool) -> int:
    preflight(allow_dirty)
    ana = REPO / "analyzers"
    new_files: dict[str, str] = {}  # repository path after the move → new content
    changed: list[str] = []
    for rel in text_files():
        old = (REPO / rel).read_text()
        new = old
        for path, before, after in DOC_EDITS:  # first: the prose names modules as they were
            if path == rel:
                if before in new:
                    new = new.replace(before, after)
                else:
                    print(f"note: {path}: the prose DOC_EDITS names is not there (changed?): edit it by hand")
        new = rewrite_text(rel, new)
        if rel.endswith(".py"):
            new = rewrite_imports(rel, new)
        if rel == "tests/test_layering.py":
            new = rewrite_layering(new)
        if rel == "pyproject.toml":
            new = rewrite_pyproject(new)
        dest = rel
        parts = Path(rel).parts
        if len(parts) == 2 and parts[0] == "analyzers" and Path(rel).stem in TABLE:
            dest = f"analyzers/{TABLE[Path(rel).stem]}.py"
        if new != old or dest != rel:
            new_files[dest] = new
        if new != old:
            changed.append(rel)

    print(f"analyzers/: {len(TABLE)} modules into {len(PACKAGES)} sub-packages; {len(SHARED)} shared modules stay:")
    print("  " + ", ".join(SHARED))
    by_pkg: dict[str, list[str]] = defaultdict(list)
    for old, new in TABLE.items():
        by_pkg[new.split("/")[0]].append(old if Path(new).name == old else f"{old} → {Path(new).name}")
    for pkg in PACKAGES:
        print(f"  {pkg}/: {', '.join(by_pkg[pkg])}")
    print(f"references rewritten in {len(changed)} files:")
    for rel in changed:
        print(f"  {rel}")
    if dry_run:
        print("dry run: nothing changed")
        return 0

    for pkg, doc in PACKAGES.items():
        (ana / pkg).mkdir(exist_ok=True)
        init = ana / pkg / "__init__.py"
        init.write_text('"""' + _wrap(doc) + '"""\n')
        new_files.setdefault(f"analyzers/{pkg}/__init__.py", init.read_text())
    for old, new in TABLE.items():
        git("mv", f"analyzers/{old}.py", f"analyzers/{new}.py")
    for rel, content in new_files.items():
        (REPO / rel).write_text(content)
    touched_py = sorted(r for r in new_files if r.endswith(".py"))
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if os.path.exists(ruff):
        subprocess.run([ruff, "format", "--quiet", *touched_py], cwd=REPO, check=True)
        print(f"ruff format on the {len(touched_py)} Python files changed")
    else:
        print("ruff not found: run `ruff format .` before committing")
    git("add", "--", *sorted(new_files))
    top = sorted(p.name for p in ana.glob("*.py"))
    print(f"analyzers/ top level: {len(top)} modules (__init__.py counted; limit {MAX_TOP_MODULES}): {', '.join(top)}")
    for rel in new_files:
        if rel.endswith(".py"):
            compile((REPO / rel).read_text(), rel, "exec")
    left = [f"{rel}: {ref}" for rel in text_files() for ref in old_references(rel, (REPO / rel).read_text())]
    if left:
        print("references to an old module left (KEEP aside):")
        print("  " + "\n  ".join(left))
    print("staged; next: pip install --no-deps -e . && ruff check . && python tools/typecheck.py && pytest")
    return 0


_LEFT = re.compile(r"(?<![\w.])(?:trainscope\.)?analyzers[./](" + _OLD_ALT + r")(\.py|\.\w+)?(?![\w/])")


def old_references(rel: str, text: str) -> list[str]:
    """References to a module by its old name still in ``text`` (the KEEP strings aside). Where a new
    sub-package has an old module's name (ranks, live, deep), only the path ``analyzers/NAME.py`` is
    surely old: a dotted name left behind there fails at import, in the tests."""
    out = []
    for m in _LEFT.finditer(text):
        if m.group(1) in PACKAGES and m.group(2) != ".py":
            continue
        if any(rel == k and m.group(0) in literal for k, literal in KEEP):
            continue
        out.append(m.group(0))
    return out


def _wrap(text: str, width: int = 100) -> str:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    lines.append(cur)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    ap.add_argument("--graph", action="store_true", help="print the imports between parts of analyzers/")
    ap.add_argument("--allow-dirty", action="store_true", help="run on a work tree with uncommitted changes")
    args = ap.parse_args(argv)
    if args.graph:
        applied = (REPO / "analyzers" / "trace").is_dir()
        print_graph(None if applied else NEW_DOTTED)
        return 0
    return apply(args.dry_run, args.allow_dirty)


if __name__ == "__main__":
    sys.exit(main())
