"""Kernel classes from the declared family table, token by token, and the launching operator.

Each family of :data:`kernel_families.FAMILIES` is checked on kernel names as the profilers record
them (most from the bundled traces), with its class and compute unit; then the traces where the
old substring rules went wrong: FBGEMM's embedding kernels on the DLRM two-rank trace ("gemm" is a
substring of "fbgemm") and cuBLASLt's ``nvjet`` GEMMs on the Wan2.1 H100 capture.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DATA
from tests.conftest import load
from trainscope.analyzers.trace.kernel_families import FAMILIES
from trainscope.analyzers.trace.kernel_families import family_of
from trainscope.analyzers.trace.kernel_families import tokenize
from trainscope.analyzers.trace.kernels import ALL_CLASSES
from trainscope.analyzers.trace.kernels import classify_kernel
from trainscope.analyzers.trace.kernels import kernel_classes
from trainscope.analyzers.trace.kernels import operator_class
from trainscope.analyzers.trace.kernels import uses_tensor_cores

# (family, kernel name, class, on tensor cores)
CASES = [
    (
        "NCCL/RCCL collectives",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
        "communication",
        False,
    ),
    (
        "NCCL/RCCL collectives",
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        "communication",
        False,
    ),
    ("cuBLASLt nvjet", "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "gemm", True),
    ("FBGEMM GEMM", "void fbgemm_gpu::f8f8bf16_rowwise_kernel<128, 128>(cutlass::bfloat16_t*)", "gemm", True),
    (
        "FBGEMM quantize",
        "void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<float>(float const*, "
        "float const*, long, long, unsigned char*)",
        "elementwise",
        False,
    ),
    (
        "FBGEMM/TorchRec embedding and sparse features",
        "void fbgemm_gpu::permute_2D_data_kernel<false, int, int, "
        "decltype(nullptr)>(int, int, int, int const*, int const*, int const*, int*)",
        "embedding",
        False,
    ),
    (
        "FBGEMM table-batched embedding",
        "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, "
        "float, false, long, 1ul>(at::GenericPackedTensorAccessor<c10::Half, 1ul>)",
        "embedding",
        False,
    ),
    (
        "FBGEMM table-batched embedding",
        "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_"
        "per_row_1<c10::Half, float>(at::GenericPackedTensorAccessor<c10::Half, 2ul>)",
        "embedding",
        False,
    ),
    (
        "FBGEMM table-batched embedding",
        "void bounds_check_indices_kernel<long, false>(at::GenericPackedTensorAccessor<"
        "long, 1ul, at::RestrictPtrTraits, int>)",
        "embedding",
        False,
    ),
    (
        "PyTorch embedding",
        "void at::native::(anonymous namespace)::EmbeddingBag_updateOutputKernel_sum_mean<float, long>("
        "long const*, long const*, float const*, float*)",
        "embedding",
        False,
    ),
    (
        "cuDNN",
        "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>(cudnn::ops::nchw2nhwc_params_t<float>)",
        "elementwise",
        False,
    ),
    (
        "cuDNN",
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1>(cudnnTensorStruct)",
        "normalization",
        False,
    ),
    (
        "cuDNN",
        "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_unity_stride>"
        "(cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_unity_stride::Params)",
        "convolution",
        True,
    ),
    ("cuDNN (bare names)", "volta_scudnn_128x64_relu_interior_nn_v1", "convolution", False),
    (
        "cuDNN (bare names)",
        "void fft2d_r2c_32x32<float, false, 5u, true>(float2*, float const*, int, int, int)",
        "convolution",
        False,
    ),
    ("cuBLAS GEMM/GEMV", "ampere_sgemm_128x64_nn", "gemm", False),
    ("cuBLAS GEMM/GEMV", "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_32x6_nt", "gemm", True),
    (
        "cuBLAS GEMM/GEMV",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
        "gemm",
        True,
    ),
    (
        "cuBLAS GEMM/GEMV",
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false, "
        "cublasGemvParams<cublasGemvTensorStridedBatched<float const>>>(float)",
        "gemm",
        False,
    ),
    (
        "cuBLAS helper",
        "void scal_kernel<float, float, 1, false, 6, 5, 5, 3>(cublasTransposeParams<float>, float const*)",
        "gemm",
        False,
    ),
    (
        "CUTLASS",
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>(cutlass_80_tensorop_s1688gemm_"
        "256x64_16x4_tn_align1::Params)",
        "gemm",
        True,
    ),
    (
        "CUTLASS",
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>(cutlass_80_simt_sgemm_64x64_8x5_nt_"
        "align1::Params)",
        "gemm",
        False,
    ),
    (
        "hipBLASLt/Tensile",
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1_SN_LDSB1_AFC1",
        "gemm",
        True,
    ),
    (
        "Composable Kernel",
        "_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weightINS_47GridwiseGemm",
        "gemm",
        True,
    ),
    (
        "Composable Kernel",
        "_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmha",
        "attention",
        True,
    ),
    ("MIOpen", "MIOpenBatchNormFwdTrainSpatial", "normalization", False),
    (
        "MIOpen",
        "igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x2x1_1x4x1x64_tb",
        "convolution",
        True,
    ),
    (
        "FlashAttention",
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, "
        "false, false, cutlass::bfloat16_t>>(pytorch_flash::Flash_fwd_params)",
        "attention",
        True,
    ),
    (
        "FlashAttention",
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::"
        "bfloat16_t>::Params)",
        "attention",
        True,
    ),
    ("Triton (Inductor)", "triton_poi_fused__to_copy_1", "elementwise", False),
    ("Triton (Inductor)", "triton_red_fused_native_layer_norm_0", "reduction", False),
    ("Triton (Inductor)", "triton_tem_fused_mm_0", "gemm", False),
    (
        "CUB/rocPRIM primitives",
        "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::"
        "Policy800, false, long, int, int>(int*, int*, long const*)",
        "reduction",
        False,
    ),
    (
        "copies",
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>(float*)",
        "elementwise",
        False,
    ),
]


@pytest.mark.parametrize("family,name,cls,tc", CASES, ids=[f"{c[0]}:{c[1][:30]}" for c in CASES])
def test_each_family_classes_its_kernels(family, name, cls, tc):
    f = family_of(name)
    assert f is not None and f.name == family, f and f.name
    assert classify_kernel(name) == cls
    assert uses_tensor_cores(name, cls) is tc


def test_every_family_row_is_tested_and_declares_a_source():
    tested = {c[0] for c in CASES}
    for f in FAMILIES:
        assert f.kernel_class in ALL_CLASSES and f.unit in ("tensor", "vector", "name") and len(f.source) > 20
        if f.name != "hipBLASLt":  # hipBLASLt's own (non-Tensile) kernel names are not in any bundled trace
            assert f.name in tested, f.name


def test_tokens_not_substrings():
    # "gemm" inside "fbgemm", "embedding" inside "rotary_embedding", "flash" inside a KV-cache copy
    t = tokenize("void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int)")
    assert t.namespaces == ("fbgemm_gpu",) and t.identifier == "permute_2D_data_kernel"
    assert "gemm" not in t.head_words
    assert (
        classify_kernel("void rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*)")
        == "elementwise"
    )
    assert (
        classify_kernel("void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16>(long)")
        != "attention"
    )
    assert (
        classify_kernel(
            "void at::native::vectorized_elementwise_kernel<4, fbgemm_gpu::_hfp8_to_float_gpu(at::Tensor "
            "const&, long, long)::{lambda(unsigned char)#1}>(int)"
        )
        == "elementwise"
    )
    # a mangled CK kernel: the nested name is the path, its template argument names the work
    t = tokenize("_ZN2ck16tensor_operation6device12_GLOBAL__N_149kernel_grouped_conv_fwd_multiple_abd_xdl_cshuffleINS_")
    assert t.namespaces[:3] == ("ck", "tensor_operation", "device")
    assert t.identifier.startswith("kernel_grouped_conv_fwd")


def test_operator_names_their_work():
    assert operator_class("aten::addmm") == "gemm"
    assert operator_class("autograd::engine::evaluate_function: MmBackward0") == "gemm"
    assert operator_class("aten::native_group_norm_backward") == "normalization"
    assert operator_class("aten::_scaled_dot_product_flash_attention") == "attention"
    assert operator_class("aten::embedding_dense_backward") == "embedding"
    assert operator_class("_C::rotary_embedding") is None
    assert operator_class("aten::convert_element_type") is None  # "conv" is not a word of it
    assert operator_class("aten::copy_") is None


def test_operator_classes_generic_kernels_on_the_norm_layers_trace():
    """The MI300X norm-layers trace runs group/batch norm through generic ATen kernels
    (``elementwise_kernel_manual_unroll``, ``GammaBetaBackwardCUDAKernel1``): their operators say
    normalization, and every such kernel's time is counted there."""
    trace = load("tl_mi300x_norm_layers_fwdbwd.json.gz")
    cls, _ = kernel_classes(trace)
    k = trace.kernels
    names = {trace.strings[i]: ALL_CLASSES[cls[i]] for i in np.unique(k.name).tolist()}
    gamma = [n for n in names if "GammaBetaBackwardCUDAKernel1" in n]
    assert gamma and all(names[n] == "normalization" for n in gamma)
    assert classify_kernel(gamma[0]) == "other"  # the name alone says nothing
    share = 100 * k.dur[cls[k.name] == ALL_CLASSES.index("normalization")].sum() / k.dur.sum()
    assert share > 75  # by name alone 64 %; the trace is norm layers forward and backward


def _doc(argv: list[str]) -> dict:
    import os

    from tests.fuzzing import run_in_process

    cwd = os.getcwd()
    os.chdir(DATA)
    try:
        rc, out, err = run_in_process([*argv, "--format", "json", "-q"])
    finally:
        os.chdir(cwd)
    assert rc in (0, 3), err
    return json.loads(out)


def test_dlrm_embedding_kernels_are_not_gemm_and_get_no_tensor_core_advice():
    doc = _doc(["analyze", "kineto/hta_dlrm_ws128_2ranks"])
    k = doc["kernels"]
    assert k["class_pct"]["embedding"] > 15
    assert k["class_pct"]["gemm"] < 15  # 34 % when FBGEMM's kernels were read as GEMMs
    for row in k["top"]:
        if "split_embedding" in row["name"] or "permute_2D" in row["name"]:
            assert row["class"] == "embedding" and row["bound"] != "compute" and not row["tensor_core"]
    assert not any(f["id"] == "algorithm/no-tensor-cores" for f in doc["findings"])
    extra = doc["stragglers"]["alignment"]["rank_imbalance"]["extra_work"]
    assert extra[0]["kernel_class"] == "embedding" and extra[0]["ms_per_step"] > 20
    assert "gemm +" not in doc["stragglers"]["alignment"]["rank_imbalance"]["summary"].split(",")[0]


def test_nvjet_gemms_of_the_wan21_capture_are_tensor_core_gemms():
    from trainscope.collectors.inputs import open_traces

    trace = open_traces(str(Path(DATA) / "nsys" / "nsysai_h100x2_wan21_train_before.sqlite")).traces[0]
    cls, tc = kernel_classes(trace)
    k = trace.kernels
    nvjet = [i for i in np.unique(k.name).tolist() if trace.strings[i].startswith("nvjet_")]
    assert nvjet
    assert all(ALL_CLASSES[cls[i]] == "gemm" and tc[i] for i in nvjet)
    share = 100 * k.dur[np.isin(k.name, nvjet)].sum() / k.dur.sum()
    assert share == pytest.approx(10.5, abs=1.5)  # the figure: 10.5 % of the capture
