"""Host cost that deep_gemm.ops adds to a call, on this machine's CPU (no GPU needed).

    python tools/measure_op_overhead.py [--json out.json]

1. Eager path: the public functions are deep_gemm.ops._public's wrapper (check torch.compiler.is_compiling(), then
   call the binding with the same arguments). Timed around a no-op C callable taking nine arguments, against that
   callable alone: the difference is what the wrapper adds to every eager call.
2. Op path, what a compiled graph runs (torch.ops.deep_gemm.fp8_gemm_nt.default with the flattened arguments). A real
   kernel call can't be timed on a machine without a GPU, so a stand-alone extension (torch.utils.cpp_extension,
   ~1-2 minutes to build) gives one body that does nothing but touch fp8_gemm_nt's arguments three ways:
     direct: through the _C binding's code (dg::apis::bind_fp8_gemm_nt, the vectorcall binding), as the eager
             deep_gemm.fp8_gemm_nt calls it;
     empty C++ op: the same schema with a C++ kernel that ignores its arguments: PyTorch's floor for calling an
             op of this schema from Python (torch.ops' argument conversion, the dispatcher, boxing);
     C++ op: an op with fp8_gemm_nt's schema whose CPU kernel is the extension's own op kernel template
             (dg::op_kernels::fp8_gemm, csrc/op_kernels.hpp) around the body: what the op path costs now;
     C++ op holding the GIL: the same kernel taking the GIL for the call (for scale: what the kernels would pay
             to run under the GIL as the binding does);
     Python op: the same schema with a Python kernel calling the direct binding, registered as deep_gemm.ops
             registers its Python kernels (defaults filled in the same way): what the op path cost before.
   The op path's cost is the op call minus the direct call.
3. For scale, the floor of any op call from Python: torch.ops.aten.neg.default (a C++ kernel) against torch.neg.
Each figure is the minimum over repeats of the mean of many calls.
"""

import argparse
import json
import os
import tempfile
import timeit

import torch

from deep_gemm import ops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCHEMA = ("(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(d!) d, Tensor? c=None, int[]? recipe=None, "
          "int[]? recipe_a=None, int[]? recipe_b=None, str compiled_dims=\"nk\", bool disable_ue8m0_cast=False) -> ()")

SOURCE = r"""
#include <torch/python.h>
#include "apis/fp8_gemm_nt_binding.hpp"
#include "op_kernels.hpp"

static int64_t sink = 0;
static void body(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb,
                 const at::Tensor& d, const std::optional<at::Tensor>& c, const dg::apis::Recipe& recipe,
                 const dg::apis::Recipe& recipe_a, const dg::apis::Recipe& recipe_b, const std::string& dims,
                 bool flag) {
    sink += a.size(0) + sfa.size(0) + b.size(0) + sfb.size(0) + d.size(1) + c.has_value() + recipe.has_value() +
            recipe_a.has_value() + recipe_b.has_value() + dims.size() + flag;
}
static void body_with_gil(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb,
                          const at::Tensor& d, const std::optional<at::Tensor>& c, const dg::apis::Recipe& recipe,
                          const dg::apis::Recipe& recipe_a, const dg::apis::Recipe& recipe_b, const std::string& dims,
                          bool flag) {
    pybind11::gil_scoped_acquire gil;
    body(a, sfa, b, sfb, d, c, recipe, recipe_a, recipe_b, dims, flag);
}

static void direct_body(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    dg::apis::bind_fp8_gemm_nt("direct", args, nargs, kwnames, body);
}
static PyMethodDef direct_def = {"direct", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                                     &dg::fast_call::entry<direct_body>)), METH_FASTCALL | METH_KEYWORDS, nullptr};

// (as csrc/op_kernels.hpp registers dg::op_kernels::fp8_gemm_nt: a plain function calling the template)
using Ints = at::OptionalIntArrayRef;
static void cpp_kernel(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb,
                       const at::Tensor& d, const std::optional<at::Tensor>& c, Ints recipe, Ints recipe_a,
                       Ints recipe_b, std::string_view dims, bool flag) {
    dg::op_kernels::fp8_gemm<&body>(a, sfa, b, sfb, d, c, recipe, recipe_a, recipe_b, dims, flag);
}
static void cpp_kernel_gil(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb,
                           const at::Tensor& d, const std::optional<at::Tensor>& c, Ints recipe, Ints recipe_a,
                           Ints recipe_b, std::string_view dims, bool flag) {
    dg::op_kernels::fp8_gemm<&body_with_gil>(a, sfa, b, sfb, d, c, recipe, recipe_a, recipe_b, dims, flag);
}

// PyTorch's own floor for an op of this schema: a C++ kernel that ignores its arguments
static void empty_kernel(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         const std::optional<at::Tensor>&, Ints, Ints, Ints, std::string_view, bool) {}

TORCH_LIBRARY_IMPL(deep_gemm_overhead_probe, CPU, m) {
    m.impl("empty_kernel", TORCH_FN(empty_kernel));
    m.impl("cpp_kernel", TORCH_FN(cpp_kernel));
    m.impl("cpp_kernel_gil", TORCH_FN(cpp_kernel_gil));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    dg::fast_call::add_function(m, direct_def);
}
"""


def per_call_ns(fn, number: int, repeat: int = 7) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def build_probe():
    """The stand-alone extension (its kernels register for ops that the caller defines next)."""
    build = tempfile.mkdtemp(prefix="dg_op_overhead_")
    src = os.path.join(build, "op_overhead.cpp")
    with open(src, "w") as f:
        f.write(SOURCE)
    from torch.utils.cpp_extension import load

    return load("dg_op_overhead", [src], extra_include_paths=[os.path.join(ROOT, d) for d in ("csrc", "deep_gemm/include")],
                extra_cflags=["-O2", "-std=c++20"], build_directory=build)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    n = args.calls
    results = {}

    noop = min  # (a C callable taking the nine arguments)
    is_compiling = torch.compiler.is_compiling

    def wrapper(*args, **kwargs):  # (the body of deep_gemm.ops._public's wrapper)
        if is_compiling():
            return None
        return noop(*args, **kwargs)

    nine = (1, 2, 3, 4, 5, 6, 7, 8, 9)
    bare, through = per_call_ns(lambda: noop(*nine), n), per_call_ns(lambda: wrapper(*nine), n)
    results["eager_wrapper_adds_ns"] = through - bare
    print(f"1. eager wrapper: callable {bare:.0f} ns, wrapped {through:.0f} ns: adds {through - bare:.0f} ns")

    probe = build_probe()
    lib = torch.library.Library("deep_gemm_overhead_probe", "FRAGMENT")
    for name in ("empty_kernel", "cpp_kernel", "cpp_kernel_gil", "python_kernel"):
        lib.define(name + SCHEMA)

    def python_kernel(a, sfa, b, sfb, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast):
        probe.direct((a, sfa), (b, sfb), d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast)

    schema = torch.ops.deep_gemm_overhead_probe.python_kernel.default._schema
    lib.impl("python_kernel", ops._with_defaults(python_kernel, ops._schema_defaults(schema, set()),
                                                 len(schema.arguments)), "CPU")  # fmt: skip
    a, b = torch.zeros(128, 256, dtype=torch.float8_e4m3fn), torch.zeros(256, 256, dtype=torch.float8_e4m3fn)
    sfa, sfb, d = torch.zeros(128, 2), torch.zeros(2, 2), torch.zeros(128, 256, dtype=torch.bfloat16)
    flat = (a, sfa, b, sfb, d, None, None, None, None, "nk", False)
    pa, pb = (a, sfa), (b, sfb)
    direct = per_call_ns(lambda: probe.direct(pa, pb, d), n)
    results["direct_ns"] = direct
    print(f"2. op path (fp8_gemm_nt's arguments, a no-op body): direct binding call {direct:.0f} ns")
    for key, name in (("empty_cpp_op", "empty_kernel"), ("cpp_op", "cpp_kernel"),
                      ("cpp_op_holding_gil", "cpp_kernel_gil"), ("python_op", "python_kernel")):  # fmt: skip
        op = getattr(torch.ops.deep_gemm_overhead_probe, name).default
        via_op = per_call_ns(lambda op=op: op(*flat), n // 4)
        results[f"{key}_ns"], results[f"{key}_adds_ns"] = via_op, via_op - direct
        print(f"   {key.replace('_', ' ')}: {via_op:.0f} ns: adds {via_op - direct:.0f} ns")

    x = torch.zeros(4)
    eager, via_op = per_call_ns(lambda: torch.neg(x), n // 4), per_call_ns(lambda: torch.ops.aten.neg.default(x), n // 4)
    results["aten_neg_op_adds_ns"] = via_op - eager
    print(f"3. aten.neg: torch.neg {eager:.0f} ns, torch.ops.aten.neg.default {via_op:.0f} ns: "
          f"adds {via_op - eager:.0f} ns")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
