// Python face of the CHW (planar) kernels: depthwise convolution, global average pooling and the
// NCHW <-> NHWC transpose (edgesdk._native.kernels, also re-exported on edgesdk._native). Zero-copy
// like the other bindings; every bad argument is a ValueError (dtype included, so that a caller
// catches one exception type), and the GIL is released while a kernel runs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings_steps.h"
#include "bindings_util.h"
#include "kernels/dispatch.h"
#include "kernels/operators.h"

namespace py = pybind11;
namespace k = edgesdk::kernels;
using namespace edgesdk::bindings;

namespace {

void check_f32(const py::array& a, const char* name, bool writable) {
  if (!a.dtype().is(py::dtype::of<float>()))
    throw py::value_error(std::string(name) + ": expected dtype float32, got " + std::string(py::str(a.dtype())));
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + ": must be C-contiguous");
  if (writable && !a.writeable()) throw py::value_error(std::string(name) + ": must be writable");
}

std::string shape_str(const std::vector<size_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

void expect(const py::array& a, const std::vector<size_t>& want, const char* name) {
  if (shape_of(a) != want)
    throw py::value_error(std::string(name) + ": expected shape " + shape_str(want) + ", got " + shape_str(shape_of(a)));
}

k::ConvGeometry chw_geometry(size_t kh, size_t kw, std::pair<size_t, size_t> stride, std::pair<size_t, size_t> dilation,
                             const std::vector<size_t>& pads) {
  if (pads.size() != 4) throw py::value_error("pads must be [top, left, bottom, right]");
  if (kh == 0 || kw == 0 || stride.first == 0 || stride.second == 0 || dilation.first == 0 || dilation.second == 0)
    throw py::value_error("kernel, stride and dilation must be > 0");
  k::ConvGeometry g;
  g.kh = kh; g.kw = kw;
  g.stride_h = stride.first; g.stride_w = stride.second;
  g.dil_h = dilation.first; g.dil_w = dilation.second;
  g.pad_top = pads[0]; g.pad_left = pads[1]; g.pad_bottom = pads[2]; g.pad_right = pads[3];
  return g;
}

const k::KernelTable* table_or_null(const std::optional<std::string>& isa) {
  if (!isa) return nullptr;
  try {
    return &k::kernels_for(k::parse_isa(*isa));
  } catch (const std::exception& e) {
    throw py::value_error(e.what());
  }
}

// Element size of a transpose: any 1-, 4- or 8-byte dtype moves as bits.
size_t element_size(const py::array& a) {
  const char kind = a.dtype().kind();
  const size_t size = static_cast<size_t>(a.itemsize());
  const bool plain = kind == 'f' || kind == 'i' || kind == 'u' || kind == 'b';
  if (!plain || (size != 1 && size != 4 && size != 8))
    throw py::value_error("transpose_2d: dtype must be a 1-, 4- or 8-byte number (float32, uint8, int64, ...), got " +
                          std::string(py::str(a.dtype())));
  return size;
}

}  // namespace

void register_chw_kernels(py::module_& km) {
  km.def("depthwise_conv_chw", [](const py::array& x, const py::array& w, std::optional<py::array> bias, py::array& y,
                                  std::pair<size_t, size_t> stride, std::pair<size_t, size_t> dilation,
                                  std::vector<size_t> pads, const std::string& act_name, std::optional<float> act_alpha,
                                  std::optional<float> act_beta, size_t threads, std::optional<std::string> isa) {
    check_f32(x, "x", false);
    check_f32(w, "w", false);
    check_f32(y, "y", true);
    if (x.ndim() != 4) throw py::value_error("x must be (N, C, H, W), got " + shape_str(shape_of(x)));
    if (w.ndim() != 3) throw py::value_error("w must be (C*multiplier, KH, KW), got " + shape_str(shape_of(w)));
    const auto xs = shape_of(x), ws = shape_of(w);
    if (xs[1] == 0 || ws[0] == 0 || ws[0] % xs[1] != 0)
      throw py::value_error("w.shape[0] must be a positive multiple of C = " + std::to_string(xs[1]));
    const size_t mult = ws[0] / xs[1];
    const k::ConvGeometry g = chw_geometry(ws[1], ws[2], stride, dilation, pads);
    size_t oh, ow;
    try {
      oh = k::conv_output_size(xs[2], g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
      ow = k::conv_output_size(xs[3], g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
    } catch (const std::exception& e) {
      throw py::value_error(e.what());
    }
    expect(y, {xs[0], ws[0], oh, ow}, "y");
    const float* b = nullptr;
    if (bias) {
      check_f32(*bias, "bias", false);
      expect(*bias, {ws[0]}, "bias");
      b = static_cast<const float*>(bias->data());
    }
    const k::Activation ac = make_act(act_name, act_alpha, act_beta);
    const k::KernelTable* t = table_or_null(isa);
    const float* xp = static_cast<const float*>(x.data());
    const float* wp = static_cast<const float*>(w.data());
    float* yp = static_cast<float*>(y.mutable_data());
    const char* name;
    {
      py::gil_scoped_release release;
      name = k::depthwise_conv_chw(xp, xs[0], xs[1], xs[2], xs[3], mult, g, wp, b, yp, ac, threads, t);
    }
    return std::string(name);
  }, py::arg("x"), py::arg("w"), py::arg("bias"), py::arg("y"), py::arg("stride") = std::pair<size_t, size_t>{1, 1},
     py::arg("dilation") = std::pair<size_t, size_t>{1, 1}, py::arg("pads") = std::vector<size_t>{0, 0, 0, 0},
     py::arg("act_name") = "none", py::arg("act_alpha") = py::none(), py::arg("act_beta") = py::none(),
     py::arg("threads") = 1, py::arg("isa") = py::none(),
     "CHW depthwise convolution: x (N, C, H, W), w (C*m, KH, KW), bias (C*m,) or None, y (N, C*m, OH, OW); "
     "pads [top, left, bottom, right]. Returns the kernel's name. isa: force a level (tests).");

  km.def("depthwise_chw_kernel", [](size_t kh, size_t kw, std::pair<size_t, size_t> stride,
                                    std::pair<size_t, size_t> dilation, std::vector<size_t> pads, size_t multiplier,
                                    std::optional<std::string> isa) {
    if (multiplier == 0) throw py::value_error("multiplier must be > 0");
    const k::ConvGeometry g = chw_geometry(kh, kw, stride, dilation, pads);
    const k::KernelTable* t = table_or_null(isa);
    const char* name = nullptr;
    k::depthwise_chw_kernel(g, t != nullptr ? *t : k::active_kernels(), &name);
    return std::string(name);
  }, py::arg("kh"), py::arg("kw"), py::arg("stride") = std::pair<size_t, size_t>{1, 1},
     py::arg("dilation") = std::pair<size_t, size_t>{1, 1}, py::arg("pads") = std::vector<size_t>{0, 0, 0, 0},
     py::arg("multiplier") = 1, py::arg("isa") = py::none(),
     "The kernel depthwise_conv_chw runs for this geometry (the multiplier does not change it).");

  def_kernel(km, "global_avgpool_chw", [](const py::array& x, py::array& y, const std::string& act_name,
                                  std::optional<float> act_alpha, std::optional<float> act_beta, size_t threads,
                                  std::optional<std::string> isa) {
    check_f32(x, "x", false);
    check_f32(y, "y", true);
    if (x.ndim() != 3 && x.ndim() != 4) throw py::value_error("x must be (N, C, H, W) or (N, C, HW), got " + shape_str(shape_of(x)));
    const auto xs = shape_of(x);
    const size_t hw = x.ndim() == 4 ? xs[2] * xs[3] : xs[2];
    if (hw == 0) throw py::value_error("x: empty planes");
    if (shape_of(y) != std::vector<size_t>{xs[0], xs[1]} && shape_of(y) != std::vector<size_t>{xs[0], xs[1], 1, 1})
      throw py::value_error("y: expected shape " + shape_str({xs[0], xs[1]}) + " or " + shape_str({xs[0], xs[1], 1, 1}) +
                            ", got " + shape_str(shape_of(y)));
    const k::Activation ac = make_act(act_name, act_alpha, act_beta);
    const k::KernelTable* t = table_or_null(isa);
    const float* xp = static_cast<const float*>(x.data());
    float* yp = static_cast<float*>(y.mutable_data());
    return make_step([xp, xs, hw, yp, ac, threads, t] { k::global_avgpool_chw(xp, xs[0], xs[1], hw, yp, ac, threads, t); },
                     x, y);
  }, py::arg("x"), py::arg("y"), py::arg("act_name") = "none", py::arg("act_alpha") = py::none(),
     py::arg("act_beta") = py::none(), py::arg("threads") = 1, py::arg("isa") = py::none(),
     "(N, C, H, W) or (N, C, HW) -> (N, C) or (N, C, 1, 1) mean, activation fused.");

  def_kernel(km, "transpose_2d", [](const py::array& src, py::array& dst, size_t threads, std::optional<std::string> isa) {
    const size_t elem = element_size(src);
    if (!src.dtype().is(dst.dtype()))
      throw py::value_error("transpose_2d: dst dtype " + std::string(py::str(dst.dtype())) + " != src dtype " +
                            std::string(py::str(src.dtype())));
    if (!(src.flags() & py::array::c_style) || !(dst.flags() & py::array::c_style))
      throw py::value_error("transpose_2d: src and dst must be C-contiguous");
    if (!dst.writeable()) throw py::value_error("transpose_2d: dst must be writable");
    if (src.ndim() != 3) throw py::value_error("transpose_2d: src must be (N, R, C), got " + shape_str(shape_of(src)));
    const auto ss = shape_of(src);
    expect(dst, {ss[0], ss[2], ss[1]}, "dst");
    const k::KernelTable* t = table_or_null(isa);
    const void* sp = src.data();
    void* dp = dst.mutable_data();
    if (sp == dp && src.size() > 0) throw py::value_error("transpose_2d: src and dst must not be the same buffer");
    return make_step([sp, dp, ss, elem, threads, t] { k::transpose_2d(sp, dp, ss[0], ss[1], ss[2], elem, threads, t); },
                     src, dst);
  }, py::arg("src"), py::arg("dst"), py::arg("threads") = 1, py::arg("isa") = py::none(),
     "dst[i] = src[i].T: src (N, R, C) -> dst (N, C, R), C-contiguous, same dtype (1-, 4- or 8-byte elements).");
}
