"""Host sampler (psutil): CPU per core and I/O wait, memory, disk read rate, and the job's process
tree split into the main (training) process, DataLoader workers and everything else.

DataLoader workers are child processes of the training process running the same interpreter
(``fork`` copies its name; ``spawn``/``forkserver`` start the same Python). psutil's CPU
percentages are since the previous call, so the sampler keeps one ``Process`` object per pid
across samples; a process's first sample reads 0 %.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from collections.abc import Iterable

import psutil

from trainscope.collectors.samples import HostSample
from trainscope.collectors.samples import ProcessGroup


def _is_python(p: psutil.Process) -> bool:
    try:
        name = p.name().lower()
        if name.startswith(("python", "pt_", "torchrun")):
            return True
        cmd = p.cmdline()
        return bool(cmd) and os.path.basename(cmd[0]).lower().startswith("python")
    except (psutil.Error, OSError):
        return False


class HostSampler:
    """``roots`` gives the pids whose trees form the job (a callable is asked on every sample, so
    bare ``watch`` can follow whichever processes use the GPUs); empty means host metrics only."""

    def __init__(
        self,
        roots: Callable[[], Iterable[int]] | Iterable[int] = (),
        rank_pids: Callable[[], Iterable[int]] | None = None,
    ) -> None:
        if callable(roots):
            self._roots: Callable[[], Iterable[int]] = roots
        else:
            fixed = tuple(roots)
            self._roots = lambda: fixed
        self._rank_pids = rank_pids  # processes that said they are ranks (RANK set: torchrun and the like)
        self._env_rank: dict[int, bool] = {}  # pid -> its environment names a rank (read once per process)
        self._procs: dict[int, psutil.Process] = {}
        self._disk_prev: tuple[int, float] | None = None
        self._notes: list[str] = []
        self._reported: set[str] = set()

    def start(self) -> None:
        """Prime the since-last-call counters so the first real sample covers one interval."""
        psutil.cpu_percent(percpu=True)
        psutil.cpu_times_percent()
        self._disk()
        self._groups()

    def drain_notes(self) -> list[str]:
        out, self._notes = self._notes, []
        return out

    def sample(self) -> HostSample:
        per_core = tuple(float(x) for x in psutil.cpu_percent(percpu=True))
        times = psutil.cpu_times_percent()
        vm = psutil.virtual_memory()
        return HostSample(
            cpu_pct=sum(per_core) / len(per_core) if per_core else None,
            per_core=per_core,
            iowait_pct=getattr(times, "iowait", None),  # Linux only
            mem_used=int(vm.total - vm.available),
            mem_total=int(vm.total),
            disk_read_bps=self._disk(),
            groups=self._groups(),
        )

    def _disk(self) -> float | None:
        try:
            io = psutil.disk_io_counters()
        except Exception:
            io = None
        if io is None:
            return None
        now = time.monotonic()
        prev, self._disk_prev = self._disk_prev, (int(io.read_bytes), now)
        if prev is None or now <= prev[1] or io.read_bytes < prev[0]:
            return None
        return float((io.read_bytes - prev[0]) / (now - prev[1]))

    def _process(self, pid: int) -> psutil.Process | None:
        p = self._procs.get(pid)
        if p is not None and not p.is_running():  # exited (or the pid was reused)
            del self._procs[pid]
            p = None
        if p is None:
            try:
                p = psutil.Process(pid)
            except psutil.Error:
                return None
            self._procs[pid] = p
        return p

    def rss(self, pid: int) -> int | None:
        """Resident memory of one process of the job (None when it cannot be read)."""
        p = self._process(pid)
        try:
            return int(p.memory_info().rss) if p is not None else None
        except psutil.Error:
            return None

    def tree(self) -> tuple[list[psutil.Process], list[psutil.Process], list[psutil.Process]]:
        """(training processes, DataLoader workers, other processes) of the job right now. The
        training processes are the ranks when the job's hooks said which processes are ranks (a
        launcher's children are then ranks, not DataLoader workers), else the first Python process."""
        members: list[psutil.Process] = []
        seen: set[int] = set()
        for root in self._roots():
            p = self._process(root)
            if p is None or root in seen:
                continue
            try:
                kids = p.children(recursive=True)
            except psutil.Error:
                kids = []
            for q in [p, *kids]:
                if q.pid not in seen:
                    seen.add(q.pid)
                    members.append(self._procs.setdefault(q.pid, q))
        for pid in list(self._procs):  # forget processes that left the tree
            if pid not in seen:
                del self._procs[pid]
                self._env_rank.pop(pid, None)
        env_ranks = {m.pid for m in members if self._env_says_rank(m)}
        ranks = set()
        for m in members:  # a DataLoader worker inherits its rank's environment: its parent is that rank
            try:
                if m.pid in env_ranks and m.ppid() not in env_ranks:
                    ranks.add(m.pid)
            except psutil.Error:
                pass
        if self._rank_pids is not None:
            try:
                ranks |= set(self._rank_pids()) & seen
            except Exception:
                pass
        if ranks:
            mains = [m for m in members if m.pid in ranks]
        else:
            first = next((m for m in members if _is_python(m)), members[0] if members else None)
            mains = [first] if first is not None else []
        main_pids = {m.pid for m in mains}
        workers: list[psutil.Process] = []
        other: list[psutil.Process] = []
        for m in members:
            if m.pid in main_pids:
                continue
            try:
                is_worker = m.ppid() in main_pids and _is_python(m)
            except psutil.Error:
                continue
            (workers if is_worker else other).append(m)
        return mains, workers, other

    def _env_says_rank(self, p: psutil.Process) -> bool:
        """RANK and WORLD_SIZE in the process's environment (what torchrun and its kind set for each
        rank): known from the first sample, before any hook reports in."""
        known = self._env_rank.get(p.pid)
        if known is None:
            try:
                env = p.environ()
                known = "RANK" in env and "WORLD_SIZE" in env
            except (psutil.Error, OSError):
                known = False
            self._env_rank[p.pid] = known
        return known

    def _groups(self) -> tuple[ProcessGroup, ...]:
        mains, workers, other = self.tree()
        out = []
        for role, procs in (("main", mains), ("workers", workers), ("other", other)):
            if role != "workers" and not procs:
                continue
            cpu: float | None = 0.0
            rss: int | None = 0
            pids = []
            for p in procs:
                try:
                    with p.oneshot():
                        c = p.cpu_percent(None)
                        r = p.memory_info().rss
                except psutil.AccessDenied:
                    self._note("access", f"no permission to read process {p.pid}: its CPU and memory are n/a")
                    cpu = rss = None
                    pids.append(p.pid)
                    continue
                except psutil.Error:
                    continue
                pids.append(p.pid)
                if cpu is not None:
                    cpu += c
                if rss is not None:
                    rss += r
            out.append(ProcessGroup(role, len(pids), cpu, rss, tuple(pids)))
        return tuple(out)

    def _note(self, key: str, text: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            self._notes.append(text)
