"""Profile a few training steps from inside PyTorch Lightning or Hugging Face ``Trainer`` and print
trainscope's verdict — no change to the training loop.

    from trainscope.integrations import lightning_callback, hf_trainer_callback
    trainer = lightning.Trainer(callbacks=[lightning_callback("traces/")])
    trainer = transformers.Trainer(..., callbacks=[hf_trainer_callback("traces/")])

Both skip ``wait`` steps (start-up: compilation, cuDNN autotuning, the first batches), warm the
profiler up for ``warmup`` steps, record ``active`` steps with ``torch.profiler``, write the trace into
the directory as ``tensorboard_trace_handler`` does (``trainscope analyze DIR`` and TensorBoard read
it) and print the verdict line. The libraries are optional: each factory imports its own, and says
so in one line when it is missing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

from trainscope import api

if TYPE_CHECKING:
    from trainscope.api.cache import CachedReport
    from trainscope.api.report import Report

__all__ = ["StepProfiler", "lightning_callback", "hf_trainer_callback"]


class StepProfiler:
    """``torch.profiler`` over steps ``wait`` … ``wait + warmup + active``, driven by ``step()``;
    the trace goes through :func:`trainscope.api.on_trace_ready`."""

    def __init__(
        self,
        dir_name: str | os.PathLike[str] = "traces",
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        print_verdict: bool = True,
        printer: Callable[[str], None] | None = None,
        record_shapes: bool = False,
        with_stack: bool = False,
    ) -> None:
        self.dir_name = os.fspath(dir_name)
        self.wait, self.warmup, self.active = wait, warmup, active
        self.handler = api.on_trace_ready(self.dir_name, print_verdict=print_verdict, printer=printer)
        self.record_shapes, self.with_stack = record_shapes, with_stack
        self._prof: Any = None
        self._steps = 0

    @property
    def reports(self) -> list[Report | CachedReport]:
        """The :class:`trainscope.api.Report` of each recorded cycle (one, unless restarted)."""
        return self.handler.reports

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile
        from torch.profiler import schedule

        if self._prof is not None:
            return
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self._prof = profile(
            activities=activities,
            record_shapes=self.record_shapes,
            with_stack=self.with_stack,
            schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
            on_trace_ready=self.handler,
        )
        self._prof.__enter__()
        self._steps = 0

    def step(self) -> None:
        if self._prof is None:
            return
        self._prof.step()
        self._steps += 1
        if self._steps >= self.wait + self.warmup + self.active:
            self.stop()

    def stop(self) -> None:
        if self._prof is not None:
            prof, self._prof = self._prof, None
            prof.__exit__(None, None, None)


def lightning_callback(dir_name: str | os.PathLike[str] = "traces", **kwargs: Any) -> Any:
    """A ``lightning.pytorch.Callback`` (or ``pytorch_lightning``'s) that profiles a few training
    steps and prints the verdict; ``kwargs`` as :class:`StepProfiler`. ``.profiler.reports`` keeps
    the reports."""
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            # the package's former name: its own Callback class, which mypy cannot unify with lightning's
            from pytorch_lightning import Callback  # type: ignore[assignment]
        except ImportError:
            raise api.BadInput("lightning_callback needs PyTorch Lightning: pip install lightning") from None

    class TrainscopeLightningCallback(Callback):
        def __init__(self) -> None:
            super().__init__()
            self.profiler = StepProfiler(dir_name, **kwargs)

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            if getattr(trainer, "is_global_zero", True):
                self.profiler.start()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.profiler.step()

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self.profiler.stop()

    return TrainscopeLightningCallback()


def hf_trainer_callback(dir_name: str | os.PathLike[str] = "traces", **kwargs: Any) -> Any:
    """A ``transformers.TrainerCallback`` that profiles a few optimizer steps and prints the verdict;
    ``kwargs`` as :class:`StepProfiler`. ``.profiler.reports`` keeps the reports."""
    try:
        from transformers import TrainerCallback
    except ImportError:
        raise api.BadInput("hf_trainer_callback needs Hugging Face transformers: pip install transformers") from None

    class TrainscopeTrainerCallback(TrainerCallback):
        def __init__(self) -> None:
            self.profiler = StepProfiler(dir_name, **kwargs)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if getattr(state, "is_world_process_zero", True):
                self.profiler.start()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.profiler.step()

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.profiler.stop()

    return TrainscopeTrainerCallback()
