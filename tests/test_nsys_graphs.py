"""CUDA graphs traced at graph level (issue 22 item 2).

No shared Nsight export was recorded with graph-level tracing, so this fixture is SYNTHETIC: a small
SQLite database built here with the tables and columns Nsight Systems writes —
``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` in the schema of the Nsight export reference (start, end,
deviceId, contextId, greenContextId, streamId, correlationId, globalPid, graphId, graphExecId),
kernels, runtime calls and strings. Its shape is the one described in issue 22: a
``torch.compile(mode="reduce-overhead")``-style run whose GPU replays one graph back to back while the
host waits in ``cudaDeviceSynchronize`` — read without the graph table, 0 % busy and SYNC-BOUND."""

from __future__ import annotations

import sqlite3

from trainscope.analyzers.trace.analysis import analyze_trace
from trainscope.collectors import open_traces

MS = 1_000_000
GPID = 4242 << 24
GTID = GPID | 4242


def build(path, replays: int = 10, replay_ms: int = 78, graph_table: bool = True) -> None:
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
            contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
            demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, graphNodeId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
            globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL,
            callchainId INTEGER);
    """)
    if graph_table:
        con.execute("""CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
            correlationId INTEGER, globalPid INTEGER, graphId INTEGER NOT NULL, graphExecId INTEGER NOT NULL)""")
    strings = {
        "cudaLaunchKernel_v7000": 1,
        "cudaGraphLaunch_v10000": 2,
        "cudaDeviceSynchronize_v3020": 3,
        "void eager_warmup_kernel<float>(float*, int)": 4,
    }
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(v, k) for k, v in strings.items()])
    corr = 1
    t = 1 * MS
    for _ in range(12):  # eager warm-up before capture: 12 kernels of 0.2 ms
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 1, 0, NULL)", (t, t + 10_000, GTID, corr)
        )
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, ?, 4, 4, NULL)",
            (t + 20_000, t + 220_000, corr, GPID),
        )
        corr += 1
        t += 250_000
    start = t + MS
    for i in range(replays):  # the graph launches, issued together; the GPU replays them back to back
        launch = start + i * 20_000
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 2, 0, NULL)",
            (launch, launch + 15_000, GTID, corr),
        )
        if graph_table:
            g0 = start + 30_000 + i * replay_ms * MS
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, 0, 1, NULL, 7, ?, ?, 3, 1)",
                (g0, g0 + replay_ms * MS - 5_000, corr, GPID),
            )
        corr += 1
    end = start + 30_000 + replays * replay_ms * MS
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 3, 0, NULL)",
        (start + replays * 20_000, end + 10_000, GTID, corr),
    )
    con.commit()
    con.close()


def test_graph_replays_are_gpu_busy_time_on_their_stream(tmp_path):
    f = tmp_path / "graphs.sqlite"
    build(f)
    (t,) = open_traces(str(f)).traces
    names = [t.strings[n] for n in t.kernels.name]
    replays = [i for i, n in enumerate(names) if n.startswith("CUDA graph 3")]
    assert len(replays) == 10 and len(t.kernels) == 22
    assert {int(t.kernels.stream[i]) for i in replays} == {7}
    assert int(t.kernels.dur[replays].sum()) == 10 * (78 * MS - 5_000)
    assert any("--cuda-graph-trace=node" in w for w in t.warnings)
    a = analyze_trace(t)
    assert a.breakdown.gpu_busy_pct > 95  # was 0.3 %: only the warm-up kernels
    assert a.verdict.bottleneck == "algorithm/graph-replays" and a.verdict.axis == "algorithm"
    assert "--cuda-graph-trace=node" in a.verdict.summary
    assert a.verdict.bottleneck != "host/sync" and a.sinks.pct("sync") < 1


def test_without_the_graph_table_the_same_run_reads_as_a_host_waiting_on_an_idle_gpu(tmp_path):
    """The control: the same export without graph-level rows is what the reader saw before."""
    f = tmp_path / "nographs.sqlite"
    build(f, graph_table=False)
    (t,) = open_traces(str(f)).traces
    assert int(t.kernels.dur.sum()) == 12 * 200_000  # 2.4 ms of warm-up kernels for a run of 780 ms
    a = analyze_trace(t)
    assert a.verdict.bottleneck != "algorithm/graph-replays"


def test_untimed_graph_rows_are_dropped(tmp_path):
    f = tmp_path / "untimed.sqlite"
    build(f)
    con = sqlite3.connect(f)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_GRAPH_TRACE SET start = 0, end = 0 WHERE rowid % 2 = 0")
    con.commit()
    con.close()
    (t,) = open_traces(str(f)).traces
    assert sum(t.strings[n].startswith("CUDA graph") for n in t.kernels.name) == 5
