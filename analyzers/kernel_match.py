"""Match the kernels of two runs by name, also across GPU architectures.

The same operation compiles to differently named kernels on different GPUs or library versions:
cuBLAS puts the architecture first (``volta_sgemm_128x32_nn`` vs ``ampere_sgemm_128x32_nn``),
CUTLASS and templated kernels carry tile sizes, stage counts, alignments and vector widths in
the name. Matching therefore goes in three passes, and every match says which pass made it:

1. ``exact``  — the same name.
2. ``arch``   — the same name once architecture tokens are removed (``volta_``, ``ampere_``,
   ``sm80``, ``cutlass_80_`` …): the same kernel configuration built for another GPU.
3. ``family`` — the same name once, in addition, every number is replaced by ``#`` (tile shapes,
   template parameters): the same kernel code with another configuration.

A pass matches groups (all still-unmatched names with one key on each side), so one kernel
before can correspond to three tile variants after. Whatever is left appeared or disappeared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MATCH_KINDS = ("exact", "arch", "family", "appeared", "disappeared")

# Architecture names NVIDIA libraries prefix kernels with, and numeric SM tags.
_ARCH_WORD = re.compile(
    r"(?<![A-Za-z0-9])(maxwell|pascal|volta|turing|ampere|ada|hopper|blackwell)_|"
    r"(?<![A-Za-z0-9])sm_?\d{2,3}[a-z]?_|(?<=cutlass_)\d{2,3}_",
    re.I,
)
_NUMBER = re.compile(r"\d+")


def arch_key(name: str) -> str:
    """The kernel name without GPU-architecture tokens."""
    return _ARCH_WORD.sub("", name)


def family_key(name: str) -> str:
    """The architecture-free name with every number replaced by ``#``."""
    return _NUMBER.sub("#", arch_key(name))


@dataclass(frozen=True)
class KernelTime:
    """One kernel name's total over the analyzed steps of one run."""

    name: str
    kernel_class: str
    count: int
    total_ns: int


@dataclass(frozen=True)
class KernelChange:
    """One matched group (or an appeared/disappeared kernel), per step so unequal step counts compare."""

    match: str  # one of MATCH_KINDS
    key: str  # the name, or the normalized key the group was matched on
    kernel_class: str
    before_names: tuple[str, ...]
    after_names: tuple[str, ...]
    before_count: int
    after_count: int
    before_ms_per_step: float
    after_ms_per_step: float

    @property
    def delta_ms_per_step(self) -> float:
        return self.after_ms_per_step - self.before_ms_per_step

    @property
    def change_pct(self) -> float | None:
        if not self.before_ms_per_step:
            return None
        return 100.0 * self.delta_ms_per_step / self.before_ms_per_step

    @property
    def label(self) -> str:
        """A display name: the kernel, or ``before → after`` when one name maps to another."""
        if self.match == "exact" or not self.after_names:
            return self.before_names[0] if self.before_names else self.key
        if not self.before_names:
            return self.after_names[0]
        if len(self.before_names) == 1 and len(self.after_names) == 1:
            return f"{self.before_names[0]} → {self.after_names[0]}"
        return f"{self.key} ({len(self.before_names)} → {len(self.after_names)} variants)"


def _change(
    match: str, key: str, before: list[KernelTime], after: list[KernelTime], steps_before: int, steps_after: int
) -> KernelChange:
    cls = (before or after)[0].kernel_class
    return KernelChange(
        match=match,
        key=key,
        kernel_class=cls,
        before_names=tuple(k.name for k in before),
        after_names=tuple(k.name for k in after),
        before_count=sum(k.count for k in before),
        after_count=sum(k.count for k in after),
        before_ms_per_step=sum(k.total_ns for k in before) / 1e6 / max(1, steps_before),
        after_ms_per_step=sum(k.total_ns for k in after) / 1e6 / max(1, steps_after),
    )


def match_kernels(
    before: list[KernelTime], after: list[KernelTime], steps_before: int, steps_after: int
) -> list[KernelChange]:
    """Every kernel of both runs in exactly one change, largest absolute change per step first."""
    b_left = {k.name: k for k in before}
    a_left = {k.name: k for k in after}
    out: list[KernelChange] = []
    for name in sorted(set(b_left) & set(a_left)):
        out.append(_change("exact", name, [b_left.pop(name)], [a_left.pop(name)], steps_before, steps_after))
    for kind, key_of in (("arch", arch_key), ("family", family_key)):
        b_groups: dict[str, list[KernelTime]] = {}
        a_groups: dict[str, list[KernelTime]] = {}
        for k in b_left.values():
            b_groups.setdefault(key_of(k.name), []).append(k)
        for k in a_left.values():
            a_groups.setdefault(key_of(k.name), []).append(k)
        for key in sorted(set(b_groups) & set(a_groups)):
            bs = sorted(b_groups[key], key=lambda k: -k.total_ns)
            as_ = sorted(a_groups[key], key=lambda k: -k.total_ns)
            out.append(_change(kind, key, bs, as_, steps_before, steps_after))
            for k in bs:
                del b_left[k.name]
            for k in as_:
                del a_left[k.name]
    out += [_change("disappeared", k.name, [k], [], steps_before, steps_after) for k in b_left.values()]
    out += [_change("appeared", k.name, [], [k], steps_before, steps_after) for k in a_left.values()]
    out.sort(key=lambda c: (-abs(c.delta_ms_per_step), c.key))
    return out
