"""Machine axis, communication: collectives that run with no compute beside them."""

from __future__ import annotations

from trainscope.analyzers.findings.base import DiffMeasure
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import FindingSpec
from trainscope.analyzers.findings.base import FixText
from trainscope.analyzers.findings.base import by_stake
from trainscope.analyzers.findings.base import ms_per_step
from trainscope.analyzers.findings.base import verdict_class
from trainscope.analyzers.findings.catalog import catalog_fix
from trainscope.analyzers.findings.catalog import catalog_words
from trainscope.analyzers.findings.common import ctx
from trainscope.analyzers.findings.common import graded_ev
from trainscope.analyzers.findings.common import raised_stake
from trainscope.analyzers.findings.common import sink_line
from trainscope.analyzers.findings.observations import DiagnosisInput
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.context import Context

_SEV = by_stake("comm.moderate", "comm.high")


def _unoverlapped(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    stake = raised_stake(obs, rules, "comm", _SEV)
    if stake is None:
        return None
    lines = [
        graded_ev(rules, _SEV, "communication with no compute running", stake),
        ctx("communication kernels, share of kernel time", obs.kernels.class_share_pct("communication"), "%"),
        sink_line(obs, "comm"),
    ]
    kinds = getattr(obs.context, "collectives", None)
    if kinds:
        lines.append(
            ctx(
                "collectives: " + ", ".join(f"{k} {v:.1f} ms" for k, v in kinds.items()),
                None,
                "",
                "trace: communication kernel names",
            )
        )
    return UNOVERLAPPED.finding(
        stake,
        lines,
        UNOVERLAPPED.detail_for(obs.context, "collectives run while no compute kernel does"),
        rules,
        title=UNOVERLAPPED.title_for(obs.context),
    )


# --- wording: the fix in the run's words (its Context) ----------------------------------------


def _comm_words(c: Context, single: bool, bf16: bool) -> FixText:
    kind = c.main_collective
    if kind == "all-to-all":
        return FixText(
            "overlap-communication",
            "Balance and overlap the all-to-all exchange",
            "# balance the shards: every rank sends and receives about the same bytes\n"
            "#   (embedding tables / experts placed by measured size and lookup rate, not by count)\n"
            "# overlap the exchange: split the batch and run the all-to-all of chunk i+1 while chunk i computes\n"
            "#   (an async dist.all_to_all_single(..., async_op=True) on its own stream, wait() just before use)",
        )
    if c.native:
        return FixText(
            "overlap-communication",
            "Overlap communication with compute",
            "// post the exchange early on its own stream, compute what does not depend on it, then wait:\n"
            "ncclGroupStart(); ncclAllReduce(..., comm_stream); ncclGroupEnd();  // or MPI_Iallreduce\n"
            "cudaEventRecord(comm_done, comm_stream); cudaStreamWaitEvent(compute_stream, comm_done);",
        )
    if c.training and kind in (None, "all-reduce"):
        return catalog_words("overlap-communication", native=False)
    if c.training and kind in ("all-gather", "reduce-scatter"):
        return FixText(
            "overlap-communication",
            "Prefetch sharded parameters and overlap their gathers",
            "model = FSDP(model, forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,\n"
            "             limit_all_gathers=True)",
        )
    return FixText(
        "overlap-communication",
        "Overlap communication with compute",
        "work = dist.all_reduce(t, async_op=True)  # start the collective early\n"
        "# ... compute that does not need t ...\nwork.wait()                               # wait just before use",
    )


def _title_words(c: Context, default: str) -> str:
    if c.main_collective == "all-to-all":
        return "All-to-all exchange not overlapped with compute"
    return default


def _detail_words(c: Context, default: str) -> str:
    if c.main_collective == "all-to-all":
        return "the all-to-all exchange (embedding or expert shards) runs while no compute kernel does"
    return default


UNOVERLAPPED = FindingSpec(
    id="comm/unoverlapped",
    axis="machine",
    title="Communication not overlapped with compute",
    measure=_unoverlapped,
    can_be_primary=True,
    severity=_SEV,
    fix=catalog_fix("overlap-communication", projection="busy", text=_comm_words),
    whatif_pool="comm",
    diff_measure=DiffMeasure("communication with no compute running", "ms per step", ms_per_step("communication")),
    **verdict_class("comm"),
    breakdown=("communication",),
    describes="communication kernels running with no compute kernel beside them",
    title_words=_title_words,
    detail_words=_detail_words,
)

SPECS = (UNOVERLAPPED,)
