"""The layers, enforced on the source: front ends (``trainscope/commands/``, ``tui/``) go through
:mod:`trainscope.api` and render; analyzers never read inputs themselves.

Every ``import`` in every module is read with :mod:`ast` — at the top, inside functions and under
``if TYPE_CHECKING`` alike — so a front end cannot call the pipeline (readers, analyzers, the rank
executor) behind the api's back, and an analyzer cannot reach for a collector."""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRONT_ENDS = (
    sorted((ROOT / "trainscope" / "commands").glob("*.py"))
    + sorted((ROOT / "tui").glob("*.py"))
    + [ROOT / "trainscope" / "mcp_server.py"]
)
ANALYZERS = sorted((ROOT / "analyzers").rglob("*.py"))

# What a front end may import from the analyzers: result types and constants it renders, never a
# function that computes. Each name is checked below to really be a dataclass, an enum or a constant
# — except the two classes in VIEW_CLASSES, whose reasons are given there.
ALLOWED_FROM_ANALYZERS: dict[str, set[str]] = {
    "trace.analysis": {"Analysis"},  # one rank's typed result (the Fixes tab lists its recommendations)
    "trace.breakdown": {"CATEGORIES"},  # the step-time categories' names and order, for table columns and colours
    "trace.kernels": {"KernelStat", "KernelSummary"},  # the kernel table's rows (RankView.all_kernels)
    "trace.roofline": {"Roofline", "RooflineRow"},  # the roofline plot's points
    "views.memory_curve": {"MemoryCurve"},  # the memory tab's curves (RankView.memory)
    "views.timeline": {
        "TimelineModel",
        "Item",
        "Lane",
        "LaneView",
        "Match",
        "Overlap",
        "GPU_LABELS",
        "HOST_LABELS",
    },  # RankView.timeline
    "live.engine": {"LiveStatus", "READY"},  # a live interval's status (api.LiveSample.status) and its ready state
    "plan.ledger": {
        "GB",
        "OPTIMIZERS",
        "PRECISIONS",
        "Fit",
        "FitOption",
        "Ledger",
        "PlanConfig",
    },  # api.plan's result and the plan app's choices
    "plan.gpu_memory": {"GPU_MEMORY", "GpuMemory"},  # the device table the plan app cycles through
    "compare.diff": {
        "GateResult",
        "RunDiff",
        "RecommendationOutcome",
        "Run",
        "ShareChange",
        "GATE_METRICS",
    },  # api.diff's result; the gate's metric names for --metric
    "kernel_match": {"KernelChange"},  # a row of the diff's kernel table
    "trace.whatif": {"Projection"},  # api.whatif's result
    "rules": {"Rules"},  # the threshold table the views read labels and cut-offs from
    "snapshot.peak": {
        "MemoryPeak",
        "PeakAllocation",
    },  # api.memory_peaks' result: the memory app's timeline and live set
}
# Classes that are neither dataclasses nor constants, allowed with a reason.
VIEW_CLASSES = {
    ("rules", "Rules"): "a table of thresholds (value, unit, source); building it reads no input and judges nothing",
    ("views.timeline", "TimelineModel"): "the timeline's view model that api.RankView builds from a rank's trace; "
    "the app only queries it (lanes in a window, instances, evidence)",
}
FORBIDDEN_PACKAGES = ("trainscope.collectors", "trainscope.api.executor")


def _imports(path: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, module, names) for every import in ``path``; names empty for ``import module``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name, ()) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}:{node.lineno}: relative import"
            out.append((node.lineno, node.module or "", tuple(a.name for a in node.names)))
    return out


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_scan_sees_every_front_end_and_its_imports():
    names = {_rel(p) for p in FRONT_ENDS}
    assert {
        "trainscope/commands/analyze.py",
        "trainscope/commands/watch.py",
        "tui/app.py",
        "tui/state.py",
        "tui/watch_app.py",
        "tui/diff_app.py",
        "tui/plan_app.py",
    } <= names
    # the scan reaches imports inside functions (the commands import lazily)
    assert any(
        m == "trainscope.api" or (m == "trainscope" and "api" in n)
        for _, m, n in _imports(ROOT / "trainscope" / "commands" / "watch.py")
    )


def _violations(path: Path) -> list[str]:
    """What a front end imports that it should have asked trainscope.api for."""
    bad = []
    for line, module, names in _imports(path):
        where = f"{path.name}:{line}"
        if (
            module.startswith(FORBIDDEN_PACKAGES)
            or (module == "trainscope" and "collectors" in names)
            or (module == "trainscope.api" and "executor" in names)
        ):
            bad.append(f"{where}: {module} {names or ''} (reads inputs or maps ranks: call trainscope.api)")
            continue
        if module == "trainscope.analyzers" or (module == "trainscope" and "analyzers" in names):
            bad.append(f"{where}: import of the analyzers package itself")
            continue
        if module.startswith("trainscope.analyzers."):
            sub = module.removeprefix("trainscope.analyzers.")
            if not names:
                bad.append(f"{where}: import {module} (import the typed names, or call trainscope.api)")
                continue
            extra = set(names) - ALLOWED_FROM_ANALYZERS.get(sub, set())
            if extra:
                bad.append(
                    f"{where}: {sorted(extra)} from {module}: computes; call trainscope.api "
                    "(or, for a result type, add it to ALLOWED_FROM_ANALYZERS with the reason)"
                )
    return bad


@pytest.mark.parametrize("path", FRONT_ENDS, ids=_rel)
def test_front_ends_use_the_api_not_the_pipeline(path):
    bad = _violations(path)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("sub,name", sorted((s, n) for s, ns in ALLOWED_FROM_ANALYZERS.items() for n in ns))
def test_allowed_names_are_types_or_constants(sub, name):
    obj = getattr(importlib.import_module(f"trainscope.analyzers.{sub}"), name)
    if (sub, name) in VIEW_CLASSES:
        assert isinstance(obj, type)
        return
    if isinstance(obj, type):
        assert dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum) or issubclass(obj, tuple), (
            f"{sub}.{name} is a class with behaviour: not a plain result type"
        )
    else:
        assert not callable(obj), f"{sub}.{name} is a function: front ends call trainscope.api instead"
        assert isinstance(obj, (str, int, float, tuple, frozenset, dict, list)), f"{sub}.{name}: {type(obj)}"


@pytest.mark.parametrize("path", ANALYZERS, ids=_rel)
def test_analyzers_import_no_collector_and_no_front_end(path):
    bad = [
        f"{_rel(path)}:{line}: {module}"
        for line, module, names in _imports(path)
        if module.startswith(("trainscope.collectors", "trainscope.commands", "trainscope.tui", "trainscope.api"))
        or (module == "trainscope" and {"collectors", "commands", "tui", "api"} & set(names))
    ]
    assert not bad, "\n".join(bad)


def test_a_forbidden_import_is_caught(tmp_path):
    """The rules fire: readers, the executor, analysis functions and whole analyzer modules are
    reported, wherever the import sits; the result types next to them are not."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "from trainscope.analyzers.trace.kernels import KernelSummary\n"
        "if TYPE_CHECKING:\n    from trainscope.api.executor import map_ranks\n"
        "def f():\n    from trainscope.collectors import open_traces\n"
        "    from trainscope.analyzers.trace.kernels import kernel_summary, KernelSummary\n"
        "    import trainscope.analyzers.trace.whatif\n"
        "    from trainscope import analyzers\n"
    )
    bad = _violations(probe)
    assert [b.split(":")[1] for b in bad] == ["4", "6", "7", "8", "9"]
    assert "kernel_summary" in bad[2] and "KernelSummary" not in bad[2]


# --- no layer imports upward ------------------------------------------------------------------------
# The layers from the bottom: the model, then readers and analyzers (side by side, never each other),
# then renderers, then the application layer, then the front ends. A module may import its own layer
# and any layer below; the test fails on the first import that points up.
LAYERS = {
    "trainscope.traces": 0,
    "trainscope.collectors": 1,
    "trainscope.analyzers": 1,
    "trainscope.reports": 2,
    "trainscope.api": 3,
    "trainscope.tui": 4,
    "trainscope.commands": 4,
    "trainscope.common": 4,
    "trainscope.cli": 4,
    "trainscope.integrations": 4,
    "trainscope.modelspec": 4,
    "trainscope.mcp_server": 4,
}
PACKAGE_DIRS = {
    "traces": "trainscope.traces",
    "collectors": "trainscope.collectors",
    "analyzers": "trainscope.analyzers",
    "reports": "trainscope.reports",
    "tui": "trainscope.tui",
    "trainscope/api": "trainscope.api",
    "trainscope/commands": "trainscope.commands",
}
# Known exceptions, each with its reason.
UPWARD_ALLOWED = {
    # modelspec parses `--model`/`plan` specs into the analyzers' PlanConfig: it sits beside the CLI but
    # the api calls it for analyze(model=…) and plan(); it imports only analyzers.
    ("trainscope.api", "trainscope.modelspec"),
}


def _layer(module: str) -> tuple[str, int] | None:
    for name, level in sorted(LAYERS.items(), key=lambda kv: -len(kv[0])):
        if module == name or module.startswith(name + "."):
            return name, level
    return None


def _modules_by_layer() -> list[tuple[Path, str]]:
    out = []
    for d, pkg in PACKAGE_DIRS.items():
        out += [(p, pkg) for p in sorted((ROOT / d).rglob("*.py"))]
    return out


@pytest.mark.parametrize("path,pkg", _modules_by_layer(), ids=lambda v: _rel(v) if isinstance(v, Path) else "")
def test_no_layer_imports_upward(path, pkg):
    own = _layer(pkg)
    bad = []
    for line, module, names in _imports(path):
        targets = [module] if module != "trainscope" else [f"trainscope.{n}" for n in names]
        for target in targets:
            to = _layer(target)
            if to is None or own is None or to[1] <= own[1] or (own[0], to[0]) in UPWARD_ALLOWED:
                continue
            bad.append(f"{_rel(path)}:{line}: {own[0]} (layer {own[1]}) imports {target} (layer {to[1]})")
    # collectors and analyzers share a layer but never import each other
    for line, module, _ in _imports(path):
        if own and own[0] == "trainscope.analyzers" and module.startswith("trainscope.collectors"):
            bad.append(f"{_rel(path)}:{line}: an analyzer imports a collector")
        if own and own[0] == "trainscope.collectors" and module.startswith("trainscope.analyzers"):
            bad.append(f"{_rel(path)}:{line}: a collector imports an analyzer")
    assert not bad, "\n".join(bad)


# --- analyzers by pipeline (issue 40; a one-shot script, since removed, made the layout) ------------
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
    assert not bad, "\n".join(bad)


def test_pipeline_exceptions_are_all_used():
    used = {_excepted(_rel(p), t) for p in ANALYZERS for _, t in _analyzer_imports(p)}
    assert set(PIPELINE_EXCEPTIONS) <= used, sorted(set(PIPELINE_EXCEPTIONS) - used)


def test_a_cross_pipeline_import_is_caught(tmp_path):
    """The rule fires on a pipeline importing another, wherever the import sits, and not on trace/,
    findings/ or a shared module."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from trainscope.analyzers.trace.steps import StepSegmentation\n"
        "from trainscope.analyzers.findings.base import Finding\n"
        "def f():\n    from trainscope.analyzers.live import engine\n"
        "    from trainscope.analyzers import rules\n"
    )
    bad = _pipeline_violations(probe, "trainscope.analyzers.ranks.probe")
    assert bad == ["probe.py:4: ranks imports trainscope.analyzers.live.engine (live)"]
    assert _pipeline_violations(probe, "trainscope.analyzers.trace.probe") == [
        "probe.py:4: trace imports trainscope.analyzers.live.engine (live)"
    ]


def test_every_analyzers_package_is_installed():
    """pyproject.toml lists packages one by one: a sub-package not listed is missing from a wheel."""
    block = re.search(r"\[tool\.setuptools\]\npackages = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.S)
    listed = set(re.findall(r'"([\w.]+)"', block.group(1)))
    found = {_own_module(p) for p in ANALYZERS if p.name == "__init__.py"}
    assert found <= listed, sorted(found - listed)
