// Vectorcall bindings (METH_FASTCALL | METH_KEYWORDS) for the hot entry points, and the one mapping of the
// extension's C++ exceptions to Python ones (shared with the pybind11 bindings).
//
// Why: pybind11's argument casters cost 1.67 us for fp8_gemm_nt's nine arguments (two tuples of tensors, an
// optional tensor, three optional int lists, a string, a bool; each tensor cast copies a handle, ~0.13 us each) and
// 3.8 us with two of them by keyword; reading them straight from the CPython objects, tensors borrowed, costs 0.22 /
// 0.30 us, against 0.14 us for an empty call (tools/measure_binding_overhead.py, PyTorch 2.13, a CPU machine;
// docs/design.md, "Host cost of a cached call"). Binding rules are Python's: positional, then keyword, each parameter once, missing required ones
// and unknown keywords a TypeError that names them; a wrong type is a TypeError naming the argument and what was
// expected.
#pragma once

#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>

#include <array>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

#include "exception.hpp"

namespace dg::fast_call {

// A Python TypeError (an argument of the wrong type, or a call that does not bind).
class TypeError : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

// The Python type of dg::NotImplementedError (the module's NotImplementedError, a subclass of the built-in one, once
// the module registered it).
inline PyObject*& not_implemented_error_type() {
    static PyObject* type = PyExc_NotImplementedError;
    return type;
}

// The Python type of dg::InputError (the module's InputError, a ValueError that is also a RuntimeError, once the
// module created it).
inline PyObject*& input_error_type() {
    static PyObject* type = PyExc_ValueError;
    return type;
}

// Sets the Python error for the extension's own exceptions (see exception.hpp for the mapping); false for any
// other exception (the pybind11 bindings leave those to pybind11's translators).
inline bool set_dg_python_error(std::exception_ptr error) {
    try {
        std::rethrow_exception(error);
    } catch (const TypeError& e) {
        PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const InputError& e) {
        PyErr_SetString(input_error_type(), e.what());
    } catch (const NotImplementedError& e) {
        PyErr_SetString(not_implemented_error_type(), e.what());
    } catch (const RuntimeError& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (...) {
        return false;
    }
    return true;
}

// Sets the Python error for any exception (the vectorcall bindings): the extension's own as above, a pending
// Python error as it is, anything else a RuntimeError.
inline void set_python_error(std::exception_ptr error) {
    if (set_dg_python_error(error))
        return;
    try {
        std::rethrow_exception(error);
    } catch (pybind11::error_already_set& e) {
        e.restore();
    } catch (const std::bad_alloc& e) {
        PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (...) {
        PyErr_SetString(PyExc_RuntimeError, "deep_gemm: unknown C++ exception");
    }
}

// The arguments of one call bound to the parameters `names` (borrowed references; null: not given).
template <size_t N>
class Args {
public:
    Args(const char* function, const std::array<const char*, N>& names, size_t num_required, PyObject* const* args,
         Py_ssize_t nargs, PyObject* kwnames)
        : function_(function), names_(names) {
        const size_t num_positional = PyVectorcall_NARGS(nargs);
        if (num_positional > N)
            throw TypeError(fmt::format("{}() takes at most {} arguments ({} given)", function, N, num_positional));
        for (size_t i = 0; i < num_positional; ++i)
            values_[i] = args[i];
        const Py_ssize_t num_keywords = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
        for (Py_ssize_t j = 0; j < num_keywords; ++j) {
            const char* keyword = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, j));
            if (keyword == nullptr)
                throw pybind11::error_already_set();
            const size_t i = index_of(keyword);
            if (values_[i] != nullptr)
                throw TypeError(fmt::format("{}() got multiple values for argument '{}'", function, keyword));
            values_[i] = args[num_positional + j];
        }
        for (size_t i = 0; i < num_required; ++i) {
            if (values_[i] == nullptr)
                throw TypeError(fmt::format("{}() missing required argument '{}'", function, names[i]));
        }
    }

    // A tensor (borrowed: valid for the call).
    const at::Tensor& tensor(size_t i) const { return tensor_of(values_[i], names_[i]); }

    // A pair (tuple or list of two) of tensors, e.g. (A, sfa) (both borrowed).
    std::pair<const at::Tensor&, const at::Tensor&> pair(size_t i) const {
        PyObject* obj = values_[i];
        const bool sequence = PyTuple_Check(obj) || PyList_Check(obj);
        if (!sequence || PySequence_Fast_GET_SIZE(obj) != 2) [[unlikely]]
            throw TypeError(fmt::format("{}(): {} must be a pair (tensor, scales), got {}", function_, names_[i],
                                        Py_TYPE(obj)->tp_name));
        return {tensor_of(PySequence_Fast_GET_ITEM(obj, 0), names_[i], 0),
                tensor_of(PySequence_Fast_GET_ITEM(obj, 1), names_[i], 1)};
    }

    // None (or not given) or a tensor.
    std::optional<at::Tensor> optional_tensor(size_t i) const {
        if (is_none(i))
            return std::nullopt;
        return tensor(i);
    }

    // None (or not given) or a tuple / list of ints.
    std::optional<std::vector<int64_t>> optional_ints(size_t i) const {
        if (is_none(i))
            return std::nullopt;
        PyObject* obj = values_[i];
        if (!PyTuple_Check(obj) && !PyList_Check(obj))
            throw TypeError(fmt::format("{}(): {} must be None or a tuple of ints, got {}", function_, names_[i],
                                        Py_TYPE(obj)->tp_name));
        std::vector<int64_t> out(PySequence_Fast_GET_SIZE(obj));
        for (size_t j = 0; j < out.size(); ++j) {
            PyObject* item = PySequence_Fast_GET_ITEM(obj, j);
            if (!PyLong_Check(item) || PyBool_Check(item))
                throw TypeError(fmt::format("{}(): {} must be a tuple of ints, item {} is a {}", function_, names_[i],
                                            j, Py_TYPE(item)->tp_name));
            out[j] = PyLong_AsLongLong(item);
            if (out[j] == -1 && PyErr_Occurred())
                throw pybind11::error_already_set();
        }
        return out;
    }

    // A str (`fallback` when not given).
    std::string str(size_t i, const char* fallback) const {
        PyObject* obj = values_[i];
        if (obj == nullptr)
            return fallback;
        if (!PyUnicode_Check(obj))
            throw TypeError(fmt::format("{}(): {} must be a str, got {}", function_, names_[i], Py_TYPE(obj)->tp_name));
        Py_ssize_t size = 0;
        const char* data = PyUnicode_AsUTF8AndSize(obj, &size);
        if (data == nullptr)
            throw pybind11::error_already_set();
        return std::string(data, static_cast<size_t>(size));
    }

    // A bool (`fallback` when not given): True / False, or an object with __bool__ (as pybind11 converts).
    bool flag(size_t i, bool fallback) const {
        PyObject* obj = values_[i];
        if (obj == nullptr)
            return fallback;
        if (obj == Py_True || obj == Py_False)
            return obj == Py_True;
        const auto* number = Py_TYPE(obj)->tp_as_number;
        if (obj == Py_None || number == nullptr || number->nb_bool == nullptr)
            throw TypeError(fmt::format("{}(): {} must be a bool, got {}", function_, names_[i], Py_TYPE(obj)->tp_name));
        const int truth = PyObject_IsTrue(obj);
        if (truth < 0)
            throw pybind11::error_already_set();
        return truth != 0;
    }

    bool is_none(size_t i) const { return values_[i] == nullptr || values_[i] == Py_None; }

private:
    size_t index_of(const char* keyword) const {
        for (size_t i = 0; i < N; ++i) {
            if (std::strcmp(names_[i], keyword) == 0)
                return i;
        }
        throw TypeError(fmt::format("{}() got an unexpected keyword argument '{}'", function_, keyword));
    }

    // (`item` >= 0: the argument is a pair, obj its item; the name is formatted only for the error)
    const at::Tensor& tensor_of(PyObject* obj, const char* name, int item = -1) const {
        if (!THPVariable_Check(obj)) [[unlikely]] {
            const auto full_name = item < 0 ? std::string(name) : fmt::format("{}[{}]", name, item);
            throw TypeError(fmt::format("{}(): {} must be a torch.Tensor, got {}", function_, full_name,
                                        Py_TYPE(obj)->tp_name));
        }
        return THPVariable_Unpack(obj);
    }

    const char* function_;
    const std::array<const char*, N>& names_;
    std::array<PyObject*, N> values_{};
};

// The CPython entry of a function `Body(args, nargs, kwnames)` that returns None: exceptions become Python errors.
template <void (*Body)(PyObject* const*, Py_ssize_t, PyObject*)>
PyObject* entry(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    try {
        Body(args, nargs, kwnames);
    } catch (...) {
        set_python_error(std::current_exception());
        return nullptr;
    }
    Py_RETURN_NONE;
}

// Adds `def` (static storage: CPython keeps a pointer to it) to `module` as a built-in function.
inline void add_function(pybind11::module_& module, PyMethodDef& def) {
    PyObject* function = PyCFunction_NewEx(&def, nullptr, module.attr("__name__").ptr());
    if (function == nullptr)
        throw pybind11::error_already_set();
    module.add_object(def.ml_name, pybind11::reinterpret_steal<pybind11::object>(function));
}

}  // namespace dg::fast_call
