// Errors raised by the extension. Python sees:
//   dg::InputError          -> _C.InputError       (a bad argument: dtype, shape, stride, alignment, device, layout;
//                                                   a ValueError, and a RuntimeError as the reference raises there)
//   dg::NotImplementedError -> NotImplementedError (a valid request this build/arch does not serve)
//   dg::RuntimeError        -> RuntimeError        (driver, compiler, cache or environment failures)
// Every message names the argument (or the component) and what was expected.
#pragma once

#include <stdexcept>
#include <string>

#include "format.hpp"

namespace dg {

class InputError : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

class NotImplementedError : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

class RuntimeError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace dg

// Check a user-supplied argument; `...` is a fmt format string and its arguments.
#define DG_CHECK_INPUT(cond, ...)                                  \
    do {                                                           \
        if (!(cond)) [[unlikely]]                                  \
            throw ::dg::InputError(::fmt::format(__VA_ARGS__));    \
    } while (0)

// Check an internal or environment invariant.
#define DG_CHECK(cond, ...)                                                                    \
    do {                                                                                       \
        if (!(cond)) [[unlikely]]                                                              \
            throw ::dg::RuntimeError(::fmt::format("{} ({}:{})", ::fmt::format(__VA_ARGS__),   \
                                                   __FILE__, __LINE__));                       \
    } while (0)
