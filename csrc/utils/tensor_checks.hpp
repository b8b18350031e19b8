// Input validation shared by every API: each check names the argument and what was expected.
#pragma once

#include <ATen/core/Tensor.h>

#include <cctype>
#include <string>

#include "exception.hpp"

namespace dg {

// The name users write in Python ("torch.int8", "torch.float8_e5m2", ...), never the C++ enumerator ("Char",
// "Float8_e5m2"). PyTorch's Python name is the enumerator in lower case except for the types below; the rest
// (bfloat16, bool, float8_*, float4_e2m1fn_x2, uint16..64, int1..7, qint8, bits8, ...) follow that rule.
inline std::string dtype_name(at::ScalarType dtype) {
    switch (dtype) {
        case at::kByte: return "torch.uint8";
        case at::kChar: return "torch.int8";
        case at::kShort: return "torch.int16";
        case at::kInt: return "torch.int32";
        case at::kLong: return "torch.int64";
        case at::kHalf: return "torch.float16";
        case at::kFloat: return "torch.float32";
        case at::kDouble: return "torch.float64";
        case at::kComplexHalf: return "torch.complex32";
        case at::kComplexFloat: return "torch.complex64";
        case at::kComplexDouble: return "torch.complex128";
        default: break;
    }
    std::string name = c10::toString(dtype);
    for (auto& ch: name)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return "torch." + name;
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
