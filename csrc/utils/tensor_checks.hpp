// Input validation shared by every API: each check names the argument and what was expected.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "exception.hpp"

namespace dg {

// The name users write in Python: "torch.float8_e4m3fn", "torch.bfloat16", ...
inline std::string dtype_name(at::ScalarType dtype) {
    switch (dtype) {
        case at::kFloat8_e4m3fn: return "torch.float8_e4m3fn";
        case at::kBFloat16: return "torch.bfloat16";
        case at::kHalf: return "torch.float16";
        case at::kFloat: return "torch.float32";
        case at::kDouble: return "torch.float64";
        case at::kInt: return "torch.int32";
        case at::kLong: return "torch.int64";
        case at::kByte: return "torch.uint8";
        default: return c10::toString(dtype);
    }
}

inline std::string describe(const at::Tensor& t) {
    return fmt::format("{} tensor of shape {} and strides {} on {}", dtype_name(t.scalar_type()),
                       fmt::join(t.sizes(), "x"), fmt::join(t.strides(), ","), t.device().str());
}

inline void check_defined(const at::Tensor& t, const char* name) {
    DG_CHECK_INPUT(t.defined(), "{} must be a tensor, got None", name);
}

inline void check_cuda(const at::Tensor& t, const char* name) {
    check_defined(t, name);
    DG_CHECK_INPUT(t.is_cuda(), "{} must be on a CUDA device, got a {}", name, describe(t));
}

inline void check_same_device(const at::Tensor& t, const at::Tensor& ref, const char* name, const char* ref_name) {
    DG_CHECK_INPUT(t.device() == ref.device(), "{} must be on the same device as {} ({}), got {}", name, ref_name,
                   ref.device().str(), t.device().str());
}

inline void check_dtype(const at::Tensor& t, at::ScalarType dtype, const char* name) {
    DG_CHECK_INPUT(t.scalar_type() == dtype, "{} must have dtype {}, got a {}", name, dtype_name(dtype), describe(t));
}

inline void check_dim(const at::Tensor& t, int64_t dim, const char* name) {
    DG_CHECK_INPUT(t.dim() == dim, "{} must be {}-D, got a {}", name, dim, describe(t));
}

// Row-major in the last dimension (stride 1) with the other strides 16-byte aligned, as TMA needs. `layout` (and
// `shape`, when given, e.g. "row-major" and "[K, N]") name the expected layout in the message.
inline void check_k_major_tma(const at::Tensor& t, const char* name, const char* layout = "K-major",
                              const char* shape = nullptr) {
    if (t.numel() == 0)
        return;  // nothing is read
    DG_CHECK_INPUT(t.stride(-1) == 1 || t.size(-1) <= 1,
                   "{} must be contiguous in its last dimension ({}{}{}), got a {}", name, layout, shape ? " " : "",
                   shape ? shape : "", describe(t));
    const int64_t elem = t.element_size();
    for (int64_t d = 0; d + 1 < t.dim(); ++d)
        DG_CHECK_INPUT((t.stride(d) * elem) % 16 == 0 || t.size(d) <= 1,
                       "{}: stride {} of dim {} must be a multiple of 16 bytes for TMA, got a {}", name, t.stride(d), d,
                       describe(t));
    DG_CHECK_INPUT(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 || t.numel() == 0,
                   "{}: data pointer must be 16-byte aligned for TMA, got a {}", name, describe(t));
}

}  // namespace dg
