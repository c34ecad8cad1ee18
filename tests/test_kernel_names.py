"""A mangled kernel name's label: the roofline's short name and the kernel families read one
Itanium nested-name reader (kernel_families.nested_name)."""

from __future__ import annotations

import pytest

from trainscope.analyzers.trace.kernel_families import nested_name
from trainscope.analyzers.trace.roofline import short_kernel_name


@pytest.mark.parametrize(
    ("mangled", "parts", "short"),
    [
        ("_ZN5aiter18add_rmsnorm_kernelIfLi4EEEvPT_", ["aiter", "add_rmsnorm_kernel"], "add_rmsnorm_kernel"),
        ("_Z13gemv2T_kernelIfEvv", ["gemv2T_kernel"], "gemv2T_kernel"),
        # a substitution (S_) inside the nested name is skipped, not the end of it: the innermost
        # identifier is the function (the reader roofline had stopped at S_ and named "detail")
        ("_ZN3ops6detailS_11fused_scaleIfEEvv", ["ops", "detail", "fused_scale"], "fused_scale"),
        # a generic wrapper's name is passed over for the identifier before it
        ("_ZN7cutlass6KernelINS_4gemmEEEvv", ["cutlass", "Kernel"], "cutlass"),
    ],
)
def test_a_mangled_name_is_labelled_by_its_innermost_identifier(mangled, parts, short):
    assert nested_name(mangled) == parts
    assert short_kernel_name(mangled) == short


def test_a_demangled_name_keeps_its_last_component():
    assert short_kernel_name("void (anonymous namespace)::cunn_SoftMaxForward<8, float>(float*)") == (
        "cunn_SoftMaxForward"
    )
