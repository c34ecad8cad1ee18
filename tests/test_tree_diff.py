"""The module trees before and after (analyzers/compare/tree_diff.py) and the node-level gate (``diff --gate``):
the matching rules on hand-made trees, the budget's syntax, and the command on bundled traces — a copy of
the Qwen trace whose MLP kernels were stretched by 20 % fails a 5 % budget on the MLP with exit 3 and
passes a 30 % one."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from tests.conftest import DATA
from tests.conftest import KINETO
from tests.conftest import write_json_gz
from trainscope.analyzers.compare.tree_diff import NoSuchNode
from trainscope.analyzers.compare.tree_diff import diff_trees
from trainscope.analyzers.compare.tree_diff import node_gate
from trainscope.analyzers.compare.tree_diff import parse_budget
from trainscope.analyzers.compare.tree_diff import path_matches
from trainscope.analyzers.trace.module_tree import ModuleTree
from trainscope.analyzers.trace.module_tree import Node

QWEN = KINETO / "tracelens_h100_qwen_inference.json.gz"
MLP = "Qwen2Model_0 › Qwen2DecoderLayer_0…23 › Qwen2MLP_0…23"


def _node(path: tuple[str, ...], gpu: int, kids=(), kind="module", kernel="k", roof=None, instances=1) -> Node:
    kids = list(kids)
    own = gpu - sum(c.gpu_ns_inclusive for c in kids)
    return Node(
        path=path,
        name=path[-1],
        kind=kind,
        count=1,
        host_ns=gpu,
        gpu_ns_inclusive=gpu,
        gpu_ns_exclusive=own,
        flops=None,
        bytes=None,
        tflops=None,
        gbps=None,
        bound="unknown",
        share_of_peak_pct=roof,
        top_kernels=[(kernel, 1, gpu)],
        instances=instances,
        children=kids,
    )


def _tree(roots: list[Node], windows: int = 1) -> ModuleTree:
    return ModuleTree(roots, sum(r.gpu_ns_inclusive for r in roots), windows, {"module": 1}, 0)


def _model(layers: str, mlp_ns: int, attn_name: str = "attn", extra: Node | None = None) -> ModuleTree:
    base = ("model", f"layers.{layers}")
    attn = _node((*base, attn_name), 4_000_000, kernel="flash", roof=60.0)
    mlp = _node((*base, "mlp"), mlp_ns, [_node((*base, "mlp", "fc"), int(mlp_ns * 0.7), kernel="gemm")], roof=70.0)
    kids = [attn, mlp] + ([extra] if extra else [])
    layer = _node(base, sum(k.gpu_ns_inclusive for k in kids) + 50_000, kids, instances=24)
    model = _node(("model",), layer.gpu_ns_inclusive, [layer])
    return _tree([model, _node(("(outside any range)",), 1_000_000, kind="outside")])


def test_folded_blocks_match_by_their_masked_name_and_the_changed_node_is_named_once():
    before = _model("0…23", 3_000_000)
    after = _model("0…27", 3_600_000)  # a deeper model whose MLP grew 0.6 ms
    td = diff_trees(before, after)
    assert td.counts() == {"matched": 6, "renamed": 0, "added": 0, "removed": 0}
    most = td.changed_most()
    # model and layers pass the MLP's change through: the MLP and its fc are listed, not the chain
    assert [n.path[-1] for n in most] == ["mlp", "fc"]
    assert most[0].change_ms == pytest.approx(0.6)
    assert most[0].change_pct == pytest.approx(20.0)
    assert most[0].after_path == ("model", "layers.0…27", "mlp")


def test_renamed_added_and_removed_nodes():
    before = _model("0…23", 3_000_000, extra=_node(("model", "layers.0…23", "dropout"), 10_000, kernel="drop"))
    after = _model(
        "0…23", 3_000_000, attn_name="self_attn", extra=_node(("model", "layers.0…23", "rotary"), 20_000, kernel="rot")
    )
    td = diff_trees(before, after)
    renamed = td.by_status("renamed")
    assert [(n.path[-1], n.after_path[-1]) for n in renamed] == [("attn", "self_attn")]  # the same heaviest kernel
    assert [n.path[-1] for n in td.by_status("removed")] == ["dropout"]
    assert [n.path[-1] for n in td.by_status("added")] == ["rotary"]
    assert td.by_status("added")[0].before_ms is None


def test_budget_syntax_and_path_patterns():
    b = parse_budget("model.layers.*.attn:+5%")
    assert (b.pattern, b.limit, b.unit) == ("model.layers.*.attn", 5.0, "%")
    assert path_matches(b, ("model", "layers.0…27", "attn"))
    assert path_matches(parse_budget("layers.5.attn:+5%"), ("model", "layers.0…27", "attn"))  # an instance
    assert not path_matches(parse_budget("layers.30.attn:+5%"), ("model", "layers.0…27", "attn"))
    assert path_matches(parse_budget("ATTN:+1%"), ("model", "layers.0…27", "attn"))  # case-insensitive, the tail
    assert not path_matches(parse_budget("/attn:+1%"), ("model", "layers.0…27", "attn"))  # anchored
    assert path_matches(parse_budget("/forward/*:+1%"), ("forward", "Optimizer.step#AdamW.step"))
    assert not path_matches(parse_budget("layers.*.mlp:+1%"), ("model", "layers.0…27", "mlp", "fc"))  # one name
    assert path_matches(parse_budget("model.**.fc:+1%"), ("model", "layers.0…27", "mlp", "fc"))  # across names
    p = parse_budget("attn:-3pts")
    assert (p.limit, p.unit) == (3.0, "points")
    for bad in ("attn", "attn:5", "attn:-5%", "attn:+3pts", ":+5%"):
        with pytest.raises(ValueError):
            parse_budget(bad)


def test_node_gate_on_trees():
    td = diff_trees(_model("0…23", 3_000_000), _model("0…23", 3_600_000))
    g = node_gate(td, parse_budget("layers.*.mlp:+5%"))
    assert g.regressed and "mlp" in g.reason and "20.0 %" in g.reason
    assert not node_gate(td, parse_budget("layers.*.mlp:+25%")).regressed
    assert not node_gate(td, parse_budget("attn:+1%")).regressed
    assert not node_gate(td, parse_budget("mlp:-1pts")).regressed  # the same % of roof
    with pytest.raises(NoSuchNode):
        node_gate(td, parse_budget("decoder.*:+5%"))


def stretch(src, dst, prefix: str, factor: float) -> int:
    """A copy of a Kineto trace whose kernels launched inside the ``prefix`` module frames run
    ``factor`` times longer; later GPU work (one stream) and the step ranges move with them."""
    with gzip.open(src) as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    spans = [
        (e["tid"], e["ts"], e["ts"] + e["dur"])
        for e in ev
        if e.get("cat") == "python_function" and e["name"].startswith(prefix)
    ]
    corr = {
        e["args"].get("correlation")
        for e in ev
        if e.get("cat") == "cuda_runtime" and any(t == e["tid"] and a <= e["ts"] < b for t, a, b in spans)
    }
    shift, n = 0.0, 0
    for e in sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")), key=lambda e: e["ts"]):
        e["ts"] += shift
        if e.get("cat") == "kernel" and e["args"].get("correlation") in corr:
            extra = e["dur"] * (factor - 1)
            e["dur"] += extra
            shift += extra
            n += 1
    for e in ev:  # the step (and the capture) end when their work does
        if e.get("cat") in ("user_annotation", "gpu_user_annotation", "Trace"):
            e["dur"] += shift
    write_json_gz(dst, doc)
    return n


@pytest.fixture(scope="module")
def slower_mlp(tmp_path_factory):
    out = tmp_path_factory.mktemp("tree") / "qwen_mlp_slower.json.gz"
    assert stretch(QWEN, out, "nn.Module: Qwen2MLP", 1.2) == 120  # 24 layers × 5 kernels
    return out


def _diff(*args: str):
    return subprocess.run(
        [sys.executable, "-m", "trainscope", "diff", *args, "--no-tui"], capture_output=True, text=True, timeout=300
    )


def test_a_node_budget_fails_with_exit_3_on_the_regressed_node_and_passes_above_the_change(slower_mlp):
    p = _diff(str(QWEN), str(slower_mlp), "--gate", "Qwen2DecoderLayer_*.Qwen2MLP_*:+5%", "--format", "json")
    assert p.returncode == 3, p.stderr
    assert f"regression: node {MLP} GPU time rose 19.9 %" in p.stderr
    doc = json.loads(p.stdout)
    t = doc["tree"]
    assert t["changed_most"][0]["path"][-1] == "Qwen2MLP_0…23"
    assert t["changed_most"][0]["change_pct"] == pytest.approx(19.9, abs=0.2)
    assert [g["regressed"] for g in t["gates"]] == [True]
    p = _diff(str(QWEN), str(slower_mlp), "--gate", "Qwen2MLP_*:+30%", "--gate", "Qwen2Attention_*:+5%")
    assert p.returncode == 0, p.stderr
    assert "gate passed: 'Qwen2MLP_*:+30%'" in p.stderr and "Where in the model" in p.stdout
    p = _diff(str(QWEN), str(slower_mlp), "--gate", "NoSuchBlock_*:+5%")
    assert p.returncode == 2 and "no node matches 'NoSuchBlock_*'" in p.stderr
    p = _diff(str(QWEN), str(slower_mlp), "--gate", "Qwen2MLP_*:5")
    assert p.returncode == 2 and "not a node budget" in p.stderr


def test_diff_of_two_bundled_runs_lists_the_nodes_that_changed_most():
    import trainscope.api as ts

    r = ts.diff(
        DATA / "nsys" / "nsysai_h100x2_wan21_train_before.sqlite",
        DATA / "nsys" / "nsysai_h100x2_wan21_train_after.sqlite",
    )
    t = r.to_dict()["tree"]
    names = [n["path"][-1] for n in t["changed_most"]]
    assert names[:2] == ["(outside any range)", "ncclGroupEnd"]
    assert t["changed_most"][1]["change_ms"] < -5  # the NCCL group end lost ~7 ms per window
    assert "Where in the model" in r.to_text() and "## Where in the model" in r.to_markdown()
    same = ts.diff(QWEN, QWEN).to_dict()["tree"]
    assert same["changed_most"] == [] and same["counts"]["matched"] > 0
    assert not any(same["counts"][k] for k in ("renamed", "added", "removed"))
