"""Where users already are: a ``torch.profiler`` ``on_trace_ready`` handler that writes the trace as
TensorBoard's handler does and prints trainscope's verdict line."""

from __future__ import annotations

import os
from collections.abc import Callable
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol
from typing import cast

from trainscope.api.analysis import analyze
from trainscope.api.errors import describe
from trainscope.api.store import check_tag
from trainscope.api.store import save_run

if TYPE_CHECKING:
    from trainscope.api.cache import CachedReport
    from trainscope.api.report import Report
    from trainscope.api.store import StoredRun


class TraceReadyHandler(Protocol):
    """What :func:`on_trace_ready` returns: the handler ``torch.profiler`` calls with itself after
    each cycle, keeping what it wrote, analyzed and saved."""

    paths: list[str]  # each cycle's trace file
    reports: list[Report | CachedReport]  # each analyzed cycle's report
    runs: list[StoredRun]  # each saved cycle's run (with ``save``)

    def __call__(self, prof: Any) -> None: ...


def on_trace_ready(
    dir_name: str | os.PathLike[str],
    *,
    print_verdict: bool = True,
    worker_name: str | None = None,
    use_gzip: bool = False,
    analyze_kwargs: Mapping[str, Any] | None = None,
    printer: Callable[[str], None] | None = None,
    callback: Callable[[Report | CachedReport], None] | None = None,
    save: bool = False,
    store: str | os.PathLike[str] | None = None,
    tag: str | None = None,
) -> TraceReadyHandler:
    """A ``torch.profiler.profile(on_trace_ready=…)`` handler: writes each cycle's trace into
    ``dir_name`` exactly as ``torch.profiler.tensorboard_trace_handler`` does (TensorBoard and
    ``trainscope analyze DIR`` both read it), then analyzes it and prints the verdict line.
    ``callback(report)`` gets each cycle's :class:`Report`; the handler's ``.reports`` keeps them.
    The analysis runs on one core (``jobs=1``; ``analyze_kwargs`` may say otherwise): no core is
    taken from the training job.
    With ``save`` each cycle's summary goes to the run history (``store``, default the user's; ``tag``
    names the model or job; the git commit is the job's working directory's): ``.runs`` keeps them.
    Analysis and store errors never stop training: they print one line instead."""
    import sys

    from torch.profiler import tensorboard_trace_handler

    dir_name = os.fspath(dir_name)
    write = tensorboard_trace_handler(dir_name, worker_name=worker_name, use_gzip=use_gzip)
    out = printer or (lambda line: print(line, file=sys.stderr, flush=True))

    paths: list[str] = []
    reports: list[Report | CachedReport] = []
    runs: list[StoredRun] = []

    def handler(prof: Any) -> None:  # a torch.profiler.profile
        before = set(os.listdir(dir_name)) if os.path.isdir(dir_name) else set()
        write(prof)
        new = sorted(
            (f for f in os.listdir(dir_name) if f not in before and ".pt.trace.json" in f),
            key=lambda f: os.path.getmtime(os.path.join(dir_name, f)),
        )
        if not new:
            return
        path = os.path.join(dir_name, new[-1])
        paths.append(path)
        try:
            # jobs=1 unless asked: inside the training process, the analysis takes no core from the job
            report = analyze(path, **{"jobs": 1, **dict(analyze_kwargs or {})})
        except Exception as e:  # noqa: BLE001 (the training loop must go on)
            message, _ = describe(e)
            out(f"trainscope: {message}")
            return
        reports.append(report)
        if print_verdict:
            out(report.verdict_line())
        if save:
            try:
                runs.append(save_run(report, store, tag=tag, saved_by="hook"))
            except Exception as e:  # noqa: BLE001 (a full disk or a locked store must not stop training)
                message, _ = describe(e)
                out(f"trainscope: not saved: {message}")
        if callback is not None:
            callback(report)

    handled = cast(TraceReadyHandler, handler)  # a function that carries its lists
    handled.reports, handled.paths, handled.runs = reports, paths, runs
    if save:
        check_tag(tag)  # a bad tag is said at once, not at the first cycle
    return handled
