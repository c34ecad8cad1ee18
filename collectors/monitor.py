"""The background sampling loop: every interval, one :class:`Snapshot` from the GPU sampler, the
host sampler and the step receiver, handed to a callback. The loop never touches a UI; whoever
consumes snapshots (headless printer, dashboard, recorder) gets immutable objects.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from trainscope.collectors.host import HostSampler
from trainscope.collectors.nvml import NvmlSampler
from trainscope.collectors.samples import PART_FIELDS
from trainscope.collectors.samples import GpuSample
from trainscope.collectors.samples import RankSample
from trainscope.collectors.samples import Snapshot
from trainscope.collectors.step_receiver import StepReceiver

MIN_INTERVAL_S = 0.25  # faster sampling costs the job CPU and NVML's own counters update slower


class Monitor:
    def __init__(
        self,
        interval: float,
        on_snapshot: Callable[[Snapshot], None],
        *,
        gpu: NvmlSampler | None = None,
        host: HostSampler | None = None,
        steps: StepReceiver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = max(MIN_INTERVAL_S, float(interval))
        self._on = on_snapshot
        self.gpu, self.host, self.steps = gpu, host, steps
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t0 = clock()
        self._last = self.t0
        self.cost_s: list[float] = []  # CPU seconds the sampler thread spent per sample
        self._rank_seen: dict[int, str | None] = {}  # every stepping process so far -> its RANK

    def start(self) -> None:
        if self.gpu is not None:
            self.gpu.start()
        if self.host is not None:
            self.host.start()
        self.t0 = self._last = self._clock()
        self._thread = threading.Thread(target=self._run, name="trainscope-sampler", daemon=True)
        self._thread.start()

    def stop(self, final_sample: bool = True) -> None:
        """Stop the loop; with ``final_sample``, take one last sample of the partial interval."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if final_sample and self._clock() - self._last > 0.05:
            self._emit()
        if self.gpu is not None:
            self.gpu.close()

    def _run(self) -> None:
        k = 1
        while not self._stop.wait(max(0.0, self.t0 + k * self.interval - self._clock())):
            self._emit()
            # Drift-free schedule; after a stall, skip the missed ticks instead of bursting.
            k = max(k + 1, int((self._clock() - self.t0) / self.interval) + 1)

    def sample(self) -> Snapshot:
        """Take one sample now (the loop calls this; tests and replays may too)."""
        c0 = time.thread_time()
        now = self._clock()
        notes: list[str] = []
        gpus: tuple[GpuSample, ...] = ()
        if self.gpu is not None:
            gpus = self.gpu.sample() if self.gpu.available else ()
            notes += self.gpu.drain_notes()
        host = None
        if self.host is not None:
            host = self.host.sample()
            notes += self.host.drain_notes()
        step, mode = None, "off"
        ranks: tuple[RankSample, ...] = ()
        if self.steps is not None:
            step = self.steps.drain()
            st = self.steps.status()
            mode = st.mode if st.mode != "off" else f"off: {st.detail}"
            ranks = self._ranks(self.steps, gpus)
        snap = Snapshot(
            t=round(now - self.t0, 6),
            dt=round(now - self._last, 6),
            wall=time.time(),
            gpus=gpus,
            host=host,
            step=step,
            step_mode=mode,
            notes=tuple(notes),
            ranks=ranks,
        )
        self._last = now
        self.cost_s.append(time.thread_time() - c0)
        return snap

    def _ranks(self, steps: StepReceiver, gpus: tuple[GpuSample, ...]) -> tuple[RankSample, ...]:
        """Per rank (or stepping process) of a job with several: its steps this interval, its RSS,
        and its GPU (the device NVML lists it on). Empty for a single-process job."""
        drain = getattr(steps, "drain_per_process_parts", None)
        per = drain() if drain is not None else steps.drain_per_process()
        known = steps.rank_pids()
        self._rank_seen.update(known)
        self._rank_seen.update((p, self._rank_seen.get(p)) for p in per)
        if len(self._rank_seen) < 2 and not known:
            return ()
        out = []
        for pid, rank in self._rank_seen.items():
            n, w, s, m, *rest = per.get(pid, (0, 0, 0, 0))
            parts = rest[0] if rest and rest[0] is not None and n else (None,) * len(PART_FIELDS)
            gpu = mem = util = None
            for g in gpus:
                for p in g.processes or ():
                    if p.pid == pid:
                        gpu, mem, util = g.index, p.used_bytes, g.util_gpu
            rss = (self.host.rss(pid) or None) if self.host is not None else None  # 0: an exited (zombie) rank
            if rss is None and not n and pid not in known:
                continue  # gone
            out.append(
                RankSample(rank if rank is not None else f"pid {pid}", pid, n, w, s, m, rss, gpu, mem, util, *parts)
            )
        out.sort(key=lambda r: (0, int(r.rank), r.pid) if r.rank.isdigit() else (1, 0, r.pid))
        return tuple(out)

    def _emit(self) -> None:
        try:
            snap = self.sample()
        except Exception as e:  # a sampler bug must not kill the watch: report it as a note
            now = self._clock()
            snap = Snapshot(
                t=now - self.t0,
                dt=now - self._last,
                wall=time.time(),
                notes=(f"sampling failed: {type(e).__name__}: {e}",),
            )
            self._last = now
        self._on(snap)
