"""Whether the last rank to arrive is a straggler or chance: one test, with its figures.

With ``n`` ranks arriving in random order, each is last at a collective with probability ``1/n``.
A rank is named the straggler only when the evidence is clear:

1. **significant**: last at ``k`` of the ``m`` collectives that have a last rank, with the
   one-sided binomial tail ``P(X ≥ k | m, 1/n)`` below ``straggler.alpha`` — or, for the few
   collectives a short capture holds (six collectives cannot reach 5 % by counts alone), its
   lateness against the others' median arrival positive beyond chance by Fisher's randomization
   (sign-flip) test on those per-collective differences: exact over all 2^m sign patterns up to
   m = 16, the normal approximation ``z = Σd / √Σd²`` above;
2. **beyond jitter**: its mean arrival after the other ranks' median arrival exceeds the
   collectives' own jitter — the robust spread (1.4826 × median absolute deviation) of that same
   per-collective lateness. A rank late by a steady amount passes; a coin flip with ±0.3 ms does not;
3. **warm**: the communicator's first collective, when it lasts — or keeps the ranks waiting for the
   last arrival — over ``straggler.cold_factor`` times the median of the others, is a cold start (NCCL and gloo connect the ranks lazily at the first
   collective) and is left out of both counts.

Otherwise "no clear straggler", with the same figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def binomial_tail(k: int, m: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(m, p), summed exactly."""
    if k <= 0:
        return 1.0
    if k > m:
        return 0.0
    return float(min(1.0, sum(math.comb(m, i) * p**i * (1 - p) ** (m - i) for i in range(k, m + 1))))


def sign_flip_p(d: np.ndarray) -> float:
    """One-sided p-value that the mean of ``d`` is positive by chance, under the null that each
    difference is as likely negative as positive (Fisher's randomization test)."""
    d = np.asarray(d, float)
    m = len(d)
    if m == 0 or not np.any(d):
        return 1.0
    obs = float(d.sum())
    if m <= 16:
        signs = ((np.arange(2**m)[:, None] >> np.arange(m)) & 1) * 2 - 1
        return float(np.mean(signs @ np.abs(d) >= obs - 1e-12 * abs(obs)))
    z = obs / math.sqrt(float((d * d).sum()))
    return 0.5 * math.erfc(z / math.sqrt(2))


@dataclass(frozen=True)
class StragglerTest:
    rank_index: int | None  # the rank last most often (position among the ranks), None without collectives
    last_in: int  # collectives (warm, with a last rank) it arrived at last
    considered: int  # collectives with a last rank, cold start excluded
    ranks: int
    p_value: float  # binomial tail against chance 1/ranks
    mean_late_ms: float  # its mean arrival after the other ranks' median arrival
    jitter_ms: float  # robust spread of that lateness across collectives
    cold_excluded: int  # cold-start collectives left out
    cold_ms: float  # the longest of them, ms
    alpha: float
    significant: bool
    beyond_jitter: bool
    cold_mask: tuple[bool, ...] = ()  # per collective: left out as a cold start
    max_spread_ms: float = 0.0  # the longest wait for the last rank at one warm collective
    p_lateness: float = 1.0  # sign-flip test of its lateness against the others' median arrival
    cold_why: str = ""  # the evidence a cold start was left out on, as every view states it
    # per collective: the one rank (index) that arrived last, where a collective decides one (warm, a
    # spread, two ranks, no tie); -1 elsewhere. What every view counts as "last at".
    last_of: tuple[int, ...] = ()

    @property
    def clear(self) -> bool:
        return self.rank_index is not None and self.significant and self.beyond_jitter

    def figures(self, rank_label: str) -> str:
        cold = (
            f"; {self.cold_why or f'{self.cold_excluded} cold-start collective' + 's' * (self.cold_excluded != 1)}"
            if self.cold_excluded
            else ""
        )
        chance = 1 / self.ranks if self.ranks else 0.0
        return (
            f"{rank_label} is last at {self.last_in} of {self.considered} collectives (chance {chance:.2f} each: "
            f"binomial p = {self.p_value:.3g}), {self.mean_late_ms:.2f} ms after the others' median arrival "
            f"(sign-flip p = {self.p_lateness:.3g}) against a jitter of {self.jitter_ms:.2f} ms; "
            f"{'significant' if self.significant else 'not significant'} at {self.alpha:g}{cold}"
        )


def straggler_test(
    arrival: np.ndarray,
    end: np.ndarray,
    alpha: float = 0.05,
    cold_factor: float = 10.0,
    first_use: np.ndarray | None = None,
    tie_ns: float = 1000.0,
    cold: np.ndarray | None = None,
    cold_why: str = "",
) -> StragglerTest:
    """The test over an aligned ``arrival`` matrix (ranks × collectives, ns on a common clock, NaN
    where a rank did not take part) and the collectives' ``end`` instants (same shape).
    ``first_use``: per collective, whether it is the first with its name on some rank (the cold-start
    candidates); None: the earliest collective only. Ranks arriving within ``tie_ns`` of the last
    arrival are last together: such a collective has no single last rank and is not counted.
    ``cold``: the cold starts already decided by the caller (per collective, left out), with
    ``cold_why`` the evidence it states; None: decided here by :func:`cold_outliers`."""
    n, m = arrival.shape if arrival.ndim == 2 else (0, 0)
    empty = StragglerTest(None, 0, 0, n, 1.0, 0.0, 0.0, 0, 0.0, alpha, False, False)
    if n < 2 or m == 0:
        return empty
    has = ~np.isnan(arrival)
    first = np.nanmin(arrival, axis=0)
    last = np.nanmax(arrival, axis=0)
    dur = np.nanmax(end, axis=0) - first  # first arrival to completion
    spread = last - first
    if cold is not None and len(cold) == m:
        keep = ~np.asarray(cold, bool)
    else:
        cand = np.zeros(m, bool)
        if first_use is not None and len(first_use) == m:
            cand[:] = first_use
        else:
            cand[int(np.argsort(first, kind="stable")[0])] = True
        keep = ~cold_outliers(dur, spread, cand, cold_factor)
    n_cold = int((~keep).sum())
    cold_ms = float(dur[~keep].max()) / 1e6 if n_cold else 0.0
    tied = (np.where(has, arrival, -np.inf) >= (last - tie_ns)[None, :]).sum(axis=0) > 1  # several ranks last together
    decided = keep & (spread > 0) & (has.sum(axis=0) >= 2) & ~tied
    mask = tuple(bool(x) for x in ~keep)
    if not decided.any():
        return StragglerTest(
            None,
            0,
            0,
            n,
            1.0,
            0.0,
            0.0,
            n_cold,
            cold_ms,
            alpha,
            False,
            False,
            mask,
            cold_why=cold_why,
            last_of=(-1,) * m,
        )
    late = np.where(has, arrival - first, -1.0)
    last_rank = late.argmax(axis=0)
    counts = np.bincount(last_rank[decided], minlength=n)
    lead = int(np.argmax(counts))
    k, considered = int(counts[lead]), int(decided.sum())
    p = binomial_tail(k, considered, 1.0 / n)
    # lateness of the lead against the other ranks' median arrival, per warm collective it took part in
    cols = keep & has[lead] & (has.sum(axis=0) >= 2)
    others = np.delete(arrival, lead, axis=0)[:, cols]
    d = (arrival[lead, cols] - np.nanmedian(others, axis=0)) / 1e6
    mean = float(np.mean(d)) if len(d) else 0.0
    jitter = float(1.4826 * np.median(np.abs(d - np.median(d)))) if len(d) else 0.0
    p_late = sign_flip_p(d)
    return StragglerTest(
        lead,
        k,
        considered,
        n,
        p,
        mean,
        jitter,
        n_cold,
        cold_ms,
        alpha,
        p < alpha or p_late < alpha,
        mean > 0 and mean > jitter,
        mask,
        float(spread[decided].max()) / 1e6,
        p_late,
        cold_why,
        tuple(int(r) if d else -1 for r, d in zip(last_rank, decided)),
    )


def cold_outliers(dur: np.ndarray, spread: np.ndarray, cand: np.ndarray, cold_factor: float) -> np.ndarray:
    """Per collective: a cold-start candidate (``cand``) whose length from first arrival to completion
    (``dur``), or whose wait for the last arrival (``spread``), exceeds ``cold_factor`` times the median
    of the other collectives' — the robust reference (a median) of the warm ones. Needs three
    collectives and one that is not a candidate; else nothing is an outlier."""
    m = len(dur)
    out = np.zeros(m, bool)
    if m < 3 or not (~cand).any():
        return out
    for what in (dur, spread):  # its length, or the wait for the last rank inside it
        ref = float(np.median(what[~cand]))
        out |= cand & (what > 0) & (what > cold_factor * ref)
    return out
