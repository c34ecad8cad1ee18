"""The watch dashboard with injected samples and a fake clock: Pilot interaction and SVG snapshots."""

from __future__ import annotations

import asyncio

from trainscope.analyzers.live.engine import LiveAnalyzer
from trainscope.collectors.samples import GpuProcess
from trainscope.collectors.samples import GpuSample
from trainscope.collectors.samples import HostSample
from trainscope.collectors.samples import ProcessGroup
from trainscope.collectors.samples import Snapshot
from trainscope.collectors.samples import StepSample
from trainscope.tui.watch_app import SampleMessage
from trainscope.tui.watch_app import WatchApp

GIB = 2**30


def data_bound_samples(n: int = 12) -> list[Snapshot]:
    out = []
    for i in range(n):
        util = 4.0 + (i % 3)
        out.append(
            Snapshot(
                t=float(i),
                dt=1.0,
                wall=1_700_000_000.0 + i,
                gpus=(
                    GpuSample(
                        0,
                        "NVIDIA H100 80GB HBM3",
                        util,
                        2.0,
                        21 * GIB,
                        80 * GIB,
                        118.0,
                        700.0,
                        1980.0,
                        41.0,
                        ("gpu_idle",),
                        1.2e8,
                        3.4e9,
                        (GpuProcess(4242, 20 * GIB),),
                        3.5,
                        0.4,
                        1.8,
                    ),
                ),
                host=HostSample(
                    96.0,
                    (97.0, 95.0, 96.0, 96.0),
                    0.4,
                    40 * GIB,
                    64 * GIB,
                    2.5e8,
                    (
                        ProcessGroup("main", 1, 35.0, 3 * GIB, (4242,)),
                        ProcessGroup("workers", 4, 388.0, 6 * GIB, (4250, 4251, 4252, 4253)),
                    ),
                ),
                step=StepSample(5, 640_000_000, 1_000_000_000, 150_000_000),
                step_mode="on",
            )
        )
    return out


def statuses(snaps):
    a = LiveAnalyzer()
    return [(a.add(s), s) for s in snaps]


def make_app() -> WatchApp:
    return WatchApp(title="python train.py", interval=1.0, clock=lambda: 100.0)


async def inject(app: WatchApp, pilot, items) -> None:
    for st, s in items:
        app.post_message(SampleMessage(st, s))
    await pilot.pause()
    await pilot.pause()


def test_samples_drive_the_views_and_pause_freezes_them():
    asyncio.run(_test_samples_drive_the_views_and_pause_freezes_them())


async def _test_samples_drive_the_views_and_pause_freezes_them():
    items = statuses(data_bound_samples())
    app = make_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await inject(app, pilot, items[:2])
        banner = str(app.query_one("#banner").render())
        assert "WARMING UP" in banner
        await inject(app, pilot, items[2:10])
        banner = str(app.query_one("#banner").render())
        assert "DATA-BOUND" in banner and "confidence 0.90" in banner
        gpu_text = str(app.query_one("#gpu-0 #gpu-text").render())
        assert "NVIDIA H100 80GB HBM3" in gpu_text and "21.0 GiB / 80.0 GiB" in gpu_text and "SM 4 %" in gpu_text
        procs = str(app.query_one("#procs .panel-text").render())
        assert "DataLoader workers  ×4" in procs and "(97 % each)" in procs and "waiting on data 64.0 %" in procs

        await pilot.press("p")
        assert app.paused
        before = str(app.query_one("#status").render())
        await inject(app, pilot, items[10:])
        assert "PAUSED" in str(app.query_one("#status").render())
        assert "samples 10" in before and str(app.query_one("#status").render()).count("samples 10") == 1
        await pilot.press("p")
        assert "samples 12" in str(app.query_one("#status").render())

        assert app.window_s == 60.0
        await pilot.press("w")
        assert app.window_s == 300.0 and "last 300 s" in str(app.query_one("#status").render())


def test_plots_show_only_the_chosen_window():
    asyncio.run(_test_plots_show_only_the_chosen_window())


async def _test_plots_show_only_the_chosen_window():
    snaps = [Snapshot(t=float(i), dt=1.0, gpus=(GpuSample(0, "G", float(i % 100)),)) for i in range(200)]
    app = make_app()
    async with app.run_test(size=(140, 44)) as pilot:
        await inject(app, pilot, statuses(snaps))
        assert len(app.in_window()) == 61  # t from 139 to 199
        spark = app.query_one("#gpu-0 #gpu-history")
        assert len(spark.data) == 61
        await pilot.press("w")
        assert len(app.in_window()) == 200


def test_no_gpu_shows_the_reason_not_a_crash():
    asyncio.run(_test_no_gpu_shows_the_reason_not_a_crash())


async def _test_no_gpu_shows_the_reason_not_a_crash():
    s = [
        Snapshot(
            t=float(i),
            dt=1.0,
            host=HostSample(50.0),
            notes=("NVML is not available (x): no NVIDIA driver or GPU",) if i == 0 else (),
        )
        for i in range(5)
    ]
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await inject(app, pilot, statuses(s))
        assert "NVML is not available" in str(app.query_one("#no-gpu").render())
        assert "INSUFFICIENT EVIDENCE" in str(app.query_one("#banner").render())
        # The GPU half still has something to show: the host and the steps.
        gpus = app.query_one("#gpus")
        assert gpus.query("#host") and gpus.query("#steps")
        assert "host CPU %" in str(app.query_one("#host .plot-label").render())
        assert "max 50.0" in str(app.query_one("#host .plot-label").render())


def test_q_detaches_from_a_job_watch_did_not_start():
    async def go():
        app = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("question_mark")
            assert "detach" in str(app.screen.query_one("#help-keys").render())
            await pilot.press("escape")
            await pilot.press("q")
            await pilot.pause()
        return app

    app = asyncio.run(go())
    assert app.detached and app.quit_code == 0


def test_q_asks_before_stopping_a_launched_job():
    async def go(answer):
        app = WatchApp(title="python train.py", interval=1.0, clock=lambda: 100.0, launched=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("q")
            await pilot.pause()
            assert "stop job? y/N" in str(app.screen.query_one("#confirm-text").render())
            await pilot.press("escape")  # stay
            await pilot.pause()
            assert app.is_running and app.quit_code is None
            await pilot.press("q")
            await pilot.pause()
            await pilot.press(answer)
            await pilot.pause()
        return app

    stopped = asyncio.run(go("y"))
    assert stopped.quit_code == 130 and not stopped.detached
    left = asyncio.run(go("d"))
    assert left.quit_code == 0 and left.detached


def test_n_at_the_stop_prompt_goes_back_to_the_dashboard():
    async def go():
        app = WatchApp(title="python train.py", interval=1.0, clock=lambda: 100.0, launched=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("q")
            await pilot.pause()
            assert "stop job? y/N" in str(app.screen.query_one("#confirm-text").render())
            await pilot.press("n")
            await pilot.pause()
            assert app.is_running and app.quit_code is None and not app.detached
            assert not app.screen.query("#confirm-text")  # the dashboard again
            await pilot.press("q")
            await pilot.pause()
            await pilot.press("enter")  # the default (N) is "no" too
            await pilot.pause()
            assert app.is_running and app.quit_code is None
            await pilot.press("escape")
        return app

    app = asyncio.run(go())
    assert app.quit_code is None and not app.detached


def test_dashboard_snapshot_data_bound(snap_compare):
    items = statuses(data_bound_samples())

    async def run_before(pilot) -> None:
        await inject(pilot.app, pilot, items)

    assert snap_compare(make_app(), terminal_size=(150, 46), run_before=run_before)


def test_dashboard_snapshot_paused_warming_up(snap_compare):
    items = statuses(data_bound_samples(2))

    async def run_before(pilot) -> None:
        await inject(pilot.app, pilot, items)
        await pilot.press("p")

    assert snap_compare(make_app(), terminal_size=(150, 46), run_before=run_before)


def test_the_app_consumes_the_apis_watch(tmp_path):
    """Replay: ``preload`` takes a replaying api.Watch; live: ``feed`` is the Watch's push callback.
    Both give the app the pairs the analyzer produced for the same snapshots."""
    asyncio.run(_test_the_app_consumes_the_apis_watch(tmp_path))


async def _test_the_app_consumes_the_apis_watch(tmp_path):
    from trainscope import api
    from trainscope.collectors.recording import RecordingWriter

    snaps = data_bound_samples()
    path = tmp_path / "run.jsonl"
    rec = RecordingWriter(str(path), {"interval_s": 1.0, "target": "test"})
    for s in snaps:
        rec.write(s)
    rec.close({"exit_code": 0})
    expected = [st.verdict.axis for st, _ in statuses(snaps)]

    replay = make_app()
    replay.preload(api.watch(replay=path))
    assert [st.verdict.axis for st, _ in replay.items] == expected and expected[-1] == "data"

    live = make_app()
    w = api.watch()  # fed by hand, as the sampler thread would
    async with live.run_test(size=(140, 44)) as pilot:
        for s in snaps:
            live.feed(w.add(s))
        await pilot.pause()
        await pilot.pause()
        assert [st.verdict.axis for st, _ in live.items] == expected
        assert "DATA-BOUND" in str(live.query_one("#banner").render())
