"""Where in the step, live: `watch` splits each iteration into data wait, host-to-device, forward,
backward and optimizer with the hook it already injects (no change to the job), per rank, and names
the part that holds the slow rank back.

The end-to-end tests run the bundled CPU job (tests/jobs/train_job.py) whose parts are engineered
(matmuls burned for a wall-time budget inside its forward, a custom autograd Function's backward and
an SGD subclass's step) and which times each part itself around its own calls. Tolerance, stated
once: a part of ≥ 10 % of the step must match the job's own share within 10 % *relative* (a 40 %
share: ±4 points); smaller parts within 3 percentage points. Both sides measure the same run, so
the tolerance covers what differs between them: the few start-up steps each leaves out, and
preemption on a loaded machine. The job's data timer (around next(it)) also holds the hook's own
time in that call (its bookkeeping and datagrams: watch's "hook" part, ≈ 1–2 ms per step on this
loaded 2-core machine), so the job's data share is compared with watch's data wait + hook.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time

import pytest

from tests.conftest import quiet_cpu_trainer
from tests.test_watch_job import JOB
from tests.test_watch_job import watch_job
from tests.watching import TORCHRUN_2
from tests.watching import run_with_short_tmpdir
from tests.watching import watch_argv
from trainscope.analyzers.live.engine import LiveAnalyzer
from trainscope.analyzers.live.engine import evaluate
from trainscope.analyzers.live.split import PARTS
from trainscope.analyzers.live.split import holding_back
from trainscope.analyzers.live.split import split_window
from trainscope.analyzers.rules import Rules
from trainscope.collectors import step_hook
from trainscope.traces.samples import RankSample
from trainscope.traces.samples import Snapshot
from trainscope.traces.samples import StepSample

JOB_PARTS = {"data": "data_ms", "forward": "fwd_ms", "backward": "bwd_ms", "optimizer": "opt_ms"}


def job_split(stderr: str, rank: int | None = None) -> dict[str, float]:
    """The job's own per-part totals as % of its step time (its stdout went to stderr)."""
    who = f"rank={rank} " if rank is not None else ""
    m = re.search(
        rf"job: {who}fwd_ms=([\d.]+) bwd_ms=([\d.]+) opt_ms=([\d.]+) data_ms=([\d.]+) step_ms=([\d.]+) steps=(\d+)",
        stderr,
    )
    assert m, stderr[-2000:]
    fwd, bwd, opt, data, step = (float(x) for x in m.groups()[:5])
    return {
        "forward": 100 * fwd / step,
        "backward": 100 * bwd / step,
        "optimizer": 100 * opt / step,
        "data": 100 * data / step,
    }


def assert_matches(watch: dict, job: dict[str, float]) -> None:
    for part, share in job.items():
        got = watch["parts"][part]["pct"]
        if part == "data":  # the job's timer around next(it) holds the hook's own time there too
            got += watch["parts"]["hook"]["pct"]
        if share >= 10.0:
            assert abs(got - share) <= 0.10 * share, (part, got, share, watch)
        else:
            assert abs(got - share) <= 3.0, (part, got, share, watch)


# Engineered: 8 samples × 2 ms of loading = 16 ms of data wait, 20 ms forward, 30 ms backward, 20 ms
# optimizer, no other compute: ≈ 19 / 23 / 35 / 23 % of an ≈ 87 ms step on an idle machine.
def test_watch_split_matches_the_jobs_own_timers(tmp_path):
    samples, summary, err = watch_job(
        tmp_path,
        *(
            "--load-ms",
            "2",
            "--fwd-ms",
            "20",
            "--bwd-ms",
            "30",
            "--opt-ms",
            "20",
            "--compute-ms",
            "0",
            "--seconds",
            "8",
        ),
    )
    split = summary["split"]
    own = job_split(err)
    assert_matches(split, own)
    # The engineered order holds whatever the machine's load: backward is the largest part.
    assert max(PARTS, key=lambda p: split["parts"][p]["pct"]) == "backward", split
    assert split["parts"]["h2d"]["pct"] == 0.0  # a CPU job copies nothing to a device
    assert split["parts"]["other"]["pct"] < 10.0, split
    assert abs(sum(p["pct"] for p in split["parts"].values()) - 100.0) < 0.5
    assert "host wall time" in split["basis"]
    # The JSON sample lines carry the window's split too, once steps arrive.
    assert any(s.get("split", {}).get("parts") for s in samples)
    assert "ranks" not in split and "holds_back" not in split  # one process: no rank view


def test_torchrun_split_per_rank_names_the_part_holding_the_slow_rank(tmp_path):
    # Two gloo ranks in lockstep (DDP); rank 1's forward is 40 ms longer, so rank 0 waits for it in
    # its backward (the gradient all-reduce). Fixed step count: both ranks run as many iterations.
    job = [*TORCHRUN_2, str(JOB), "--ddp", "--steps", "80", "--compute-ms", "0", "--fwd-ms", "10", "--bwd-ms", "10"]
    job += ["--opt-ms", "10", "--slow-rank", "1", "--slow-fwd-ms", "40", "--load-ms", "1"]
    p = run_with_short_tmpdir(watch_argv("--format", "json", job=job), tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout.splitlines()[-1])
    split = summary["split"]
    ranks = {r["rank"]: r for r in split["ranks"]}
    assert set(ranks) == {"0", "1"}, split
    for r in ("0", "1"):
        assert_matches(ranks[r], job_split(p.stderr, int(r)))
    # Rank 1 spends its extra time in forward; rank 0 waits that long in backward.
    assert ranks["1"]["parts"]["forward"]["ms"] - ranks["0"]["parts"]["forward"]["ms"] >= 25.0, split
    assert ranks["0"]["parts"]["backward"]["ms"] - ranks["1"]["parts"]["backward"]["ms"] >= 25.0, split
    held = split["holds_back"]
    assert held is not None and (held["rank"], held["part"]) == ("1", "forward"), split["evidence"]
    assert held["excess_ms"] >= 25.0 and held["how"] == "lockstep"


# -- the hook in the job: what each part covers (in this process, no watcher) -----------------------


@pytest.fixture
def hooked(monkeypatch):
    """A fresh step hook in this process with its part hooks, the datagrams kept in a list."""
    torch = pytest.importorskip("torch")
    nnm = sys.modules["torch.nn.modules.module"]
    optm = sys.modules["torch.optim.optimizer"]
    saved = (
        dict(nnm._global_forward_pre_hooks),
        dict(nnm._global_forward_hooks),
        dict(optm._global_optimizer_pre_hooks),
        dict(optm._global_optimizer_post_hooks),
        torch.autograd.backward,
        torch.Tensor.to,
        torch.Tensor.cuda,
        optm.Optimizer.__dict__["profile_hook_step"],
    )
    stream = step_hook._Stream("/nonexistent/steps.sock")
    sent: list[dict] = []
    stream.send = lambda m: sent.append(m) or True  # type: ignore[method-assign]
    yield torch, stream, sent
    nnm._global_forward_pre_hooks.clear()
    nnm._global_forward_pre_hooks.update(saved[0])
    nnm._global_forward_hooks.clear()
    nnm._global_forward_hooks.update(saved[1])
    optm._global_optimizer_pre_hooks.clear()
    optm._global_optimizer_pre_hooks.update(saved[2])
    optm._global_optimizer_post_hooks.clear()
    optm._global_optimizer_post_hooks.update(saved[3])
    torch.autograd.backward = saved[4]
    torch.Tensor.to = saved[5]
    torch.Tensor.cuda = saved[6]
    optm.Optimizer.profile_hook_step = saved[7]
    todo = [optm.Optimizer]
    while todo:  # every optimizer class's step as torch wrapped it
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            step = sub.__dict__.get("step")
            if getattr(step, "_trainscope_wrapped", False):
                sub.step = step.__wrapped__


def _wait(ms: float) -> None:
    t = time.monotonic()
    while time.monotonic() - t < ms / 1000:
        pass


@pytest.fixture
def parts(hooked):
    """``hooked`` with the part hooks (forward, backward, optimizer, copies) installed."""
    torch, stream, sent = hooked
    assert step_hook._install_parts(stream)
    return hooked


def _slow_sgd(torch, params, ms: float):
    """An SGD whose step takes ``ms`` more after its own update."""

    class Opt(torch.optim.SGD):
        def step(self, closure=None):
            out = super().step(closure)
            _wait(ms)
            return out

    return Opt(params, lr=0.1)


@contextlib.contextmanager
def _loader_hooked(stream):
    """DataLoader iterators wrapped as the injected hook wraps them, reporting to ``stream``; put back after."""
    module = sys.modules["torch.utils.data.dataloader"]
    saved = module._BaseDataLoaderIter.__next__
    old_state, step_hook._state = step_hook._state, stream
    step_hook._wrap_iterator_class(module)
    try:
        yield
    finally:
        module._BaseDataLoaderIter.__next__ = saved
        step_hook._state = old_state


def _step_totals(stream, sent: list[dict]) -> dict[str, int]:
    """The ``steps`` datagrams, flushed, summed field by field: n and the ns of each part."""
    stream.flush()
    msgs = [m for m in sent if m.get("type") == "steps"]
    return {k: sum(m[k] for m in msgs) for k in ("n", "wait_ns", "step_ns", "fwd_ns", "bwd_ns", "opt_ns", "h2d_ns")}


def _iterate(stream, sent: list[dict], body, n: int = 5, data_ms: float = 0.0) -> dict:
    """``n`` iterations with ``body`` between DataLoader-like boundaries; the flushed totals per iteration (ms)."""
    clock = time.monotonic_ns
    for _ in range(n + 1):
        stream.open = step_hook.DATA
        start = clock()
        _wait(data_ms)
        stream.on_next(start, clock())
        body()
    tot = _step_totals(stream, sent)
    k = tot.pop("n")
    assert k == n
    return {key[:-3]: v / k / 1e6 for key, v in tot.items()}


def test_forward_backward_and_optimizer_are_timed_apart(parts):
    torch, stream, sent = parts

    class Slow(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            _wait(12)
            return g

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

        def forward(self, x):
            _wait(8)
            return Slow.apply(self.inner(x))

    model = Model()
    opt = _slow_sgd(torch, model.parameters(), 6)

    def body():
        opt.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        _wait(3)  # other

    ms = _iterate(stream, sent, body, data_ms=4)
    # Each part holds its own time, and they are disjoint: with the 3 ms of "other" they fit in the
    # step (a part counted twice, or "other" counted in one, would not).
    assert ms["fwd"] >= 8 and ms["bwd"] >= 12 and ms["opt"] >= 6 and ms["wait"] >= 4 and ms["h2d"] == 0, ms
    assert ms["step"] >= ms["wait"] + ms["fwd"] + ms["bwd"] + ms["opt"] + 3, ms


def test_a_closure_inside_the_optimizer_step_is_forward_and_backward(parts):
    # Lightning's automatic optimization and LBFGS run forward and backward inside Optimizer.step.
    torch, stream, sent = parts

    class Model(torch.nn.Linear):
        def forward(self, x):
            _wait(8)
            return super().forward(x)

    model = Model(4, 1)
    opt = _slow_sgd(torch, model.parameters(), 4)

    def closure():
        opt.zero_grad()
        loss = model(torch.randn(2, 4)).sum()
        loss.backward()
        _wait(10)  # inside the step's closure, outside forward and backward: the optimizer's
        return loss

    ms = _iterate(stream, sent, lambda: opt.step(closure))
    # The closure's forward is forward; the step's own 4 ms and the closure's 10 ms outside forward
    # and backward are the optimizer's; the forward is not counted twice (all fit in the step).
    assert ms["fwd"] >= 8 and ms["bwd"] > 0 and ms["opt"] >= 14, ms
    assert ms["step"] >= ms["fwd"] + ms["bwd"] + ms["opt"], ms


def test_modules_inside_backward_or_the_data_loader_are_not_forward(parts):
    torch, stream, sent = parts
    from torch.utils.checkpoint import checkpoint

    class Block(torch.nn.Module):
        def forward(self, x):
            _wait(5)
            return torch.tanh(x)

    block = Block()
    transform = Block()  # e.g. a torchvision transform: an nn.Module called while loading

    clock = time.monotonic_ns
    for _ in range(4):
        stream.open = step_hook.DATA
        start = clock()
        transform(torch.zeros(1))
        stream.on_next(start, clock())
        x = torch.randn(3, requires_grad=True)
        checkpoint(block, x, use_reentrant=False).sum().backward()  # the block runs again inside backward
    m = _step_totals(stream, sent)
    n = m["n"]
    # The block runs twice per step, 5 ms each: once in forward, once recomputed inside backward
    # (backward's); the transform is data time. Disjoint: the three fit in the step.
    assert m["fwd_ns"] / n / 1e6 >= 5 and m["bwd_ns"] / n / 1e6 >= 5 and m["wait_ns"] / n / 1e6 >= 5, m
    assert m["fwd_ns"] + m["bwd_ns"] + m["wait_ns"] <= m["step_ns"], m
    assert m["fwd_ns"] < m["step_ns"] / 2, m  # not both runs of the block


def test_host_to_device_copies_are_timed_at_the_top_level_only(hooked):
    # A CPU build has no CUDA copy to time; the wrapper is the same for any device flag, so the meta
    # device stands in for CUDA here (Tensor.is_meta instead of Tensor.is_cuda), and a copy is made
    # to take 3 ms.
    torch, stream, sent = hooked
    orig = torch.Tensor.to

    def slow_to(self, *a, **k):
        _wait(3)
        return orig(self, *a, **k)

    torch.Tensor.to = slow_to  # the fixture puts the real one back
    step_hook._install_parts(stream, h2d_attr="is_meta")
    assert getattr(torch.Tensor.to, "_trainscope_wrapped", False)

    class Model(torch.nn.Module):
        def forward(self, x):
            return x.to("meta")  # inside forward: forward's time, not a copy

    model = Model()

    def body():
        torch.zeros(4).to("meta")  # a copy to the device: timed
        torch.zeros(4).to(torch.float64)  # a conversion on the host: not
        model(torch.zeros(4))

    ms = _iterate(stream, sent, body)
    # One copy per step is timed; the conversion (3 ms too) and the copy inside forward are not.
    assert ms["h2d"] >= 3 and ms["fwd"] >= 3 and ms["h2d"] + ms["fwd"] + 3 <= ms["step"], ms


def test_every_hook_is_a_no_op_while_torch_compile_traces(hooked, monkeypatch):
    torch, stream, sent = hooked
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    step_hook._install_parts(stream)
    torch.nn.Linear(2, 2)(torch.zeros(2))
    assert stream.open == step_hook.NONE and stream.c_fwd == 0


def test_a_compiled_model_has_no_graph_break_and_no_warning_from_the_hooks(hooked):
    import warnings

    torch, stream, sent = hooked
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a job run with -W error must not fail on the hook's account
        step_hook._install_parts(stream)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
        explained = torch._dynamo.explain(model)(torch.randn(2, 8))
        assert (explained.graph_count, explained.graph_break_count) == (1, 0)
        torch.compile(model, backend="eager")(torch.randn(2, 8))
    assert stream.c_fwd > 0 and stream.open == step_hook.NONE  # the compiled call timed, eagerly, around it


# -- the watcher: old and new hooks ------------------------------------------------------------------


def test_the_receiver_takes_old_and_new_hooks(tmp_path):
    from trainscope.collectors.step_receiver import StepReceiver

    folder = tmp_path / "s"
    folder.mkdir(mode=0o700)
    r = StepReceiver(str(folder / "steps.sock"))
    try:
        old = {"type": "steps", "pid": 7, "t": 1, "n": 2, "wait_ns": 10, "step_ns": 100, "max_wait_ns": 6}
        r.handle(json.dumps(old).encode())
        s = r.drain()
        assert s == StepSample(2, 10, 100, 6) and not s.has_parts  # an older hook: no split, no error
        new = {**old, "fwd_ns": 20, "bwd_ns": 30, "opt_ns": 15, "h2d_ns": 5}
        r.handle(json.dumps(new).encode())
        s = r.drain()
        assert (s.fwd_ns, s.bwd_ns, s.opt_ns, s.h2d_ns) == (20, 30, 15, 5)
        r.handle(json.dumps({**new, "fwd_ns": 90}).encode())  # parts past the step: the steps count, not the parts
        r.handle(json.dumps(new).encode())
        s = r.drain()
        assert s.steps == 4 and not s.has_parts
        r.drain_per_process_parts()
        r.handle(json.dumps(new).encode())
        per = r.drain_per_process_parts()
        assert per == {7: (2, 10, 100, 6, (20, 30, 15, 5, 0))}  # no hook_ns (a hook of this series' first cut): 0
    finally:
        r.close()


# -- the analyzer: the split, per rank, and the part that holds the slow rank back --------------------


def snaps(per_rank: dict[str, dict[str, float]], n: int = 12, steps: int = 10) -> list[Snapshot]:
    """Samples of ranks whose parts are given in ms per iteration (data, fwd, bwd, opt, other)."""

    def rank(name: str, pid: int, p: dict[str, float]) -> RankSample:
        ns = {k: int(v * 1e6 * steps) for k, v in p.items()}
        total = sum(ns.values())
        return RankSample(
            name, pid, steps, ns["data"], total, 0, 2**28, None, None, None, ns["fwd"], ns["bwd"], ns["opt"], 0
        )

    out = []
    for i in range(n):
        rs = tuple(rank(name, 100 + k, p) for k, (name, p) in enumerate(per_rank.items()))
        tot = StepSample(
            sum(r.steps for r in rs),
            sum(r.wait_ns for r in rs),
            sum(r.step_ns for r in rs),
            0,
            *(sum(getattr(r, f) for r in rs) for f in ("fwd_ns", "bwd_ns", "opt_ns", "h2d_ns")),
        )
        out.append(Snapshot(t=float(i), dt=1.0, step=tot, step_mode="on", ranks=rs))
    return out


def part_ms(data=5.0, fwd=20.0, bwd=30.0, opt=10.0, other=5.0) -> dict[str, float]:
    return {"data": data, "fwd": fwd, "bwd": bwd, "opt": opt, "other": other}


def test_the_split_of_a_window_and_of_each_rank():
    sw = split_window(snaps({"0": part_ms(), "1": part_ms()}), Rules())
    assert sw is not None and sw.split is not None
    assert sw.split.steps == 240 and abs(sw.split.step_ms - 70.0) < 1e-6
    assert [round(sw.split.pct(p), 1) for p in PARTS] == [7.1, 0.0, 28.6, 42.9, 14.3, 0.0, 7.1]
    assert [name for name, _ in sw.ranks] == ["0", "1"]
    assert sw.holds is None and "no rank stands out" in sw.evidence
    # No timed parts (an older hook): no split at all, and the rest of the status is unchanged.
    plain = [Snapshot(t=float(i), dt=1.0, step=StepSample(10, 10**7, 10**8), step_mode="on") for i in range(6)]
    assert split_window(plain, Rules()) is None and evaluate(plain, Rules()).split is None


def test_the_part_that_holds_the_slow_rank_back():
    rules = Rules()
    # Lockstep: rank 1's forward is 25 ms longer; rank 0 waits as long in its backward (all-reduce).
    sw = split_window(snaps({"0": part_ms(bwd=55.0), "1": part_ms(fwd=45.0)}), rules)
    assert (sw.holds.rank, sw.holds.part, sw.holds.why) == ("1", "forward", "lockstep"), sw.evidence
    assert abs(sw.holds.excess_ms - 25.0) < 1e-6 and "rank 1's forward takes 45.0 ms" in sw.evidence
    # Not in lockstep: the rank with the longest iteration, by its largest excess (here its backward).
    sw = split_window(snaps({"0": part_ms(), "1": part_ms(bwd=60.0), "2": part_ms()}), rules)
    assert (sw.holds.rank, sw.holds.part, sw.holds.why) == ("1", "backward", "longest iteration")
    # The input-wait rule's straggler: its data wait.
    sw = split_window(snaps({"0": part_ms(bwd=60.0), "1": part_ms(data=35.0)}), rules, straggler="1")
    assert (sw.holds.rank, sw.holds.part) == ("1", "data")
    # Within the threshold (5 % of the median iteration): nobody is named.
    hb, why = holding_back(split_window(snaps({"0": part_ms(fwd=21.0), "1": part_ms()}), rules).ranks, rules)
    assert hb is None and "no rank stands out" in why
    # Too few timed iterations per rank.
    assert split_window(snaps({"0": part_ms(), "1": part_ms(fwd=60)}, n=1, steps=5), rules).holds is None


def test_every_view_shows_the_same_line():
    from trainscope.reports.live import split_line
    from trainscope.reports.live import split_lines
    from trainscope.reports.live import status_line
    from trainscope.reports.live import status_line_dict
    from trainscope.reports.live import summary_markdown
    from trainscope.reports.live import summary_text
    from trainscope.tui.watch_app import step_lines

    an = LiveAnalyzer(Rules())
    for s in snaps({"0": part_ms(bwd=55.0), "1": part_ms(fwd=45.0)}, n=30):
        st = an.add(s)
    line = split_line(st.split.split)
    assert line.startswith("step 95.0 ms: data wait 5 % · host→device 0 % · forward 34 % · backward")
    assert split_line(st.split.split, short=True).startswith("split 95.0 ms: data 5 h2d 0 fwd 34 bwd")
    bar = split_line(st.split.split, bar=20)
    assert bar.startswith("[d") and len(bar[1 : bar.index("]")]) == 20
    lines = split_lines(st)
    assert lines[0] == f"where in the step  {line}"
    assert any(ln.startswith("rank    1") and "◀ held back by its forward" in ln for ln in lines)
    assert lines[-1].startswith("rank 1 is held back by its forward: 45.0 ms per iteration vs 20.0 ms")
    summary = an.summary()
    text = summary_text(summary, {"target": "job"})
    md = summary_markdown(summary, {"target": "job"})
    for shown in (text, md):
        assert split_line(summary.split.split) in shown and "rank 1 is held back by its forward" in shown
    assert "split 95.0 ms" in status_line(st, s) and "held back: rank 1 fwd" in status_line(st, s)
    d = status_line_dict(st, s)["split"]
    assert d["holds_back"]["part"] == "forward" and d["parts"]["forward"]["pct"] == pytest.approx(34.2, abs=0.1)
    assert [r["rank"] for r in d["ranks"]] == ["0", "1"]
    tui = step_lines([(st, s)])
    assert any(ln.startswith("where in the step  [") and "split 95.0 ms" in ln for ln in tui)


def test_the_dashboard_shows_the_split_in_its_steps_panel():
    import asyncio

    from trainscope.reports.live import split_line
    from trainscope.tui.watch_app import SampleMessage
    from trainscope.tui.watch_app import WatchApp

    an = LiveAnalyzer(Rules())
    items = [(an.add(s), s) for s in snaps({"0": part_ms(bwd=55.0), "1": part_ms(fwd=45.0)}, n=30)]

    async def run() -> str:
        app = WatchApp(title="torchrun train.py", interval=1.0, clock=lambda: 100.0)
        async with app.run_test(size=(200, 50)) as pilot:
            for st, s in items:
                app.post_message(SampleMessage(st, s))
            await pilot.pause()
            await pilot.pause()
            return str(app.query_one("#steps .panel-text").render())

    text = asyncio.run(run())
    st = items[-1][0]
    assert split_line(st.split.split, short=True, bar=20) in text
    assert "held back by its forward" in text and "rank 1 is held back by its forward" in text


# -- the training frameworks: the same entry points ---------------------------------------------------


def test_lightning_steps_are_split(parts):
    L = pytest.importorskip("lightning.pytorch", reason="PyTorch Lightning is not installed (pip install lightning)")
    torch, stream, sent = parts
    with _loader_hooked(stream):

        class Model(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(16, 1)

            def forward(self, x):
                _wait(4)
                return self.layer(x)

            def training_step(self, batch, i):
                x, y = batch
                return torch.nn.functional.mse_loss(self(x), y)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
        quiet_cpu_trainer(L, max_steps=20).fit(Model(), torch.utils.data.DataLoader(data, batch_size=8))
    m = _step_totals(stream, sent)
    n = m["n"]
    assert n >= 15
    fwd, bwd, opt = (m[k] / n / 1e6 for k in ("fwd_ns", "bwd_ns", "opt_ns"))
    # The forward runs inside the optimizer step's closure (automatic optimization): still forward.
    assert fwd >= 4 and bwd > 0 and opt > 0, (fwd, bwd, opt)


def test_hf_trainer_steps_are_split(parts, tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    pytest.importorskip("accelerate", reason="accelerate is not installed")
    torch, stream, sent = parts

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(16, 1)

        def forward(self, x, labels=None):
            _wait(4)
            out = self.layer(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 256

        def __getitem__(self, i):
            return {"x": torch.randn(16), "labels": torch.randn(1)}

    with _loader_hooked(stream):
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / "out"),
            max_steps=20,
            per_device_train_batch_size=8,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            use_cpu=True,
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        transformers.Trainer(model=Model(), args=args, train_dataset=Data()).train()
    m = _step_totals(stream, sent)
    n = m["n"]
    assert n >= 15
    fwd, bwd, opt = (m[k] / 1e6 for k in ("fwd_ns", "bwd_ns", "opt_ns"))
    # accelerate's DataLoaderShard fetches one batch ahead, so the first measured iteration is two
    # back-to-back fetches with no forward in it: n - 1 iterations hold a forward that busy-waits
    # >= 4 ms each. The mean over all n was 19/20 of a forward, under 4 ms on a fast idle machine.
    assert fwd >= 4 * (n - 1), (n, fwd)
    step = m["step_ns"] / 1e6
    assert fwd + bwd + opt <= step, (fwd, bwd, opt, step)  # the parts never overlap: inside the iterations
    assert bwd > 0 and opt > 0, (bwd, opt)
