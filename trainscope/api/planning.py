"""``plan``: will a model and training setup fit a GPU, and the cheapest changes that make it fit."""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from trainscope.analyzers.plan.gpu_memory import GpuMemory
from trainscope.analyzers.plan.ledger import Fit
from trainscope.analyzers.plan.ledger import FitOption
from trainscope.analyzers.plan.ledger import Ledger
from trainscope.analyzers.plan.ledger import PlanConfig
from trainscope.analyzers.plan.ledger import fit
from trainscope.analyzers.plan.ledger import fit_options
from trainscope.analyzers.plan.ledger import ledger
from trainscope.analyzers.plan.ledger import normalize
from trainscope.analyzers.rules import Rules
from trainscope.api.errors import BadInput
from trainscope.api.errors import bad_input
from trainscope.api.rendered import Rendered
from trainscope.api.report import shown
from trainscope.modelspec import MODEL_FIELDS
from trainscope.modelspec import config_from
from trainscope.modelspec import parse_model_spec
from trainscope.modelspec import resolve_gpu
from trainscope.reports.oneline import plan_line
from trainscope.reports.plan import build_plan_document
from trainscope.reports.plan import render_plan_markdown
from trainscope.reports.plan import render_plan_text


@dataclass(repr=False)
class PlanResult(Rendered):
    """The training-memory ledger of a model and setup against a device, with the cheapest changes
    that make it fit (``options``)."""

    KIND = "plan"  # its kind in the output format table (reports/formats.py)

    ledger: Ledger
    device: GpuMemory
    fit: Fit
    options: list[FitOption] = field(default_factory=list)
    threshold_pct: float = 90.0
    config: PlanConfig | None = None  # as given

    @property
    def fits(self) -> bool:
        return bool(self.fit.fits)

    def to_dict(self) -> dict[str, Any]:
        return build_plan_document(self.ledger, self.device, self.fit, self.options)

    def to_text(self) -> str:
        return render_plan_text(shown(self.to_dict()))

    def to_markdown(self) -> str:
        return render_plan_markdown(shown(self.to_dict()))

    def __repr__(self) -> str:
        """One line: fits or not, memory used of the device's, how many options."""

        return plan_line(self.fit, self.options)


def plan_config(model: str | Mapping[str, Any] | Any = None, **fields: Any) -> PlanConfig:
    """A ``PlanConfig`` from a spec string (``"params=1.5B,optimizer=adam"``), a mapping or keyword
    fields (``params=1.5e9, optimizer="adam"``). Raises :class:`BadInput`."""

    with bad_input(what="plan"):
        if isinstance(model, PlanConfig) and not fields:
            return model
        if isinstance(model, str):
            if fields:
                raise ValueError("give a spec string or keyword fields, not both")
            return parse_model_spec(model)
        values = dict(model or {}, **fields)
        no_dropout = bool(values.pop("no_dropout", False))
        try:
            return config_from(values, no_dropout)
        except TypeError as e:
            raise ValueError(str(e)) from None


@contextmanager
def _checked() -> Iterator[None]:
    """The plan's own checks (a ``ValueError`` with the user-facing message) as :class:`BadInput`, the
    message unchanged."""

    try:
        yield
    except BadInput:
        raise
    except ValueError as e:
        raise BadInput(str(e)) from None


def normalize_plan(config: PlanConfig) -> PlanConfig:
    """A ``PlanConfig`` with canonical keys; :class:`BadInput` (a ``ValueError``) with the user-facing
    message for anything inconsistent (an unknown optimizer, a checkpoint interval the model cannot take)."""

    with _checked():
        return normalize(config)


def plan_ledger(config: PlanConfig) -> Ledger:
    """The memory ledger (``analyzers.plan.ledger.Ledger``) of one ``PlanConfig``: what ``plan`` computes
    before fitting it to a device. Raises :class:`BadInput` (a ``ValueError``) as :func:`normalize_plan`."""

    with _checked():
        return ledger(config)


def resolve_device(gpu: str | None = None, gpu_memory: str | None = None) -> GpuMemory:
    """A device by key (``h100-80``; see ``trainscope plan --help``) or by size (``24GiB``)."""

    with bad_input(what="plan"):
        return resolve_gpu(gpu, gpu_memory)


def plan(
    model: str | Mapping[str, Any] | Any = None,
    *,
    gpu: str | None = "h100-80",
    gpu_memory: str | None = None,
    device: Any = None,
    options: int = 6,
    threshold_pct: float | None = None,
    **fields: Any,
) -> PlanResult:
    """Will this training setup fit the GPU? ``plan(params="1.5B", optimizer="adam", precision="fp32",
    gpu="v100-32")`` or ``plan("params=1.5B,optimizer=adam")``. ``device`` (a ``GpuMemory``) instead
    of ``gpu``/``gpu_memory``; ``threshold_pct``: the share of device memory that counts as full
    (default: the ``memory.capacity`` threshold). Raises :class:`BadInput`."""

    types = {dest: typ for _, dest, typ, _ in MODEL_FIELDS}
    with bad_input(what="plan"):
        conv: dict[str, Any] = {}
        for k, v in fields.items():  # "1.5B" and friends, as the flags take them
            conv[k] = types[k](v) if isinstance(v, str) and k in types and types[k] is not str else v
    cfg = plan_config(model, **conv)
    dev: GpuMemory = device if device is not None else resolve_device(gpu, gpu_memory)
    with bad_input(what="plan"):
        lg = ledger(cfg)
    threshold = Rules().value("memory.capacity") if threshold_pct is None else threshold_pct
    f = fit(lg, dev.name, dev.capacity_bytes, threshold)
    opts = fit_options(lg.config, dev.name, dev.capacity_bytes, threshold, limit=max(0, options)) if options else []
    return PlanResult(lg, dev, f, opts, threshold, cfg)
