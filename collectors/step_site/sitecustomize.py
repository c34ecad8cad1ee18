"""Injected by ``trainscope watch -- COMMAND`` through PYTHONPATH: installs the step-timing hook,
then runs the ``sitecustomize`` this one shadows (the next one on sys.path), as Python would have.

Standard library only, and nothing here may stop the job: every failure is swallowed (the
watcher notices that no hook reported in and says step mode is off).

The hook goes in only while the watcher that launched the job is alive and its folder is this
user's and private (``trainscope_step_hook.watcher_listening``): a process started after the
watcher was killed (``kill -9`` leaves this folder behind until the next watch cleans it) runs
exactly as it would without trainscope — this folder is taken off ``sys.path`` and nothing is
installed.
"""


def _trainscope_bootstrap() -> None:
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        # copied beside this file by the watcher at run time: no module mypy can find
        import trainscope_step_hook  # type: ignore[import-not-found]

        if trainscope_step_hook.watcher_listening():
            trainscope_step_hook.install()
        else:  # no live watcher: leave no trace in the job
            sys.modules.pop("trainscope_step_hook", None)
            sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    except Exception:
        pass
    # Chain: find and execute the next sitecustomize on sys.path, skipping this directory.
    try:
        import importlib.machinery
        import importlib.util

        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = module
            spec.loader.exec_module(module)
    except Exception as e:  # what site.py itself does with a failing sitecustomize
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}\n")


_trainscope_bootstrap()
del _trainscope_bootstrap
