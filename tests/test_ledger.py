"""The training-memory ledger against the seeds' worked numbers, and the what-if search."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainscope.analyzers.plan.gpu_memory import GIB
from trainscope.analyzers.plan.gpu_memory import custom_gpu
from trainscope.analyzers.plan.gpu_memory import gpu_memory
from trainscope.analyzers.plan.ledger import PlanConfig
from trainscope.analyzers.plan.ledger import activation_memory
from trainscope.analyzers.plan.ledger import fit
from trainscope.analyzers.plan.ledger import fit_options
from trainscope.analyzers.plan.ledger import ledger
from trainscope.analyzers.plan.ledger import normalize
from trainscope.analyzers.plan.ledger import transformer_params

GB = 1e9
GPT2_XL = 1.5e9  # the seeds round GPT-2 XL to 1.5 B parameters
# Seed 000 lines 3193–3303: GPT-2 1.5 B, Adam, FP32, batch 32, activations measured at 65 GB in FP32
# (batch 32, seq 1024). Also the plan app's starting point (tests/test_plan_app.py).
WALKTHROUGH = PlanConfig(
    params=GPT2_XL,
    batch=32,
    seq=1024,
    optimizer="adam",
    precision="fp32",
    activations_gb=65,
    activations_batch=32,
    activations_precision="fp32",
)
# The walkthrough as a user types it (tests/test_plan_cli.py): the sequence length and the batch the
# activations were measured at left out (the plan app's tests add them, as WALKTHROUGH holds them).
WALKTHROUGH_FLAGS = [
    "--params",
    "1.5B",
    "--precision",
    "fp32",
    "--batch",
    "32",
    "--activations-gb",
    "65",
    "--activations-precision",
    "fp32",
    "--gpu",
    "v100-32",
]
V100 = gpu_memory("v100-32")
LAPTOP = gpu_memory("laptop-8gb")


def gb(lg, key):
    return lg.item(key).bytes / GB


def test_gpt2_xl_fp32_adam_static_24gb():
    # seed 001 Act 1 / seed 000 lines 819–899: 6 GB weights + 6 GB gradients + 12 GB Adam state.
    lg = ledger(PlanConfig(params=GPT2_XL, optimizer="adam", precision="fp32"))
    assert (gb(lg, "weights"), gb(lg, "gradients"), gb(lg, "master"), gb(lg, "optimizer")) == (6.0, 6.0, 0.0, 12.0)
    assert lg.static_bytes / GB == 24.0
    assert not lg.complete  # no activations asked for: the static floor only


def test_mixed_precision_adam_is_16_bytes_per_parameter():
    # seed 002: 2Ψ + 2Ψ + 12Ψ = 16Ψ; GPT-2 1.5 B → 24 GB.
    lg = ledger(PlanConfig(params=GPT2_XL, optimizer="adamw", precision="bf16"))
    assert lg.static_bytes / lg.params == 16
    assert lg.static_bytes / GB == 24.0
    assert (gb(lg, "weights"), gb(lg, "gradients"), gb(lg, "master"), gb(lg, "optimizer")) == (3.0, 3.0, 6.0, 12.0)


def test_fp32_gradient_accumulation_is_20_bytes_per_parameter():
    # seed 004: 2Ψ + (2 + 4)Ψ + 12Ψ = 20Ψ.
    lg = ledger(PlanConfig(params=1e9, optimizer="adam", precision="mixed-fp32-grads"))
    assert lg.static_bytes / lg.params == 20


def test_optimizer_multiples_of_the_weights():
    # seed 000 tbl-optimizer-properties: weights plus optimizer state are 1×, 2×, 3× the weights.
    for opt, mult in (("sgd", 1), ("momentum", 2), ("adam", 3)):
        lg = ledger(PlanConfig(params=1e9, optimizer=opt, precision="fp32"))
        assert (lg.item("weights").bytes + lg.item("optimizer").bytes) / lg.item("weights").bytes == mult
    # 8-bit Adam: a quarter of Adam's state (seed 000's 4× compression).
    assert (
        ledger(PlanConfig(params=1e9, optimizer="adam8bit")).item("optimizer").bytes * 4
        == ledger(PlanConfig(params=1e9, optimizer="adam")).item("optimizer").bytes
    )


def test_sgd_fp16_with_master_floor_is_12gb_and_never_fits_8gb():
    # seed 001 scaling challenge: 3 + 3 + 6 = 12 GB before one activation; an 8 GB GPU cannot hold it.
    cfg = PlanConfig(params=GPT2_XL, optimizer="sgd", precision="fp16", batch=1)
    lg = ledger(cfg)
    assert lg.static_bytes / GB == 12.0
    f = fit(lg, LAPTOP.name, LAPTOP.capacity_bytes)
    assert not f.fits and f.static_only
    # No single-GPU setting helps: every option the planner finds needs more GPUs (parameter sharding).
    opts = fit_options(cfg, LAPTOP.name, LAPTOP.capacity_bytes)
    assert opts and all(o.cost.extra_gpus > 0 for o in opts)
    assert opts[0].changes[0].lever == "gpus" and opts[0].ledger.config.gpus == 2


def test_gpt2_walkthrough_89_to_56_5_to_32_1_gb_on_a_32gb_v100():
    base = WALKTHROUGH
    fp32 = ledger(base)
    amp = ledger(replace(base, precision="mixed"))
    ckpt = ledger(replace(base, precision="mixed", checkpoint="every:4"))
    assert fp32.total_bytes / GB == pytest.approx(89.0)
    assert amp.total_bytes / GB == pytest.approx(56.5)
    assert ckpt.total_bytes / GB == pytest.approx(32.125)  # the walkthrough prints 32.1
    assert gb(amp, "activations") == pytest.approx(32.5) and gb(ckpt, "activations") == pytest.approx(8.125)
    assert ckpt.recompute_pct == 33.0
    fits = [fit(lg, V100.name, V100.capacity_bytes).fits for lg in (fp32, amp, ckpt)]
    assert fits == [False, False, True]
    assert fit(ckpt, V100.name, V100.capacity_bytes).tight  # 32.1 GB of 34.4 GB: above the 90 % threshold


def test_measured_activations_scale_with_micro_batch_and_precision():
    cfg = PlanConfig(
        params=1e9,
        batch=32,
        grad_accum=4,
        precision="mixed",
        activations_gb=40,
        activations_batch=16,
        activations_precision="fp32",
    )
    # micro-batch 8 of the measured 16, 2-byte of the measured 4-byte values: 40 × 8/16 × 2/4 = 10 GB.
    assert activation_memory(normalize(cfg)).bytes / GB == pytest.approx(10.0)


def test_transformer_parameter_count_matches_gpt2_xl():
    # Published GPT-2 XL: 1,557,611,200 parameters (incl. 1024 × 1600 learned positions the formula omits).
    n = transformer_params(48, 1600, 50257)
    assert n == 50257 * 1600 + 48 * (12 * 1600**2 + 13 * 1600) + 2 * 1600
    assert abs(n - 1_557_611_200) / 1_557_611_200 < 0.002


def test_activation_estimate_follows_korthikanti_at_16_bit():
    # Korthikanti et al. 2022 eq. (1): s·b·h·(34 + 5·a·s/h) bytes per layer with 16-bit values and dropout.
    s, b, h, a, L, v = 512, 4, 1024, 16, 6, 32000
    cfg = PlanConfig(layers=L, hidden=h, heads=a, vocab=v, seq=s, batch=b, precision="bf16", attention="eager")
    act = activation_memory(normalize(cfg))
    per_layer = s * b * h * (34 + 5 * a * s / h)
    head = 2 * 2 * s * b * h + s * b * h + 4 * s * b * v  # final norm + projection inputs, mask, FP32 logits
    assert act.bytes == pytest.approx(L * per_layer + head)
    assert (
        "Korthikanti" in act.source and "the textbook's callout" in act.source.lower()
    )  # says which source it follows and why
    # Selective recomputation keeps 34·s·b·h per layer; fused attention stores the same.
    sel = activation_memory(normalize(replace(cfg, checkpoint="selective")))
    fused = activation_memory(normalize(replace(cfg, attention="flash")))
    assert sel.bytes == fused.bytes == pytest.approx(L * s * b * h * 34 + head)
    # Checkpointing every 2 layers: 3 stored layer inputs (2 bytes each) + 2 layers recomputed at a time.
    ev2 = activation_memory(normalize(replace(cfg, checkpoint="every:2")))
    assert ev2.bytes == pytest.approx(3 * 2 * s * b * h + 2 * per_layer + head)


def test_zero_stages_shard_what_the_playbook_says():
    cfg = PlanConfig(params=8e9, optimizer="adam", precision="mixed", gpus=8)
    z = {k: ledger(replace(cfg, zero=k)) for k in range(4)}
    assert z[0].static_bytes == 16 * 8e9
    assert (
        z[1].item("optimizer").bytes == z[0].item("optimizer").bytes / 8
        and z[1].item("master").bytes == z[0].item("master").bytes / 8
        and z[1].item("gradients").bytes == z[0].item("gradients").bytes
    )
    assert (
        z[2].item("gradients").bytes == z[0].item("gradients").bytes / 8
        and z[2].item("weights").bytes == z[0].item("weights").bytes
    )
    assert z[3].static_bytes == pytest.approx(z[0].static_bytes / 8)


def test_fit_options_are_minimal_fitting_and_ranked_by_cost():
    cfg = PlanConfig(
        layers=48, hidden=1600, heads=25, vocab=50257, seq=1024, batch=32, precision="fp32", attention="eager"
    )
    opts = fit_options(cfg, V100.name, V100.capacity_bytes)
    assert len(opts) >= 3
    for o in opts:
        assert o.fit.fits and o.ledger.total_bytes <= V100.capacity_bytes
    sets = [frozenset(c.lever for c in o.changes) for o in opts if o.cost.extra_gpus == 0]
    assert not any(a < b for a in sets for b in sets)  # no option is another plus extra changes
    keys = [o.cost.key()[:2] for o in opts]
    assert keys == sorted(keys)  # no new hardware and no slower convergence come first
    assert fit_options(replace(cfg, batch=1, attention="flash"), "H200", 141 * GIB) == []  # already fits


def test_bad_configs_are_value_errors():
    for bad in (
        PlanConfig(),
        PlanConfig(params=1e9, optimizer="lion"),
        PlanConfig(params=1e9, batch=6, grad_accum=4),
        PlanConfig(params=1e9, checkpoint="sometimes"),
        PlanConfig(params=1e9, zero=4),
        PlanConfig(layers=4, hidden=64, vocab=100, seq=8, attention="eager"),
    ):
        with pytest.raises(ValueError):
            ledger(bad)


def test_custom_gpu_sizes():
    assert custom_gpu("24GiB").capacity_bytes == 24 * GIB
    assert custom_gpu("24GB").capacity_bytes == 24e9
    assert custom_gpu("16").capacity_bytes == 16 * GIB
    with pytest.raises(ValueError):
        custom_gpu("lots")
