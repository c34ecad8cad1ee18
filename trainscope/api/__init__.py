"""trainscope from Python: the one application layer every front end (the CLI, the terminal apps,
``watch``, notebooks, training scripts) goes through.

    >>> import trainscope.api as ts
    >>> r = ts.analyze("run.pt.trace.json.gz")
    >>> r.verdict.axis, r.verdict.confidence
    ('data', 0.9)
    >>> print(r.to_text())

Every function reads and analyzes with the same pipeline as ``trainscope analyze`` (open the
traces → one analysis per rank → stragglers → optional HTA deep analysis → the report document)
and raises one exception family, :class:`TrainscopeError`; :func:`describe` maps any exception to
the one-line message and exit code the command line prints (the only place that mapping lives).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Every public name and the module of the package that defines it: the one place the package's
# surface is declared. Modules load on first use, so `import trainscope.api` stays cheap.
_WHERE = {
    # analysis
    "analyze": "analysis",
    "run_deep": "analysis",
    "check_deep_available": "analysis",
    "check_options": "analysis",
    "model_ledger": "analysis",
    "whatif": "analysis",
    "whatif_levers": "analysis",
    "Report": "report",
    "RankView": "report",
    "with_ledger": "report",
    "export_perfetto": "export",
    "rules_from": "rules",
    # comparison, planning, memory, live
    "diff": "comparison",
    "gate": "comparison",
    "node_gate": "comparison",
    "node_budget": "comparison",
    "DiffResult": "comparison",
    "save_diff": "comparison",
    # the run history
    "RunStore": "store",
    "StoredRun": "store",
    "open_store": "store",
    "save_run": "store",
    "list_runs": "store",
    "default_store_path": "store",
    "is_run_ref": "store",
    # reading into a run (the MCP server's tools)
    "explain_finding": "explore",
    "kernel_table": "explore",
    "step_table": "explore",
    "timeline_window": "explore",
    "tree_table": "explore",
    "plan": "planning",
    "plan_config": "planning",
    "plan_ledger": "planning",
    "normalize_plan": "planning",
    "resolve_device": "planning",
    "PlanResult": "planning",
    "memory": "memory_report",
    "memory_peaks": "memory_report",
    "MemoryReport": "memory_report",
    "watch": "live",
    "Watch": "live",
    "LiveSample": "live",
    "live_analyzer": "live",
    "open_recording": "live",
    # where users are
    "on_trace_ready": "hooks",
    # errors and exit codes
    "TrainscopeError": "errors",
    "BadInput": "errors",
    "DeepUnavailable": "errors",
    "Regression": "errors",
    "describe": "errors",
    "EXIT_OK": "errors",
    "EXIT_INTERNAL": "errors",
    "EXIT_BAD_INPUT": "errors",
    "EXIT_REGRESSION": "errors",
    "EXIT_INTERRUPTED": "errors",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'trainscope.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"trainscope.api.{module}"), name)
    globals()[name] = value  # once: later lookups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


if TYPE_CHECKING:  # for type checkers and editors: the same names, statically
    from trainscope.api.analysis import (  # noqa: F401
        analyze,
        check_deep_available,
        check_options,
        model_ledger,
        run_deep,
        whatif,
        whatif_levers,
    )
    from trainscope.api.comparison import DiffResult, diff, gate, node_budget, node_gate, save_diff  # noqa: F401
    from trainscope.api.errors import (  # noqa: F401  # noqa: F401  # noqa: F401
        EXIT_BAD_INPUT,
        EXIT_INTERNAL,
        EXIT_INTERRUPTED,
        EXIT_OK,
        EXIT_REGRESSION,
        BadInput,
        DeepUnavailable,
        Regression,
        TrainscopeError,
        describe,
    )
    from trainscope.api.explore import (  # noqa: F401
        explain_finding,
        kernel_table,
        step_table,
        timeline_window,
        tree_table,
    )
    from trainscope.api.export import export_perfetto  # noqa: F401
    from trainscope.api.hooks import on_trace_ready  # noqa: F401
    from trainscope.api.live import LiveSample, Watch, live_analyzer, open_recording, watch  # noqa: F401
    from trainscope.api.memory_report import MemoryReport, memory, memory_peaks  # noqa: F401
    from trainscope.api.planning import (  # noqa: F401
        PlanResult,
        normalize_plan,
        plan,
        plan_config,
        plan_ledger,
        resolve_device,
    )
    from trainscope.api.report import RankView, Report, with_ledger  # noqa: F401
    from trainscope.api.rules import rules_from  # noqa: F401
    from trainscope.api.store import (  # noqa: F401  # noqa: F401
        RunStore,
        StoredRun,
        default_store_path,
        is_run_ref,
        list_runs,
        open_store,
        save_run,
    )
