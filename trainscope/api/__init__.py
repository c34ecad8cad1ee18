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
from typing import TYPE_CHECKING
from typing import Any

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
    # what an input names (a file, an export, a set of ranks, a stored run)
    "InputDescription": "inputs",
    "describe_input": "inputs",
    "is_run_ref": "inputs",
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


# For type checkers and editors: the same names, statically; `name as name` re-exports each (mypy's
# strict mode exports no imported name otherwise). isort is off here: it would split each `as` into a
# statement of its own.
# isort: off
if TYPE_CHECKING:
    from trainscope.api.analysis import (
        analyze as analyze,
        check_deep_available as check_deep_available,
        check_options as check_options,
        model_ledger as model_ledger,
        run_deep as run_deep,
        whatif as whatif,
        whatif_levers as whatif_levers,
    )
    from trainscope.api.comparison import (
        DiffResult as DiffResult,
        diff as diff,
        gate as gate,
        node_budget as node_budget,
        node_gate as node_gate,
        save_diff as save_diff,
    )
    from trainscope.api.errors import (
        EXIT_BAD_INPUT as EXIT_BAD_INPUT,
        EXIT_INTERNAL as EXIT_INTERNAL,
        EXIT_INTERRUPTED as EXIT_INTERRUPTED,
        EXIT_OK as EXIT_OK,
        EXIT_REGRESSION as EXIT_REGRESSION,
        BadInput as BadInput,
        DeepUnavailable as DeepUnavailable,
        Regression as Regression,
        TrainscopeError as TrainscopeError,
        describe as describe,
    )
    from trainscope.api.explore import (
        explain_finding as explain_finding,
        kernel_table as kernel_table,
        step_table as step_table,
        timeline_window as timeline_window,
        tree_table as tree_table,
    )
    from trainscope.api.export import (
        export_perfetto as export_perfetto,
    )
    from trainscope.api.hooks import (
        on_trace_ready as on_trace_ready,
    )
    from trainscope.api.live import (
        LiveSample as LiveSample,
        Watch as Watch,
        live_analyzer as live_analyzer,
        open_recording as open_recording,
        watch as watch,
    )
    from trainscope.api.memory_report import (
        MemoryReport as MemoryReport,
        memory as memory,
        memory_peaks as memory_peaks,
    )
    from trainscope.api.planning import (
        PlanResult as PlanResult,
        normalize_plan as normalize_plan,
        plan as plan,
        plan_config as plan_config,
        plan_ledger as plan_ledger,
        resolve_device as resolve_device,
    )
    from trainscope.api.inputs import (
        InputDescription as InputDescription,
        describe_input as describe_input,
        is_run_ref as is_run_ref,
    )
    from trainscope.api.report import (
        RankView as RankView,
        Report as Report,
        with_ledger as with_ledger,
    )
    from trainscope.api.rules import (
        rules_from as rules_from,
    )
    from trainscope.api.store import (
        RunStore as RunStore,
        StoredRun as StoredRun,
        default_store_path as default_store_path,
        list_runs as list_runs,
        open_store as open_store,
        save_run as save_run,
    )
# isort: on
