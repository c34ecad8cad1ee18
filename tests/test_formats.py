"""The reader table (issue 25 item 2): one row per input kind, read by open_traces, the rank
executor, memory and the document."""

from __future__ import annotations

import pytest

from tests.conftest import DATA
from tests.conftest import KINETO


def test_every_bundled_input_is_claimed_by_the_row_of_its_kind():
    from trainscope.collectors.formats import reader_for

    assert reader_for(str(KINETO / "resnet50_v100_num_workers_0.pt.trace.json.gz")).name == "kineto"
    assert reader_for(str(next((DATA / "nsys").glob("*.sqlite")))).name == "nsys-sqlite"


def test_rank_directories_list_the_rank_kinds_and_counters_kinds_are_declared_once():
    from trainscope.collectors.formats import COUNTER_FORMATS
    from trainscope.collectors.formats import RANK_FILE_SUFFIXES
    from trainscope.reports import document

    assert set(RANK_FILE_SUFFIXES) >= {".json", ".json.gz", ".sqlite"}
    assert document.COUNTER_FORMATS is COUNTER_FORMATS
    assert set(COUNTER_FORMATS) == {"trainscope.recording", "nvidia-smi-csv"}


@pytest.mark.parametrize(
    "content,suffix,message",
    [
        (b"", ".json", "file is empty"),
        (b"\x80\x04}q\x00.", ".pickle", "trainscope memory"),
        (b"not sqlite at all", ".sqlite", "not an SQLite database"),
        (b"\x00\x01\x02binary", ".bin", "unrecognized format"),
    ],
)
def test_refusals_come_from_the_table(tmp_path, content, suffix, message):
    from trainscope.collectors import TraceError
    from trainscope.collectors import open_traces

    p = tmp_path / f"input{suffix}"
    p.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        open_traces(str(p))


def test_adding_a_format_is_its_reader_and_one_row(tmp_path, monkeypatch):
    """The worked example: a toy format (one kernel per line, "name start_us dur_us") becomes readable
    by analyze, rank directories and diff through one new row; nothing else changes."""
    import dataclasses

    import trainscope.collectors.formats as formats
    from trainscope.collectors import open_traces

    def load_toy(path, progress):
        import json

        from trainscope.collectors.kineto import load_kineto

        events = [
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": float(start),
                "dur": float(dur),
                "args": {"device": 0, "stream": 7},
            }
            for name, start, dur in (line.split() for line in open(path))
        ]
        out = path + ".json"
        with open(out, "w") as f:
            json.dump({"traceEvents": events}, f)
        return [load_kineto(out, progress)]

    monkeypatch.setattr(formats, "_load_toy", load_toy, raising=False)
    row = formats.Reader("toy", "toy kernel list", (".toy",), None, "trainscope.collectors.formats:_load_toy")
    monkeypatch.setattr(formats, "READERS", (row,) + formats.READERS)
    p = tmp_path / "run.toy"
    p.write_text("gemm 0 50\nrelu 60 10\n")
    ts = open_traces(str(p))
    assert [dataclasses.asdict(formats.reader_for(str(p)))["name"]] == ["toy"]
    assert len(ts.traces[0].kernels) == 2


def test_unrecognized_format_names_the_csv_and_recording_it_reads(tmp_path):
    """A CSV that is not an nvidia-smi log was told the tool expects only profiler traces and
    Nsight exports, though analyze reads nvidia-smi CSV logs and recordings too."""
    from trainscope.collectors.errors import TraceError
    from trainscope.collectors.formats import reader_for

    f = tmp_path / "x.csv"
    f.write_text("a,b\n1,2\n")
    with pytest.raises(TraceError, match=r"nvidia-smi --format=csv log \(\.csv\).*\.jsonl"):
        reader_for(str(f))
