// Helpers shared by the kernel bindings (bindings_kernels.cc, bindings_ops.cc): zero-copy array
// checks (dtype, C order, writability, shape), activation names and the ISA override. Bindings
// translation units only (built without ISA flags), so plain inline functions are fine here.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/common.h"
#include "kernels/dispatch.h"

namespace edgesdk::bindings {

namespace py = pybind11;
namespace k = edgesdk::kernels;

template <class T>
inline void require_array(const py::array& a, const char* name, bool writable) {
  if (!py::isinstance<py::array_t<T>>(a) || !a.dtype().is(py::dtype::of<T>()))
    throw py::type_error(std::string(name) + ": expected dtype " + std::string(py::str(py::dtype::of<T>())) +
                         ", got " + std::string(py::str(a.dtype())));
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + ": must be C-contiguous");
  if (writable && !a.writeable()) throw py::value_error(std::string(name) + ": must be writable");
}

inline const float* in_f32(const py::array& a, const char* name) {
  require_array<float>(a, name, false);
  return static_cast<const float*>(a.data());
}

inline float* out_f32(py::array& a, const char* name) {
  require_array<float>(a, name, true);
  return static_cast<float*>(a.mutable_data());
}

inline std::vector<size_t> shape_of(const py::array& a) {
  std::vector<size_t> s(static_cast<size_t>(a.ndim()));
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<size_t>(a.shape(static_cast<py::ssize_t>(i)));
  return s;
}

inline void expect_shape(const py::array& a, const std::vector<size_t>& want, const char* name) {
  if (shape_of(a) != want) {
    std::string w = "(";
    for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
    throw py::value_error(std::string(name) + ": expected shape " + w + ")");
  }
}

// An (N, H, W, C) float32 array of shape ``want`` whose pixels are evenly spaced with the channels
// contiguous in each: C-contiguous, or a channel slice of a wider NHWC buffer (the part of a
// channel Concat a convolution writes in place, a group of a grouped convolution). Returns the
// pixel stride in floats (>= C), so that kernels taking in_stride / out_stride read it in place.
inline size_t nhwc_pixel_stride(const py::array& a, const std::vector<size_t>& want, const char* name, bool writable) {
  expect_shape(a, want, name);
  if (!a.dtype().is(py::dtype::of<float>()))
    throw py::value_error(std::string(name) + ": expected dtype float32, got " + std::string(py::str(a.dtype())));
  if (writable && !a.writeable()) throw py::value_error(std::string(name) + ": must be writable");
  const auto item = static_cast<py::ssize_t>(sizeof(float));
  if (a.flags() & py::array::c_style) return want[3];
  const py::ssize_t c_step = a.strides(3), pixel = a.strides(2);
  const auto n = static_cast<py::ssize_t>(want[0]), h = static_cast<py::ssize_t>(want[1]),
             w = static_cast<py::ssize_t>(want[2]), c = static_cast<py::ssize_t>(want[3]);
  const bool ok = (c_step == item || c == 1) && pixel > 0 && pixel % item == 0 && pixel / item >= c &&
                  (a.strides(1) == w * pixel || h == 1) && (a.strides(0) == h * w * pixel || n == 1);
  if (!ok) throw py::value_error(std::string(name) + ": must be C-contiguous or a channel slice of an NHWC buffer");
  return static_cast<size_t>(pixel / item);
}

// (N, C, H, W) or (N, C, HW) float32, C-contiguous: (N, channels, pixels).
inline std::tuple<size_t, size_t, size_t> chw(const py::array& a, const char* name, bool writable) {
  if (!a.dtype().is(py::dtype::of<float>()))
    throw py::value_error(std::string(name) + ": expected dtype float32, got " + std::string(py::str(a.dtype())));
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + ": must be C-contiguous");
  if (writable && !a.writeable()) throw py::value_error(std::string(name) + ": must be writable");
  if (a.ndim() != 3 && a.ndim() != 4) throw py::value_error(std::string(name) + ": must be (N, C, H, W) or (N, C, HW)");
  const auto s = shape_of(a);
  return {s[0], s[1], s.size() == 4 ? s[2] * s[3] : s[2]};
}

// The operands of a CHW 1x1 layer of c input and k output channels: x (N, c, pixels) read, y
// (N, k, pixels) written, threads >= 1. Returns (N, pixels).
inline std::pair<size_t, size_t> chw_call(const py::array& x, const py::array& y, size_t c, size_t k, int64_t threads) {
  const auto [n, xc, hw] = chw(x, "x", false);
  const auto [yn, yk, yhw] = chw(y, "y", true);
  if (xc != c) throw py::value_error("x: " + std::to_string(xc) + " channels, the weights take " + std::to_string(c));
  if (yn != n || yk != k || yhw != hw)
    throw py::value_error("y: expected (" + std::to_string(n) + ", " + std::to_string(k) + ", " + std::to_string(hw) +
                          " pixels), as x and the weights");
  if (threads < 1) throw py::value_error("threads must be >= 1");
  return {n, hw};
}

inline k::Activation make_act(const std::string& name, std::optional<float> alpha, std::optional<float> beta) {
  if (name == "none") return k::act_none();
  if (name == "relu") return k::act_relu();
  if (name == "relu6") return k::act_clip(0.0f, 6.0f);
  if (name == "clip") {
    if (!alpha || !beta) throw py::value_error("clip needs alpha (min) and beta (max)");
    return k::act_clip(*alpha, *beta);
  }
  if (name == "hardswish") return {k::ActKind::HardSwish, alpha.value_or(1.0f / 6.0f), beta.value_or(0.5f)};
  if (name == "hardsigmoid") return k::act_hardsigmoid(alpha.value_or(0.2f), beta.value_or(0.5f));
  if (name == "sigmoid") return k::act_sigmoid();
  if (name == "tanh") return k::act_tanh();
  if (name == "leaky_relu") return k::act_leaky_relu(alpha.value_or(0.01f));
  // The math kinds (no parameters).
  for (k::ActKind kind : {k::ActKind::Gelu, k::ActKind::GeluTanh, k::ActKind::Erf, k::ActKind::Exp, k::ActKind::Log,
                          k::ActKind::Abs, k::ActKind::Sqrt, k::ActKind::Reciprocal, k::ActKind::Neg,
                          k::ActKind::Square, k::ActKind::Silu, k::ActKind::Mish, k::ActKind::Softplus})
    if (name == k::act_name(kind)) return k::act_of(kind);
  throw py::value_error("unknown activation '" + name +
                        "' (none, relu, relu6, clip, hardswish, hardsigmoid, sigmoid, tanh, leaky_relu, gelu, "
                        "gelu_tanh, erf, exp, log, abs, sqrt, reciprocal, neg, square, silu, mish, softplus)");
}

inline const k::KernelTable* table_for(const std::optional<std::string>& isa) {
  return isa ? &k::kernels_for(k::parse_isa(*isa)) : &k::active_kernels();
}

}  // namespace edgesdk::bindings
