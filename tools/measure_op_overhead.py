"""Host cost that deep_gemm.ops adds to a call, on this machine's CPU (no GPU needed).

    python tools/measure_op_overhead.py

1. Eager path: the public functions are deep_gemm.ops._public's wrapper (check torch.compiler.is_compiling(), then
   call the binding with the same arguments). Timed around a no-op C callable taking nine arguments, against that
   callable alone: the difference is what the wrapper adds to every eager call. (A real kernel call can't be timed
   on a machine without a GPU, and whole CPU calls of the extension vary by more than this difference.)
2. Op path, what a compiled graph runs: a scratch op with fp8_gemm_nt's flattened schema and a no-op Python kernel
   (registered as deep_gemm.ops registers its kernels, defaults filled in the same way), called through
   torch.ops.<ns>.<op>.default against calling the kernel directly: the dispatcher's cost (boxing the arguments,
   calling back into Python).
3. For scale, the floor of any op call from Python: torch.ops.aten.neg.default (a C++ kernel) against torch.neg.
Each figure is the minimum over repeats of the mean of many calls.
"""

import timeit

import torch

from deep_gemm import ops


def per_call_ns(fn, number: int, repeat: int = 7) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def main() -> None:
    n = 200_000
    noop = min  # (a C callable taking the nine arguments)
    is_compiling = torch.compiler.is_compiling

    def wrapper(*args, **kwargs):  # (the body of deep_gemm.ops._public's wrapper)
        if is_compiling():
            return None
        return noop(*args, **kwargs)

    args = (1, 2, 3, 4, 5, 6, 7, 8, 9)
    bare, through = per_call_ns(lambda: noop(*args), n), per_call_ns(lambda: wrapper(*args), n)
    print(f"1. eager wrapper: callable {bare:.0f} ns, wrapped {through:.0f} ns: adds {through - bare:.0f} ns")

    lib = torch.library.Library("deep_gemm_overhead_probe", "FRAGMENT")
    lib.define("probe(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor(d!) d, Tensor? c=None, int[]? recipe=None, "
               "int[]? recipe_a=None, int[]? recipe_b=None, str compiled_dims=\"nk\", "
               "bool disable_ue8m0_cast=False) -> ()")

    def kernel(a, sfa, b, sfb, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast):
        return None

    schema = torch.ops.deep_gemm_overhead_probe.probe.default._schema
    lib.impl("probe", ops._with_defaults(kernel, ops._schema_defaults(schema, set()), len(schema.arguments)), "CPU")
    probe = torch.ops.deep_gemm_overhead_probe.probe.default
    a, b = torch.zeros(128, 256, dtype=torch.float8_e4m3fn), torch.zeros(256, 256, dtype=torch.float8_e4m3fn)
    flat = (a, torch.zeros(128, 2), b, torch.zeros(2, 2), torch.zeros(128, 256, dtype=torch.bfloat16), None, None,
            None, None, "nk", False)  # fmt: skip
    bare, via_op = per_call_ns(lambda: kernel(*flat), n), per_call_ns(lambda: probe(*flat), n // 4)
    print(f"2. op path: kernel {bare:.0f} ns, through the dispatcher {via_op:.0f} ns: adds {via_op - bare:.0f} ns")

    x = torch.zeros(4)
    direct, via_op = per_call_ns(lambda: torch.neg(x), n // 4), per_call_ns(lambda: torch.ops.aten.neg.default(x), n // 4)
    print(f"3. aten.neg: torch.neg {direct:.0f} ns, torch.ops.aten.neg.default {via_op:.0f} ns: "
          f"adds {via_op - direct:.0f} ns")


if __name__ == "__main__":
    main()
