"""A stored run keeps the module tree's top levels (analyzers/trace/module_tree.py ``top_levels``,
analyzers/compare/history.py ``RunSummary.tree``): ``diff baseline:TAG new.trace --gate 'PATTERN:+5%'`` and
``diff RUN RUN`` compare the trees node by node and gate nodes as two traces do. On the bundled Qwen
trace against a copy whose MLP kernels run 20 % longer (tests/test_tree_diff.py ``stretch``), the
stored baseline fails a 5 % budget on the MLP with exit 3 — 7.370 → 8.833 ms, the two traces'
numbers — and passes a 30 % one; a summary stored before the tree was kept still loads, and a node
budget on it is one line, exit 2."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import KINETO
from tests.test_tree_diff import MLP
from tests.test_tree_diff import QWEN
from tests.test_tree_diff import _model
from tests.test_tree_diff import stretch
from trainscope.analyzers.compare.history import BadSummary
from trainscope.analyzers.compare.history import RunSummary
from trainscope.analyzers.compare.tree_diff import _size
from trainscope.analyzers.compare.tree_diff import diff_trees
from trainscope.analyzers.compare.tree_diff import node_gate
from trainscope.analyzers.compare.tree_diff import parse_budget
from trainscope.analyzers.trace.module_tree import STORED_KERNEL
from trainscope.analyzers.trace.module_tree import STORED_LEVELS
from trainscope.analyzers.trace.module_tree import STORED_NAME
from trainscope.analyzers.trace.module_tree import STORED_NODES
from trainscope.analyzers.trace.module_tree import bounded_name
from trainscope.analyzers.trace.module_tree import top_levels

HTA = KINETO / "hta_a100_80gb_rank0.json.gz"  # 79 nodes, 7 levels: a bundled tree over the bound
NORM = KINETO / "tl_mi300x_norm_layers_fwdbwd.json.gz"  # a leaf's heaviest kernel is 5,096 characters long
REGRESSION = f"regression: node {MLP} GPU time rose 19.9 % (7.370 → 8.833 ms per step)"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainscope", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _summary(path) -> RunSummary:
    import trainscope.api as ts
    from trainscope.api.store import report_summary

    return report_summary(ts.analyze(path))


@pytest.fixture(scope="module")
def slower_mlp(tmp_path_factory):
    out = tmp_path_factory.mktemp("store_tree") / "qwen_mlp_slower.json.gz"
    assert stretch(QWEN, out, "nn.Module: Qwen2MLP", 1.2) == 120  # 24 layers × 5 kernels
    return out


# -- what a summary keeps ---------------------------------------------------------------------------


def test_a_summary_keeps_the_first_levels_and_the_heaviest_nodes_within_the_bound():
    import trainscope.api as ts
    from trainscope.api.store import report_summary

    r = ts.analyze(HTA)
    full = r.main.tree
    s = report_summary(r)
    kept = s.tree.walk()
    assert len(full.walk()) == 79 and len(kept) == STORED_NODES == 64 and s.tree.partial
    # every node of the first three levels (10 + 13 + 20: backward nodes under their forward module), then
    # the heaviest deeper ones
    top = {n.path for d, n in full.walk() if d < STORED_LEVELS}
    assert len(top) == 43 and top <= {n.path for _, n in kept}
    deeper = sorted((n for d, n in full.walk() if d >= STORED_LEVELS), key=lambda n: -n.gpu_ns_inclusive)
    assert {n.path for d, n in kept if d >= STORED_LEVELS} == {n.path for n in deeper[:21]}
    # a kept node's times are the full tree's, and its children left out are counted
    for _, n in kept:
        f = full.find(*n.path)
        assert (n.gpu_ns_inclusive, n.gpu_ns_exclusive) == (f.gpu_ns_inclusive, f.gpu_ns_exclusive)
        assert n.omitted == len(f.children) - len(n.children)
    left_out = [c for _, n in kept for c in full.find(*n.path).children if not s.tree.find(*c.path)]
    assert sum(n.omitted for _, n in kept) == len(left_out) == 12  # 12 subtrees: the 15 nodes left out
    assert sum(_size(c) for c in left_out) == 15
    # the JSON the store keeps, read back as the same summary; 14.4 kB for the 64 nodes
    text = json.dumps(s.to_dict(), allow_nan=False)
    assert RunSummary.from_dict(json.loads(text)) == s
    assert len(json.dumps(s.to_dict()["tree"])) < 15_000


def test_long_names_keep_their_head_and_a_digest():
    s = _summary(NORM)
    kernels = [n.top_kernels[0][0] for _, n in s.tree.walk() if n.top_kernels]
    assert max(len(k) for k in kernels) == STORED_KERNEL  # the 5,096-character kernel: its head and a digest
    assert all(len(n.name) <= STORED_NAME for _, n in s.tree.walk())
    assert len(json.dumps(s.to_dict()["tree"])) < 15_000  # 59 of its 61 nodes (2 without GPU time): 13.3 kB
    a, b = "k" * 500, "k" * 499 + "j"
    assert bounded_name(a, 96) == bounded_name(a, 96) != bounded_name(b, 96)
    assert len(bounded_name(a, 96)) == 96 and bounded_name("short", 96) == "short"


def test_an_old_summary_without_a_tree_loads_and_a_damaged_tree_is_named():
    s = _summary(QWEN)
    d = s.to_dict()
    assert s.tree is not None and not s.tree.partial and not s.predates_tree  # 12 nodes: all kept
    old = {k: v for k, v in d.items() if k != "tree"}
    back = RunSummary.from_dict(old)
    assert back.tree is None and back.predates_tree
    assert RunSummary.from_dict({**d, "tree": None}).predates_tree is False  # a trace without ranges
    bad = json.loads(json.dumps(d))
    bad["tree"]["nodes"][0]["children"][0]["gpu_ns"] = "lots"
    with pytest.raises(BadSummary, match=r"summary\.tree\.nodes\[0\]\.children\[0\]\.gpu_ns: expected int"):
        RunSummary.from_dict(bad)


# -- stored trees compared ---------------------------------------------------------------------------


def test_nodes_a_stored_tree_left_out_are_neither_added_nor_removed():
    before = _model("0…23", 10_000_000)
    after = _model("0…23", 12_000_000)
    # AFTER keeps 4 nodes: model, layers, mlp, and (outside); attn and mlp.fc are left out
    cut = top_levels(after, levels=2, max_nodes=4)
    assert [n.name for _, n in cut.walk()] == ["model", "layers.0…23", "mlp", "(outside any range)"]
    assert cut.find("model", "layers.0…23").omitted == 1 and cut.find("model", "layers.0…23", "mlp").omitted == 1
    td = diff_trees(before, cut)
    assert td.partial and td.not_kept == 2  # attn and mlp.fc: only BEFORE has them, AFTER did not keep them
    assert td.counts() == {"matched": 4, "renamed": 0, "added": 0, "removed": 0}
    # the full trees call nothing removed either; the cut tree without its counts would (the old reading)
    assert diff_trees(before, after).counts()["removed"] == 0
    for _, n in cut.walk():
        n.omitted = 0
    cut.omitted = 0
    assert diff_trees(before, cut).counts()["removed"] == 2
    # the gate judges what both keep
    td = diff_trees(top_levels(before), top_levels(after))
    assert node_gate(td, parse_budget("mlp:+5%")).regressed
    assert not node_gate(td, parse_budget("mlp:+25%")).regressed


def test_a_stored_baseline_gates_nodes_against_a_mutated_trace(tmp_path, slower_mlp):
    store = str(tmp_path / "runs.db")
    saved = cli("analyze", str(QWEN), "--no-tui", "--format", "json", "--save", "--tag", "qwen", "--store", store)
    assert saved.returncode == 0, saved.stderr
    assert cli("baseline", "set", "1", "--store", store).returncode == 0
    p = cli("diff", "baseline:qwen", str(slower_mlp), "--gate", "Qwen2DecoderLayer_*.Qwen2MLP_*:+5%", "--store", store)
    assert p.returncode == 3, p.stderr
    assert f"trainscope: {REGRESSION}" in p.stderr
    assert "Where in the model" in p.stdout and "+19.9 %" in p.stdout
    p = cli("diff", "baseline:qwen", str(slower_mlp), "--gate", "Qwen2MLP_*:+30%", "--store", store, "--format", "json")
    assert p.returncode == 0, p.stderr
    assert "gate passed: 'Qwen2MLP_*:+30%': 1 node within the 30 % allowed" in p.stderr
    t = json.loads(p.stdout)["tree"]
    assert t["changed_most"][0]["path"][-1] == "Qwen2MLP_0…23"
    assert t["changed_most"][0]["change_pct"] == pytest.approx(19.9, abs=0.2)
    assert [g["regressed"] for g in t["gates"]] == [False]
    # A run stored before runs kept the tree: it loads and compares; a node budget on it is one line, exit 2.
    with sqlite3.connect(store) as db:
        summary = json.loads(db.execute("SELECT summary FROM runs WHERE id = 1").fetchone()[0])
        del summary["tree"]
        db.execute("UPDATE runs SET summary = ? WHERE id = 1", (json.dumps(summary),))
    p = cli("diff", "baseline:qwen", str(slower_mlp), "--store", store, "--format", "json")
    assert p.returncode == 0 and json.loads(p.stdout)["tree"] is None, p.stderr
    p = cli("diff", "baseline:qwen", str(slower_mlp), "--gate", "Qwen2MLP_*:+30%", "--store", store)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == (
        "trainscope: cannot check a node budget: run 1 [qwen] was saved before stored runs kept the module "
        "tree's top levels (save it again from its trace, or compare two traces)\n"
    )


def test_two_stored_runs_show_the_tree_changes_as_two_traces_do(tmp_path, slower_mlp):
    import trainscope.api as ts
    from trainscope.api.store import RunStore

    st = RunStore(str(tmp_path / "runs.db"))
    a = st.save(_summary(QWEN), detect_git=False)
    b = st.save(_summary(slower_mlp), detect_git=False)
    stored = ts.diff(str(a.id), str(b.id), store=st, node_budgets=["Qwen2MLP_*:+5%"])
    assert stored.from_summaries and stored.exit_code == 3 and stored.regressed
    assert stored.gate_lines() == [REGRESSION + ", more than the 5 % allowed by 'Qwen2MLP_*:+5%'"]
    assert ts.diff(str(a.id), str(b.id), store=st, node_budgets=["Qwen2MLP_*:+30%"]).exit_code == 0
    # the tree section is the two traces' (one function): the same document, text and Markdown lines
    traces = ts.diff(QWEN, slower_mlp, node_budgets=["Qwen2MLP_*:+5%"])
    assert stored.to_dict()["tree"] == traces.to_dict()["tree"]
    section = traces.to_text().split("Where in the model")[1].split("\n\n")[0]
    assert section in stored.to_text()
    md = traces.to_markdown().split("## Where in the model")[1].split("\n\n")[1]
    assert md in stored.to_markdown()
