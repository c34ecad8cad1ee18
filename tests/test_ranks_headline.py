"""The straggler headline comes from the ranks aligned on their collectives (arrival lateness) when
they could be aligned; the step-offset comparison is kept below it, and a disagreement between the
two is said in one line naming both. Checked on the real two-rank DLRM job and the recorded gloo job."""

from __future__ import annotations

import json

import pytest

from tests.conftest import KINETO
from trainscope.cli import main
from trainscope.reports.deep import straggler_headline

DLRM = KINETO / "hta_dlrm_ws128_2ranks"


def _run(capsys, path, fmt: str) -> str:
    args = ["analyze", str(path), "-q", "--jobs", "1"] + (["--no-tui"] if fmt == "text" else ["--format", fmt])
    assert main(args) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("which", ["dlrm", "gloo"])
def test_headline_names_the_rank_that_arrives_last(which, capsys, gloo_dir):
    path = DLRM if which == "dlrm" else gloo_dir
    s = json.loads(_run(capsys, path, "json"))["stragglers"]
    al = s["alignment"]
    assert al["straggler"] == al["rank_imbalance"]["rank"] == 1  # DLRM: heavier embedding shards; gloo: sleeps
    assert al["matched_by"]["process_group_sequence"] == 0  # neither trace records (process group, Seq)
    assert al["matched_by"]["end_instant"] == al["matched_collectives"]  # two ranks: one pair per instance
    head, note = straggler_headline(s)
    imb = al["rank_imbalance"]
    assert head.startswith(f"straggler: rank 1 is last at {imb['last_in']} of {imb['matched']} collectives")
    assert note is None and s["stragglers"] == [1]  # the aligned answer
    text = _run(capsys, path, "text")
    lines = text.splitlines()
    i = lines.index(next(line for line in lines if line.startswith("Stragglers")))
    assert "common end" in lines[i] and lines[i + 1].startswith("  straggler: rank 1")
    assert "late by (mean)" in text and "the report leads with rank 1: the straggler" in text
    assert "Step-offset comparison" not in text  # shown only where no collective aligns
    assert "by end instant:" in text
    md = _run(capsys, path, "markdown")
    assert "**Straggler: rank 1 is last at" in md and "Step-offset comparison" not in md


def test_without_alignment_the_headline_is_the_step_offset_one():
    s = {
        "summary": "no straggler: 3 collectives matched",
        "stragglers": [],
        "basis": "b",
        "alignment": {"matched_collectives": 0, "rank_imbalance": None, "ranks": []},
    }
    assert straggler_headline(s) == ("no straggler: 3 collectives matched", None)
