// fp8_gemm_nt's Python parameters and how its vectorcall binding reads them: one piece of code for the extension
// (python_api.cpp) and for tools/measure_binding_overhead.py, which times this very binding on a CPU machine.
#pragma once

#include <array>

#include "../utils/fast_call.hpp"

namespace dg::apis {

inline constexpr std::array<const char*, 9> kFp8GemmNtParams = {
    "a", "b", "d", "c", "recipe", "recipe_a", "recipe_b", "compiled_dims", "disable_ue8m0_cast"};

// Binds one call's arguments (`function` names the call in TypeErrors; a and b are (tensor, scales) pairs, all
// tensors borrowed) and passes them to
// `target(a, sfa, b, sfb, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast)`.
template <typename Target>
void bind_fp8_gemm_nt(const char* function, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                      const Target& target) {
    const fast_call::Args<kFp8GemmNtParams.size()> p(function, kFp8GemmNtParams, 3, args, nargs, kwnames);
    const auto [a, sfa] = p.pair(0);
    const auto [b, sfb] = p.pair(1);
    target(a, sfa, b, sfb, p.tensor(2), p.optional_tensor(3), p.optional_ints(4), p.optional_ints(5),
           p.optional_ints(6), p.str(7, "nk"), p.flag(8, false));
}

}  // namespace dg::apis
