"""Host cost of binding fp8_gemm_nt's nine arguments, pybind11 casters against the vectorcall binding
(csrc/utils/fast_call.hpp), on this machine's CPU (no GPU needed).

    python tools/measure_binding_overhead.py [--json out.json]

Builds a stand-alone extension (torch.utils.cpp_extension, ~1 minute) with functions of fp8_gemm_nt's signature
whose bodies do nothing but touch the arguments: one bound by pybind11 as `_C.fp8_gemm_nt` was before its own binding
(tensor pairs cast to tuples of handles), one through the extension's own vectorcall binding
(dg::apis::bind_fp8_gemm_nt, tensors borrowed), and that binding followed by fp8_gemm_nt's host checks
(dg::apis::check_fp8_gemm_nt_host, the extension's own code, on CPU tensors). Times 200000 calls of each, with the
same Python-side tuples, and an empty call as the floor. The extension's real call adds the device checks, the plan
lookup and the launch.
"""

import argparse
import json
import os
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SOURCE = r"""
#include <torch/python.h>
#include "apis/fp8_gemm_nt_binding.hpp"
#include "apis/gemm.hpp"

namespace py = pybind11;
using namespace py::literals;
using TensorPair = std::tuple<at::Tensor, at::Tensor>;
using Recipe = std::optional<std::vector<int64_t>>;

static int64_t sink = 0;
static void body(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb,
                 const at::Tensor& d, const std::optional<at::Tensor>& c, const Recipe& recipe, const Recipe& recipe_a,
                 const Recipe& recipe_b, const std::string& dims, bool flag) {
    sink += a.size(0) + sfa.size(0) + b.size(0) + sfb.size(0) + d.size(1) + c.has_value() + recipe.has_value() +
            recipe_a.has_value() + recipe_b.has_value() + dims.size() + flag;
}
// (pybind11 casts the pairs to tuples of tensor handles, as the binding did)
static void pybind_body(const TensorPair& a, const TensorPair& b, const at::Tensor& d,
                        const std::optional<at::Tensor>& c, const Recipe& recipe, const Recipe& recipe_a,
                        const Recipe& recipe_b, const std::string& dims, bool flag) {
    body(std::get<0>(a), std::get<1>(a), std::get<0>(b), std::get<1>(b), d, c, recipe, recipe_a, recipe_b, dims, flag);
}

// (the extension's own binding code: dg::apis::bind_fp8_gemm_nt)
static void fast_body(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    dg::apis::bind_fp8_gemm_nt("fast", args, nargs, kwnames, body);
}
static PyMethodDef fast_def = {"fast", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                                   &dg::fast_call::entry<fast_body>)), METH_FASTCALL | METH_KEYWORDS, nullptr};
// The same binding followed by fp8_gemm_nt's own host checks (everything but the devices), as the extension runs them
static void checked_body(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    dg::apis::bind_fp8_gemm_nt("checked", args, nargs, kwnames,
                               [](const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb,
                                  const at::Tensor& d, const std::optional<at::Tensor>& c, const Recipe& recipe,
                                  const Recipe& recipe_a, const Recipe& recipe_b, const std::string& dims, bool flag) {
                                   sink += dg::apis::check_fp8_gemm_nt_host(a, sfa, b, sfb, d, c, recipe, recipe_a,
                                                                            recipe_b, dims).m + flag;
                               });
}
static PyMethodDef checked_def = {"checked", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                                      &dg::fast_call::entry<checked_body>)), METH_FASTCALL | METH_KEYWORDS, nullptr};

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("pybind", &pybind_body, "a"_a, "b"_a, "d"_a, "c"_a = py::none(), "recipe"_a = py::none(),
          "recipe_a"_a = py::none(), "recipe_b"_a = py::none(), "compiled_dims"_a = "nk",
          "disable_ue8m0_cast"_a = false);
    m.def("empty", []() {});
    dg::fast_call::add_function(m, fast_def);
    dg::fast_call::add_function(m, checked_def);
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--calls", type=int, default=200000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as build:
        src = os.path.join(build, "binding_overhead.cpp")
        with open(src, "w") as f:
            f.write(SOURCE)
        from torch.utils.cpp_extension import load

        mod = load("dg_binding_overhead", [src], extra_include_paths=[os.path.join(ROOT, d) for d in ("csrc", "deep_gemm/include")],
                   extra_cflags=["-O3", "-std=c++20"], build_directory=build)  # fmt: skip
    a = (torch.empty(64, 512, dtype=torch.float8_e4m3fn), torch.empty(64, 4))
    b = (torch.empty(256, 512, dtype=torch.float8_e4m3fn), torch.empty(2, 4))
    d = torch.empty(64, 256, dtype=torch.bfloat16)

    def per_call_us(fn) -> float:
        for _ in range(1000):
            fn()
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(args.calls):
                fn()
            best = min(best, (time.perf_counter() - t) / args.calls * 1e6)
        return best

    results = {
        "empty_call_us": per_call_us(mod.empty),
        "pybind11_us": per_call_us(lambda: mod.pybind(a, b, d)),
        "vectorcall_us": per_call_us(lambda: mod.fast(a, b, d)),
        "pybind11_keywords_us": per_call_us(lambda: mod.pybind(a, b, d, compiled_dims="nk", disable_ue8m0_cast=False)),
        "vectorcall_keywords_us": per_call_us(lambda: mod.fast(a, b, d, compiled_dims="nk", disable_ue8m0_cast=False)),
        "vectorcall_host_checks_us": per_call_us(lambda: mod.checked(a, b, d)),
    }
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
