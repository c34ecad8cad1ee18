"""The registry of findings: every finding declared once (:class:`FindingSpec`), one module per
family. Consumers read it from here — the verdict (sinks and headlines), recommendations (fixes),
what-if (pools), diff (measures), ``--deep`` (critical-path families), the live engine (live measures, fixes), the memory-snapshot rules, the
reports and the labeled benchmark (classes). :func:`validate` lists every declaration that lacks
what a consumer needs; a test holds that list empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainscope.analyzers.findings import comm
from trainscope.analyzers.findings import data
from trainscope.analyzers.findings import graphs
from trainscope.analyzers.findings import host
from trainscope.analyzers.findings import kernels
from trainscope.analyzers.findings import live
from trainscope.analyzers.findings import memory
from trainscope.analyzers.findings import ranks
from trainscope.analyzers.findings import startup
from trainscope.analyzers.findings import tree
from trainscope.analyzers.findings.base import AXES
from trainscope.analyzers.findings.base import CRITICAL_PATH_FAMILIES
from trainscope.analyzers.findings.base import LABEL_CLASSES
from trainscope.analyzers.findings.base import LIVE_STEPS
from trainscope.analyzers.findings.base import PROJECTIONS
from trainscope.analyzers.findings.base import DiffMeasure
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import FindingSpec
from trainscope.analyzers.findings.base import Fix
from trainscope.analyzers.findings.base import FixText
from trainscope.analyzers.findings.base import LiveMeasure
from trainscope.analyzers.findings.base import Severity
from trainscope.analyzers.findings.base import Verdict
from trainscope.analyzers.findings.base import by_stake
from trainscope.analyzers.findings.base import code_language
from trainscope.analyzers.findings.base import fixed
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.sinks import SINKS

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.findings.observations import DiagnosisInput
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.trace.context import Context

FAMILIES = (data, host, comm, memory, kernels, ranks, live, graphs, startup, tree)


def _collect() -> dict[str, FindingSpec]:
    out: dict[str, FindingSpec] = {}
    for fam in FAMILIES:
        for s in fam.SPECS:
            if s.id in out:
                raise ValueError(f"finding {s.id} declared twice")
            out[s.id] = s
    return out


REGISTRY: dict[str, FindingSpec] = _collect()

# What-if pools that several fixes draw on, and the breakdown categories that hold each pool's time:
# together its fixes cannot remove more than that (analyzers/trace/whatif.py).
POOL_CATEGORIES: dict[str, tuple[str, ...]] = {
    "input": ("idle_data_wait", "idle_other"),
    "copies": ("copy",),
    "host-idle": ("idle_sync", "idle_host_overhead", "idle_other"),
    "comm": ("communication",),
    "memory-bound": ("compute", "memset"),
    "tensor-cores": ("compute",),
}


def spec(finding_id: str) -> FindingSpec | None:
    return REGISTRY.get(finding_id)


def specs(*, offline: bool | None = None, live: bool | None = None) -> list[FindingSpec]:
    return [
        s
        for s in REGISTRY.values()
        if (offline is None or s.offline == offline) and (live is None or (s.live is not None) == live)
    ]


def evaluate(obs: DiagnosisInput, rules: Rules) -> list[Finding]:
    """Every offline finding the observations support (unordered)."""
    out: list[Finding] = []
    for s in REGISTRY.values():
        if s.measure is None:  # raised by the live or snapshot rules
            continue
        got = s.measure(obs, rules)
        if isinstance(got, Finding):
            out.append(got)
        elif got:
            out.extend(got)
    return out


def pool_members(pool: str) -> tuple[str, ...]:
    """The recommendation ids of the fixes that draw on ``pool``."""
    ids: list[str] = []
    for s in REGISTRY.values():
        if s.whatif_pool == pool:
            for f in (s.fix, *s.alternatives):
                if f is not None and f.rec_id not in ids:
                    ids.append(f.rec_id)
    return tuple(ids)


def by_rec_id(rec_id: str) -> FindingSpec | None:
    return next(
        (s for s in REGISTRY.values() if any(f is not None and f.rec_id == rec_id for f in (s.fix, *s.alternatives))),
        None,
    )


def title_for(finding_id: str, ctx: Context | None, default: str) -> str:
    """A finding's headline in the run's words (``default`` where the wording fits any run)."""
    s = REGISTRY.get(finding_id)
    return s.title_for(ctx, default) if s is not None else default


def detail_for(finding_id: str, ctx: Context | None, default: str) -> str:
    """A finding's one-line explanation in the run's words."""
    s = REGISTRY.get(finding_id)
    return s.detail_for(ctx, default) if s is not None else default


def fix_text(
    finding_id: str, ctx: Context | None, *, single_loader: bool = False, bf16: bool = True, cold_start: bool = False
) -> FixText | None:
    """The fix for ``finding_id`` in the run's context, or None when the finding has no code fix.
    ``cold_start``: the stake is first-call code loading, not steady-state work."""
    s = REGISTRY.get(finding_id)
    return s.fix_words(ctx, single_loader=single_loader, bf16=bf16, cold_start=cold_start) if s is not None else None


def live_specs() -> list[FindingSpec]:
    """The findings the live engine raises, in the order it evaluates them: the live flowchart's steps
    (:data:`LIVE_STEPS`), then the registry's order."""
    live = [s for s in REGISTRY.values() if s.live is not None]
    return sorted(live, key=lambda s: LIVE_STEPS.index(s.live.step) if s.live is not None else 0)


def validate(registry: dict[str, FindingSpec] | None = None) -> list[str]:
    """Every declaration that lacks what a consumer needs, as one line each (empty: all complete)."""

    reg = REGISTRY if registry is None else registry
    names = set(Rules.names())
    problems: list[str] = []
    for fid, s in reg.items():

        def bad(what: str, fid: str = fid) -> None:
            problems.append(f"{fid}: {what}")

        if s.id != fid:
            bad(f"registered under another id ({s.id})")
        if s.axis not in AXES:
            bad(f"axis {s.axis!r} is not a D·A·M axis")
        if not s.offline and s.live is None and not s.snapshot:
            bad("no rule raises it (no trace measure, live measure or snapshot rule)")
        if s.live is not None:
            if s.live.step not in LIVE_STEPS:
                bad(f"live step {s.live.step!r} is not a step of the live flowchart (LIVE_STEPS)")
            if not s.live.reads:
                bad("live measure does not say what it reads")
            for n in s.live.thresholds:
                if n not in names:
                    bad(f"live measure reads unknown threshold {n}")
        if not s.title or not s.headline:
            bad("no title or headline (reports, apps)")
        fixes = [f for f in (s.fix, *s.alternatives) if f is not None]
        if s.fix is None:
            bad("no fix (recommendations, live fixes)")
        for f in fixes:
            if not (f.rec_id and f.title and f.pytorch and f.native):
                bad(f"fix {f.rec_id or '?'} lacks an id, title, PyTorch change or native change")
            if f.projection not in PROJECTIONS:
                bad(f"fix {f.rec_id}: unknown projection {f.projection!r}")
            if f.projection in ("idle", "busy", "data-wait", "amdahl") and not s.whatif_pool:
                bad(f"fix {f.rec_id} projects a gain but the finding has no what-if pool")
        if s.whatif_pool and s.whatif_pool not in POOL_CATEGORIES:
            bad(f"what-if pool {s.whatif_pool!r} holds no time (POOL_CATEGORIES)")
        if s.diff_measure is None:
            bad("no diff measure (diff cannot tell whether it was addressed)")
        if s.critical_path not in CRITICAL_PATH_FAMILIES:
            bad("no critical-path category (--deep cannot reconcile it)")
        if s.label_class is not None and s.label_class not in LABEL_CLASSES:
            bad(f"label class {s.label_class!r} is not a benchmark class")
        if s.can_be_primary and (s.label_class is None or s.sink not in SINKS):
            bad("can be primary but has no sink or no benchmark class")
        for n in s.severity.rule_names:
            if n not in names:
                bad(f"severity reads unknown threshold {n}")
        for n in s.thresholds:
            if n not in names:
                bad(f"its rules read unknown threshold {n}")
        if s.refines is not None and (s.refines not in reg or reg[s.refines].sink != s.sink):
            bad(f"refines {s.refines}, which is not a registered finding of the same sink")
    return problems


__all__ = [
    "REGISTRY",
    "POOL_CATEGORIES",
    "FindingSpec",
    "Fix",
    "FixText",
    "code_language",
    "title_for",
    "detail_for",
    "fix_text",
    "DiffMeasure",
    "Severity",
    "Finding",
    "Evidence",
    "Verdict",
    "by_stake",
    "fixed",
    "spec",
    "specs",
    "evaluate",
    "validate",
    "pool_members",
    "by_rec_id",
    "live_specs",
    "LiveMeasure",
    "LIVE_STEPS",
]


def findings_markdown() -> str:
    """The registry as a Markdown table (``docs/analysis.md`` holds it between its markers; a test
    keeps the two equal): every finding, its axis, headline, which rules raise it and whether it can
    be the verdict."""

    def raised_by(s: FindingSpec) -> str:
        where = [w for w, on in (("trace", s.offline), ("live", s.live is not None), ("snapshot", s.snapshot)) if on]
        return ", ".join(where)

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = [
        "| finding | axis | headline | raised by | can be the verdict | what it measures |",
        "|---|---|---|---|---|---|",
    ]
    rows += [
        f"| `{s.id}` | {s.axis} | {cell(s.headline)} | {raised_by(s)} | {'yes' if s.can_be_primary else 'no'} "
        f"| {cell(s.describes or s.title)} |"
        for s in REGISTRY.values()
    ]
    return "\n".join(rows) + "\n"
