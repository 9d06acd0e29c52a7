// edgesdk._native.kernels, continued: the int8 (qu8) bindings of operators_qu8.h. Same rules as
// bindings_kernels.cc: zero-copy C-contiguous arrays of the stated dtype (uint8 activations, int8
// weights, int32 bias / multipliers / shifts; anything else is a TypeError naming the argument, never
// a silent copy), outputs written in place, the GIL released while a kernel runs; shapes, zero points
// (0..255), clamps (0 <= qmin <= qmax <= 255), multipliers (int32) and shifts ([-31, 30]) are checked
// first (ValueError). isa= forces a kernel level (tests).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings_util.h"
#include "kernels/operators_qu8.h"

namespace py = pybind11;
namespace k = edgesdk::kernels;
using namespace edgesdk::bindings;

namespace {

using Pair = std::pair<size_t, size_t>;

k::ConvGeometry geometry(Pair kernel, Pair stride, Pair dilation, const std::vector<size_t>& pads) {
  if (pads.size() != 4) throw py::value_error("pads must be (top, left, bottom, right)");
  k::ConvGeometry g;
  g.kh = kernel.first; g.kw = kernel.second;
  g.stride_h = stride.first; g.stride_w = stride.second;
  g.dil_h = dilation.first; g.dil_w = dilation.second;
  g.pad_top = pads[0]; g.pad_left = pads[1]; g.pad_bottom = pads[2]; g.pad_right = pads[3];
  return g;
}

uint8_t byte_arg(int64_t v, const char* name) {
  if (v < 0 || v > 255) throw py::value_error(std::string(name) + " must be in [0, 255], got " + std::to_string(v));
  return static_cast<uint8_t>(v);
}

std::pair<uint8_t, uint8_t> clamp_args(int64_t qmin, int64_t qmax) {
  const uint8_t lo = byte_arg(qmin, "qmin"), hi = byte_arg(qmax, "qmax");
  if (lo > hi) throw py::value_error("qmin must be <= qmax");
  return {lo, hi};
}

int32_t multiplier_arg(int64_t v, const char* name) {
  if (v < INT32_MIN || v > INT32_MAX) throw py::value_error(std::string(name) + " must fit int32");
  return static_cast<int32_t>(v);
}

int32_t shift_arg(int64_t v, const char* name) {
  if (v < -31 || v > 30) throw py::value_error(std::string(name) + " must be in [-31, 30], got " + std::to_string(v));
  return static_cast<int32_t>(v);
}

const uint8_t* in_u8(const py::array& a, const char* name) {
  require_array<uint8_t>(a, name, false);
  return static_cast<const uint8_t*>(a.data());
}

uint8_t* out_u8(py::array& a, const char* name) {
  require_array<uint8_t>(a, name, true);
  return static_cast<uint8_t*>(a.mutable_data());
}

// int32 vector of n values.
const int32_t* int32_vector(const py::array& a, size_t n, const char* name) {
  require_array<int32_t>(a, name, false);
  expect_shape(a, {n}, name);
  return static_cast<const int32_t*>(a.data());
}

// Shifts of n channels, each in [-31, 30].
const int32_t* shift_vector(const py::array& a, size_t n, const char* name) {
  const int32_t* p = int32_vector(a, n, name);
  for (size_t i = 0; i < n; ++i) shift_arg(p[i], name);
  return p;
}

// A layer's requantization arguments, checked in this order: bias (optional) and the multiplier
// and shift of each of `channels` output channels, the input and output zero points, the clamp.
struct LayerRequant {
  const int32_t *bias, *multiplier, *shift;
  uint8_t x_zp, y_zp, qmin, qmax;
};

LayerRequant layer_requant(const std::optional<py::array>& bias, const py::array& multiplier, const py::array& shift,
                           size_t channels, int64_t input_zero_point, int64_t output_zero_point, int64_t qmin,
                           int64_t qmax) {
  LayerRequant r{};
  r.bias = bias ? int32_vector(*bias, channels, "bias") : nullptr;
  r.multiplier = int32_vector(multiplier, channels, "multiplier");
  r.shift = shift_vector(shift, channels, "shift");
  r.x_zp = byte_arg(input_zero_point, "input_zero_point");
  r.y_zp = byte_arg(output_zero_point, "output_zero_point");
  std::tie(r.qmin, r.qmax) = clamp_args(qmin, qmax);
  return r;
}

k::Broadcast broadcast_arg(const std::string& s) {
  if (s == "none") return k::Broadcast::None;
  if (s == "channel") return k::Broadcast::PerChannel;
  if (s == "scalar") return k::Broadcast::Scalar;
  throw py::value_error("broadcast must be 'none', 'channel' or 'scalar', got '" + s + "'");
}

// a (rows, C) (any leading dims), b by the broadcast, y a's shape: returns (rows, C).
std::pair<size_t, size_t> binary_shapes(const py::array& a, const py::array& b, const py::array& y, k::Broadcast bc) {
  if (a.ndim() < 1) throw py::value_error("a must have at least one dimension");
  const size_t c = static_cast<size_t>(a.shape(a.ndim() - 1)), total = static_cast<size_t>(a.size());
  const size_t rows = c == 0 ? 0 : total / c;
  if (bc == k::Broadcast::None) expect_shape(b, shape_of(a), "b");
  if (bc == k::Broadcast::PerChannel) expect_shape(b, {c}, "b");
  if (bc == k::Broadcast::Scalar && b.size() != 1) throw py::value_error("b: expected one value (broadcast='scalar')");
  expect_shape(y, shape_of(a), "y");
  return {rows, c};
}

// A convolution plan holding (a reference to) its packed weights. run() may rebuild the plan's
// indirection buffer, so concurrent runs of one plan take turns.
struct PyQu8ConvPlan {
  std::shared_ptr<k::PackedQu8Weights> weights;
  k::Qu8ConvPlan plan;
  size_t n, h, w, c;
  std::mutex mutex;
};


// QuantizeLinear's output y (uint8 or int8, writable, contiguous): its code range, after checking
// that zero_point is a code of that type.
std::pair<int32_t, int32_t> quantize_codes(py::array& y, double zero_point) {
  const bool is_u8 = y.dtype().is(py::dtype::of<uint8_t>());
  const bool is_i8 = y.dtype().is(py::dtype::of<int8_t>());
  if (!is_u8 && !is_i8) throw py::type_error("y: expected dtype uint8 or int8, got " + std::string(py::str(y.dtype())));
  if (is_u8) require_array<uint8_t>(y, "y", true);
  else require_array<int8_t>(y, "y", true);
  const int32_t lo = is_u8 ? 0 : -128, hi = is_u8 ? 255 : 127;
  const float z = static_cast<float>(zero_point);
  if (!(z == std::nearbyint(z) && z >= lo && z <= hi))
    throw py::value_error("zero_point must be an integer in the output dtype's range");
  return {lo, hi};
}

}  // namespace

void register_qu8_kernels(py::module_& km) {
  py::class_<k::PackedQu8Weights, std::shared_ptr<k::PackedQu8Weights>>(
      km, "PackedQu8Weights", "int8 weights packed for one level's qu8 GEMM, the input zero point folded into the bias.")
      .def_property_readonly("n", [](const k::PackedQu8Weights& w) { return w.n; })
      .def_property_readonly("k", [](const k::PackedQu8Weights& w) { return w.k; })
      .def_property_readonly("kernel", [](const k::PackedQu8Weights& w) { return Pair{w.kh, w.kw}; })
      .def_property_readonly("isa", [](const k::PackedQu8Weights& w) { return std::string(w.table->name); })
      .def_property_readonly("nr", [](const k::PackedQu8Weights& w) { return w.nr; })
      .def_property_readonly("mr", [](const k::PackedQu8Weights& w) { return w.mr; })
      .def_property_readonly("kr", [](const k::PackedQu8Weights& w) { return w.kr; })
      .def_property_readonly("kernel_name", [](const k::PackedQu8Weights& w) { return std::string(w.kernel_name()); })
      .def_property_readonly("input_zero_point", [](const k::PackedQu8Weights& w) { return w.input_zero_point; })
      .def_property_readonly("output_zero_point", [](const k::PackedQu8Weights& w) { return w.out.zero_point; })
      .def("__repr__", [](const k::PackedQu8Weights& w) {
        return "<PackedQu8Weights n=" + std::to_string(w.n) + " k=" + std::to_string(w.k) + " kernel=(" +
               std::to_string(w.kh) + ", " + std::to_string(w.kw) + ") " + w.kernel_name() + ">";
      });

  km.def("pack_qu8_conv", [](const py::array& w, std::optional<py::array> bias, int64_t input_zero_point,
                             const py::array& multiplier, const py::array& shift, int64_t output_zero_point,
                             int64_t qmin, int64_t qmax, std::optional<std::string> isa) {
    require_array<int8_t>(w, "w", false);
    if (w.ndim() != 4 && w.ndim() != 2) throw py::value_error("w must be (N, KH, KW, C) (OHWI) or (N, K)");
    const auto ws = shape_of(w);
    const size_t n = ws[0], kh = w.ndim() == 4 ? ws[1] : 1, kw = w.ndim() == 4 ? ws[2] : 1;
    const size_t kk = w.ndim() == 4 ? ws[1] * ws[2] * ws[3] : ws[1];
    if (n == 0 || kk == 0) throw py::value_error("w must not be empty");
    const LayerRequant r = layer_requant(bias, multiplier, shift, n, input_zero_point, output_zero_point, qmin,
                                        qmax);
    const k::KernelTable* t = table_for(isa);
    const auto* wp = static_cast<const int8_t*>(w.data());
    return std::make_shared<k::PackedQu8Weights>(
        k::pack_qu8_gemm_weights(wp, n, kk, r.bias, r.x_zp, r.multiplier, r.shift, r.y_zp, r.qmin, r.qmax, t, kh, kw));
  }, py::arg("w"), py::arg("bias"), py::arg("input_zero_point"), py::arg("multiplier"), py::arg("shift"),
     py::arg("output_zero_point"), py::arg("qmin") = 0, py::arg("qmax") = 255, py::arg("isa") = py::none(),
     "Packs int8 weights (N, KH, KW, C) (OHWI) or (N, K), symmetric per output channel, for the level's qu8 "
     "GEMM: acc = bias + sum (x - input_zero_point) * w, y = clamp(requantize(acc, multiplier, shift) + "
     "output_zero_point, qmin, qmax) per output channel (TFLite's QuantizeMultiplier convention).");

  km.def("qu8_gemm", [](const py::array& a, const k::PackedQu8Weights& w, py::array& y, size_t threads) {
    const uint8_t* ap = in_u8(a, "a");
    if (a.ndim() != 2 || static_cast<size_t>(a.shape(1)) != w.k) throw py::value_error("a must be (M, K)");
    if (w.kh != 1 || w.kw != 1) throw py::value_error("the weights are packed for a convolution kernel, not a GEMM");
    const size_t m = static_cast<size_t>(a.shape(0));
    expect_shape(y, {m, w.n}, "y");
    uint8_t* yp = out_u8(y, "y");
    py::gil_scoped_release release;
    k::qu8_gemm(ap, m, w.k, w, yp, w.n, threads);
  }, py::arg("a"), py::arg("packed"), py::arg("y"), py::arg("threads") = 1,
     "y[M, N] = requantized a[M, K] (uint8) x W (Gemm / MatMul with constant weights).");

  py::class_<PyQu8ConvPlan>(km, "Qu8ConvPlan")
      .def(py::init([](std::shared_ptr<k::PackedQu8Weights> w, std::vector<size_t> input_shape, Pair kernel,
                       Pair stride, Pair dilation, std::vector<size_t> pads) {
             if (input_shape.size() != 4) throw py::value_error("input_shape must be (N, H, W, C)");
             const k::ConvGeometry g = geometry(kernel, stride, dilation, pads);
             return new PyQu8ConvPlan{w, k::Qu8ConvPlan(input_shape[0], input_shape[1], input_shape[2], input_shape[3], g, *w),
                                      input_shape[0], input_shape[1], input_shape[2], input_shape[3], {}};
           }),
           py::arg("packed"), py::arg("input_shape"), py::arg("kernel"), py::arg("stride") = Pair{1, 1},
           py::arg("dilation") = Pair{1, 1}, py::arg("pads") = std::vector<size_t>{0, 0, 0, 0},
           "Plan for an NHWC uint8 convolution (groups 1) with weights from pack_qu8_conv for this kernel.")
      .def_property_readonly("output_shape", [](const PyQu8ConvPlan& p) {
        return std::vector<size_t>{p.n, p.plan.out_h(), p.plan.out_w(), p.weights->n};
      })
      .def_property_readonly("is_gemm", [](const PyQu8ConvPlan& p) { return p.plan.is_gemm(); })
      .def("run", [](PyQu8ConvPlan& p, const py::array& x, py::array& y, size_t threads, size_t x_channel,
                     size_t y_channel) {
        // x (N, H, W, >= x_channel + C) and y (N, OH, OW, >= y_channel + N_out): the plan reads and
        // writes its channels from those offsets on (one group of a grouped convolution).
        if (x.ndim() != 4 || y.ndim() != 4) throw py::value_error("x and y must be NHWC");
        const size_t xc = static_cast<size_t>(x.shape(3)), yc = static_cast<size_t>(y.shape(3));
        if (x_channel + p.c > xc)
          throw py::value_error("x: expected shape (N, H, W, >= x_channel + " + std::to_string(p.c) + "), got " +
                                std::to_string(xc) + " channels from x_channel " + std::to_string(x_channel));
        if (y_channel + p.weights->n > yc)
          throw py::value_error("y: expected shape (N, OH, OW, >= y_channel + " + std::to_string(p.weights->n) +
                                "), got " + std::to_string(yc) + " channels from y_channel " + std::to_string(y_channel));
        expect_shape(x, {p.n, p.h, p.w, xc}, "x");
        expect_shape(y, {p.n, p.plan.out_h(), p.plan.out_w(), yc}, "y");
        const uint8_t* xp = in_u8(x, "x");
        uint8_t* yp = out_u8(y, "y");
        // The kernels read each pixel's channels in whole 4-byte words (their weights past C are 0):
        // from an offset, the last pixel's last word must still lie inside the array (the plan's
        // row guard covers the array's end only from offset 0).
        if (x_channel != 0 && x_channel + (p.c + 3) / 4 * 4 > xc)
          throw py::value_error("x_channel: the plan's channels, rounded up to 4, run past the array's");
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(p.mutex);
        p.plan.run(xp + x_channel, yp + y_channel, threads, xc, yc);
      }, py::arg("x"), py::arg("y"), py::arg("threads") = 1, py::arg("x_channel") = 0, py::arg("y_channel") = 0);

  km.def("qu8_depthwise_conv", [](const py::array& x, const py::array& w, std::optional<py::array> bias,
                                  int64_t input_zero_point, const py::array& multiplier, const py::array& shift,
                                  int64_t output_zero_point, int64_t qmin, int64_t qmax, py::array& y, Pair stride,
                                  Pair dilation, std::vector<size_t> pads, size_t threads,
                                  std::optional<std::string> isa) {
    const uint8_t* xp = in_u8(x, "x");
    require_array<int8_t>(w, "w", false);
    if (x.ndim() != 4 || w.ndim() != 3) throw py::value_error("x must be (N, H, W, C) and w (KH, KW, C*multiplier)");
    const auto xs = shape_of(x), ws = shape_of(w);
    if (xs[3] == 0 || ws[2] % xs[3] != 0) throw py::value_error("w's last dim must be a multiple of C");
    const size_t mult = ws[2] / xs[3], oc = ws[2];
    if (mult == 0) throw py::value_error("w must not be empty");
    const k::ConvGeometry g = geometry({ws[0], ws[1]}, stride, dilation, pads);
    const size_t oh = k::conv_output_size(xs[1], g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
    const size_t ow = k::conv_output_size(xs[2], g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
    const LayerRequant r = layer_requant(bias, multiplier, shift, oc, input_zero_point, output_zero_point, qmin,
                                        qmax);
    expect_shape(y, {xs[0], oh, ow, oc}, "y");
    uint8_t* yp = out_u8(y, "y");
    const auto* wp = static_cast<const int8_t*>(w.data());
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::qu8_depthwise_conv(xp, xs[0], xs[1], xs[2], xs[3], mult, g, wp, r.bias, r.x_zp, r.multiplier, r.shift, r.y_zp,
                          r.qmin, r.qmax, yp, threads, t);
  }, py::arg("x"), py::arg("w"), py::arg("bias"), py::arg("input_zero_point"), py::arg("multiplier"), py::arg("shift"),
     py::arg("output_zero_point"), py::arg("qmin"), py::arg("qmax"), py::arg("y"), py::arg("stride") = Pair{1, 1},
     py::arg("dilation") = Pair{1, 1}, py::arg("pads") = std::vector<size_t>{0, 0, 0, 0}, py::arg("threads") = 1,
     py::arg("isa") = py::none(),
     "NHWC uint8 depthwise convolution, w int8 (KH, KW, C*multiplier): padding taps add 0 (they stand for "
     "input_zero_point); multiplier / shift per output channel.");

  py::class_<k::Qu8DepthwisePlan, std::shared_ptr<k::Qu8DepthwisePlan>>(
      km, "Qu8DepthwisePlan",
      "An NHWC uint8 depthwise convolution for one input shape with its weights packed once (run keeps no "
      "state: concurrent runs are safe).")
      .def(py::init([](const py::array& w, std::optional<py::array> bias, int64_t input_zero_point,
                       const py::array& multiplier, const py::array& shift, int64_t output_zero_point, int64_t qmin,
                       int64_t qmax, std::vector<size_t> input_shape, Pair stride, Pair dilation,
                       std::vector<size_t> pads, std::optional<std::string> isa) {
             require_array<int8_t>(w, "w", false);
             if (w.ndim() != 3) throw py::value_error("w must be (KH, KW, C*multiplier)");
             if (input_shape.size() != 4) throw py::value_error("input_shape must be (N, H, W, C)");
             const auto ws = shape_of(w);
             const size_t c = input_shape[3];
             if (c == 0 || ws[2] == 0 || ws[2] % c != 0) throw py::value_error("w's last dim must be a multiple of C");
             const size_t oc = ws[2];
             const k::ConvGeometry g = geometry({ws[0], ws[1]}, stride, dilation, pads);
             const LayerRequant r = layer_requant(bias, multiplier, shift, oc, input_zero_point, output_zero_point, qmin,
                                                 qmax);
             const k::KernelTable* t = table_for(isa);
             return std::make_shared<k::Qu8DepthwisePlan>(input_shape[0], input_shape[1], input_shape[2], c, oc / c, g,
                                                          static_cast<const int8_t*>(w.data()), r.bias, r.x_zp,
                                                          r.multiplier, r.shift, r.y_zp, r.qmin, r.qmax, t);
           }),
           py::arg("w"), py::arg("bias"), py::arg("input_zero_point"), py::arg("multiplier"), py::arg("shift"),
           py::arg("output_zero_point"), py::arg("qmin"), py::arg("qmax"), py::arg("input_shape"),
           py::arg("stride") = Pair{1, 1}, py::arg("dilation") = Pair{1, 1},
           py::arg("pads") = std::vector<size_t>{0, 0, 0, 0}, py::arg("isa") = py::none(),
           "Plans qu8_depthwise_conv for inputs of input_shape (N, H, W, C); w int8 (KH, KW, C*multiplier).")
      .def_property_readonly("output_shape", [](const k::Qu8DepthwisePlan& p) {
        return std::vector<size_t>{p.batch(), p.out_h(), p.out_w(), p.out_channels()};
      })
      .def_property_readonly("kernel_name", [](const k::Qu8DepthwisePlan& p) { return std::string(p.kernel_name()); })
      .def("run", [](const k::Qu8DepthwisePlan& p, const py::array& x, py::array& y, size_t threads) {
        expect_shape(x, {p.batch(), p.in_h(), p.in_w(), p.in_channels()}, "x");
        expect_shape(y, {p.batch(), p.out_h(), p.out_w(), p.out_channels()}, "y");
        const uint8_t* xp = in_u8(x, "x");
        uint8_t* yp = out_u8(y, "y");
        py::gil_scoped_release release;
        p.run(xp, yp, threads);
      }, py::arg("x"), py::arg("y"), py::arg("threads") = 1);

  km.def("quantize_linear", [](const py::array& x, double scale, double zero_point, py::array& y, size_t threads,
                               std::optional<std::string> isa) {
    require_array<float>(x, "x", false);
    const auto [lo, hi] = quantize_codes(y, zero_point);
    expect_shape(y, shape_of(x), "y");
    const float s = static_cast<float>(scale), z = static_cast<float>(zero_point);
    const auto* xp = static_cast<const float*>(x.data());
    auto* yp = static_cast<uint8_t*>(y.mutable_data());
    const k::KernelTable* t = table_for(isa);
    const size_t count = static_cast<size_t>(x.size());
    py::gil_scoped_release release;
    k::qu8_quantize_linear(xp, count, s, z, lo, hi, yp, threads, t);
  }, py::arg("x"), py::arg("scale"), py::arg("zero_point"), py::arg("y"), py::arg("threads") = 1,
     py::arg("isa") = py::none(),
     "QuantizeLinear per tensor, ONNX's arithmetic in fp32: y = clamp(rint(x / scale) + zero_point) to y's dtype "
     "(uint8 or int8), halves to even, NaN -> the lowest code (as ONNX Runtime); scale and zero_point are rounded "
     "to float32 first. Any C-contiguous shape.");

  km.def("quantize_linear_nhwc", [](const py::array& x, double scale, double zero_point, py::array& y, size_t threads,
                                    std::optional<std::string> isa) {
    require_array<float>(x, "x", false);
    const auto [lo, hi] = quantize_codes(y, zero_point);
    if (x.ndim() < 2) throw py::value_error("x must be (N, C, ...)");
    const auto xs = shape_of(x);
    std::vector<size_t> want{xs[0]};
    want.insert(want.end(), xs.begin() + 2, xs.end());
    want.push_back(xs[1]);
    expect_shape(y, want, "y");
    const float s = static_cast<float>(scale), z = static_cast<float>(zero_point);
    size_t hw = 1;
    for (size_t i = 2; i < xs.size(); ++i) hw *= xs[i];
    const auto* xp = static_cast<const float*>(x.data());
    auto* yp = static_cast<uint8_t*>(y.mutable_data());
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::qu8_quantize_linear_to_nhwc(xp, xs[0], xs[1], hw, s, z, lo, hi, yp, threads, t);
  }, py::arg("x"), py::arg("scale"), py::arg("zero_point"), py::arg("y"), py::arg("threads") = 1,
     py::arg("isa") = py::none(),
     "quantize_linear from x (N, C, *spatial) into y (N, *spatial, C): the same codes, channels last.");

  km.def("dequantize_linear", [](const py::array& x, double scale, int64_t zero_point, py::array& y, size_t threads,
                                 std::optional<std::string> isa) {
    const bool is_u8 = x.dtype().is(py::dtype::of<uint8_t>());
    if (!is_u8 && !x.dtype().is(py::dtype::of<int8_t>()))
      throw py::type_error("x: expected dtype uint8 or int8, got " + std::string(py::str(x.dtype())));
    if (is_u8) require_array<uint8_t>(x, "x", false);
    else require_array<int8_t>(x, "x", false);
    require_array<float>(y, "y", true);
    expect_shape(y, shape_of(x), "y");
    const int64_t lo = is_u8 ? 0 : -128, hi = is_u8 ? 255 : 127;
    if (zero_point < lo || zero_point > hi) throw py::value_error("zero_point must be a code of x's dtype");
    const auto* xp = static_cast<const uint8_t*>(x.data());
    auto* yp = static_cast<float*>(y.mutable_data());
    const k::KernelTable* t = table_for(isa);
    const size_t count = static_cast<size_t>(x.size());
    const float s = static_cast<float>(scale);
    py::gil_scoped_release release;
    k::qu8_dequantize_linear(xp, !is_u8, count, s, static_cast<int32_t>(zero_point), yp, threads, t);
  }, py::arg("x"), py::arg("scale"), py::arg("zero_point"), py::arg("y"), py::arg("threads") = 1,
     py::arg("isa") = py::none(),
     "DequantizeLinear per tensor, ONNX's arithmetic in fp32: y = float(x - zero_point) * scale; x uint8 or int8, "
     "y float32 of x's shape.");

  km.def("dequantize_linear_kernel", [](std::optional<std::string> isa) {
    return std::string(k::qu8_dequantize_kernel_name(table_for(isa)));
  }, py::arg("isa") = py::none(), "The DequantizeLinear kernel a level runs.");

  km.def("quantize_linear_kernel", [](std::optional<std::string> isa) {
    return std::string(k::qu8_quantize_kernel_name(table_for(isa)));
  }, py::arg("isa") = py::none(), "The QuantizeLinear kernel a level runs.");

  km.def("qu8_add_takes_fp32", [](int64_t a_mult, int64_t a_shift, int64_t b_mult, int64_t b_shift, int64_t out_mult,
                                  int64_t out_shift) {
    return k::qu8_add_takes_fp32(multiplier_arg(a_mult, "a_mult"), shift_arg(a_shift, "a_shift"),
                                 multiplier_arg(b_mult, "b_mult"), shift_arg(b_shift, "b_shift"),
                                 multiplier_arg(out_mult, "out_mult"), shift_arg(out_shift, "out_shift"));
  }, py::arg("a_mult"), py::arg("a_shift"), py::arg("b_mult"), py::arg("b_shift"), py::arg("out_mult"),
     py::arg("out_shift"), "Whether the SIMD qu8_add kernels take these constants in their fp32 form (the rest run "
     "the three integer requantizations; both give the same bytes).");

  km.def("qu8_add", [](const py::array& a, int64_t a_zp, const py::array& b, int64_t b_zp, py::array& y, int64_t y_zp,
                       int64_t a_mult, int64_t a_shift, int64_t b_mult, int64_t b_shift, int64_t out_mult,
                       int64_t out_shift, int64_t qmin, int64_t qmax, const std::string& broadcast, size_t threads,
                       std::optional<std::string> isa) {
    const k::Broadcast bc = broadcast_arg(broadcast);
    const uint8_t* ap = in_u8(a, "a");
    const uint8_t* bp = in_u8(b, "b");
    const auto [rows, c] = binary_shapes(a, b, y, bc);
    uint8_t* yp = out_u8(y, "y");
    const auto [lo, hi] = clamp_args(qmin, qmax);
    const uint8_t azp = byte_arg(a_zp, "a_zp"), bzp = byte_arg(b_zp, "b_zp"), yzp = byte_arg(y_zp, "y_zp");
    const int32_t am = multiplier_arg(a_mult, "a_mult"), bm = multiplier_arg(b_mult, "b_mult");
    const int32_t om = multiplier_arg(out_mult, "out_mult");
    const int32_t as = shift_arg(a_shift, "a_shift"), bs = shift_arg(b_shift, "b_shift");
    const int32_t os = shift_arg(out_shift, "out_shift");
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::qu8_add(ap, azp, bp, bzp, yp, yzp, rows, c, bc, am, as, bm, bs, om, os, lo, hi, threads, t);
  }, py::arg("a"), py::arg("a_zp"), py::arg("b"), py::arg("b_zp"), py::arg("y"), py::arg("y_zp"), py::arg("a_mult"),
     py::arg("a_shift"), py::arg("b_mult"), py::arg("b_shift"), py::arg("out_mult"), py::arg("out_shift"),
     py::arg("qmin") = 0, py::arg("qmax") = 255, py::arg("broadcast") = "none", py::arg("threads") = 1,
     py::arg("isa") = py::none(),
     "TFLite's quantized Add: sa = requantize((a - a_zp) << 20, a_mult, a_shift), sb likewise, y = clamp("
     "requantize(sa + sb, out_mult, out_shift) + y_zp, qmin, qmax); a, y (rows, C), b (rows, C), (C,) or (1,) "
     "as broadcast says ('none', 'channel', 'scalar').");

  km.def("qu8_mul", [](const py::array& a, int64_t a_zp, const py::array& b, int64_t b_zp, py::array& y, int64_t y_zp,
                       int64_t mult, int64_t shift, int64_t qmin, int64_t qmax, const std::string& broadcast,
                       size_t threads, std::optional<std::string> isa) {
    const k::Broadcast bc = broadcast_arg(broadcast);
    const uint8_t* ap = in_u8(a, "a");
    const uint8_t* bp = in_u8(b, "b");
    const auto [rows, c] = binary_shapes(a, b, y, bc);
    uint8_t* yp = out_u8(y, "y");
    const auto [lo, hi] = clamp_args(qmin, qmax);
    const uint8_t azp = byte_arg(a_zp, "a_zp"), bzp = byte_arg(b_zp, "b_zp"), yzp = byte_arg(y_zp, "y_zp");
    const int32_t m = multiplier_arg(mult, "mult"), s = shift_arg(shift, "shift");
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::qu8_mul(ap, azp, bp, bzp, yp, yzp, rows, c, bc, m, s, lo, hi, threads, t);
  }, py::arg("a"), py::arg("a_zp"), py::arg("b"), py::arg("b_zp"), py::arg("y"), py::arg("y_zp"), py::arg("mult"),
     py::arg("shift"), py::arg("qmin") = 0, py::arg("qmax") = 255, py::arg("broadcast") = "none",
     py::arg("threads") = 1, py::arg("isa") = py::none(),
     "y = clamp(requantize((a - a_zp) * (b - b_zp), mult, shift) + y_zp, qmin, qmax), b broadcast as in qu8_add.");

  km.def("qu8_global_avgpool", [](const py::array& x, int64_t x_zp, py::array& y, int64_t y_zp, int64_t mult,
                                  int64_t shift, int64_t qmin, int64_t qmax, size_t threads,
                                  std::optional<std::string> isa) {
    const uint8_t* xp = in_u8(x, "x");
    if (x.ndim() != 3) throw py::value_error("x must be (N, HW, C)");
    const auto xs = shape_of(x);
    expect_shape(y, {xs[0], xs[2]}, "y");
    uint8_t* yp = out_u8(y, "y");
    const auto [lo, hi] = clamp_args(qmin, qmax);
    const uint8_t xzp = byte_arg(x_zp, "x_zp"), yzp = byte_arg(y_zp, "y_zp");
    const int32_t m = multiplier_arg(mult, "mult"), s = shift_arg(shift, "shift");
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::qu8_global_avgpool(xp, xs[0], xs[1], xs[2], xzp, yp, yzp, m, s, lo, hi, threads, t);
  }, py::arg("x"), py::arg("x_zp"), py::arg("y"), py::arg("y_zp"), py::arg("mult"), py::arg("shift"),
     py::arg("qmin") = 0, py::arg("qmax") = 255, py::arg("threads") = 1, py::arg("isa") = py::none(),
     "y[N, C] = clamp(requantize(sum over HW of (x - x_zp), mult, shift) + y_zp, qmin, qmax), x (N, HW, C) "
     "(1/HW goes into mult / shift).");

  km.def("qu8_avgpool", [](const py::array& x, int64_t x_zp, py::array& y, int64_t y_zp, const py::array& mult,
                           const py::array& shift, int64_t qmin, int64_t qmax, Pair kernel, Pair stride,
                           Pair dilation, std::vector<size_t> pads, bool count_include_pad, size_t threads,
                           std::optional<std::string> isa) {
    const uint8_t* xp = in_u8(x, "x");
    if (x.ndim() != 4) throw py::value_error("x must be (N, H, W, C)");
    const auto xs = shape_of(x);
    const k::ConvGeometry g = geometry(kernel, stride, dilation, pads);
    const size_t oh = k::conv_output_size(xs[1], g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
    const size_t ow = k::conv_output_size(xs[2], g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
    expect_shape(y, {xs[0], oh, ow, xs[3]}, "y");
    uint8_t* yp = out_u8(y, "y");
    const size_t entries = g.kh * g.kw + 1;
    const int32_t* mp = int32_vector(mult, entries, "mult");
    const int32_t* sp = shift_vector(shift, entries, "shift");
    const auto [lo, hi] = clamp_args(qmin, qmax);
    const uint8_t xzp = byte_arg(x_zp, "x_zp"), yzp = byte_arg(y_zp, "y_zp");
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::qu8_avgpool(xp, xs[0], xs[1], xs[2], xs[3], xzp, g, count_include_pad, mp, sp, yzp, lo, hi, yp, threads, t);
  }, py::arg("x"), py::arg("x_zp"), py::arg("y"), py::arg("y_zp"), py::arg("mult"), py::arg("shift"),
     py::arg("qmin"), py::arg("qmax"), py::arg("kernel"), py::arg("stride") = Pair{1, 1},
     py::arg("dilation") = Pair{1, 1}, py::arg("pads") = std::vector<size_t>{0, 0, 0, 0},
     py::arg("count_include_pad") = false, py::arg("threads") = 1, py::arg("isa") = py::none(),
     "NHWC uint8 average pooling: acc = sum of the in-bounds taps' (x - x_zp), requantized with entry `count` "
     "of mult / shift (KH*KW + 1 entries; count = in-bounds taps, or the whole window with count_include_pad).");

  km.def("qu8_maxpool", [](const py::array& x, py::array& y, Pair kernel, Pair stride, Pair dilation,
                           std::vector<size_t> pads, size_t threads, std::optional<std::string> isa) {
    const uint8_t* xp = in_u8(x, "x");
    if (x.ndim() != 4) throw py::value_error("x must be (N, H, W, C)");
    const auto xs = shape_of(x);
    const k::ConvGeometry g = geometry(kernel, stride, dilation, pads);
    const size_t oh = k::conv_output_size(xs[1], g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
    const size_t ow = k::conv_output_size(xs[2], g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
    expect_shape(y, {xs[0], oh, ow, xs[3]}, "y");
    uint8_t* yp = out_u8(y, "y");
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::qu8_maxpool(xp, xs[0], xs[1], xs[2], xs[3], g, yp, threads, t);
  }, py::arg("x"), py::arg("y"), py::arg("kernel"), py::arg("stride") = Pair{1, 1}, py::arg("dilation") = Pair{1, 1},
     py::arg("pads") = std::vector<size_t>{0, 0, 0, 0}, py::arg("threads") = 1, py::arg("isa") = py::none(),
     "NHWC uint8 max pooling (padding never wins; a window with no input tap gives 0).");

  km.def("qu8_concat", [](const std::vector<py::array>& xs, const std::vector<int64_t>& x_zps,
                          const std::vector<int64_t>& mults, const std::vector<int64_t>& shifts,
                          const std::vector<bool>& copies, py::array& y, int64_t y_zp, size_t threads,
                          std::optional<std::string> isa) {
    const size_t count = xs.size();
    if (count == 0 || x_zps.size() != count || mults.size() != count || shifts.size() != count ||
        copies.size() != count)
      throw py::value_error("qu8_concat: xs, x_zps, mults, shifts and copies must be equally long, and not empty");
    if (y.ndim() != 2) throw py::value_error("y: expected (rows, width)");
    const size_t rows = static_cast<size_t>(y.shape(0));
    std::vector<k::Qu8ConcatPart> parts(count);
    size_t width = 0;
    for (size_t i = 0; i < count; ++i) {
      const std::string name = "xs[" + std::to_string(i) + "]";
      if (xs[i].ndim() != 2 || static_cast<size_t>(xs[i].shape(0)) != rows)
        throw py::value_error(name + ": expected (rows, width) with y's rows");
      parts[i] = {in_u8(xs[i], name.c_str()), static_cast<size_t>(xs[i].shape(1)), byte_arg(x_zps[i], "x_zp"),
                  copies[i] ? 0 : multiplier_arg(mults[i], "mult"), copies[i] ? 0 : shift_arg(shifts[i], "shift"),
                  static_cast<bool>(copies[i])};
      width += parts[i].width;
    }
    expect_shape(y, {rows, width}, "y");
    uint8_t* yp = out_u8(y, "y");
    const uint8_t yzp = byte_arg(y_zp, "y_zp");
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::qu8_concat(parts.data(), count, rows, yp, yzp, threads, t);
  }, py::arg("xs"), py::arg("x_zps"), py::arg("mults"), py::arg("shifts"), py::arg("copies"), py::arg("y"),
     py::arg("y_zp"), py::arg("threads") = 1, py::arg("isa") = py::none(),
     "y (rows, sum of widths) = the uint8 xs (rows, width_i) side by side, each copied where copies[i] "
     "(the output's scale and zero point) else rescaled as qu8_requantize (clamp 0-255).");

  km.def("qu8_lut", [](const py::array& x, const py::array& table, py::array& y, size_t threads,
                      std::optional<std::string> isa) {
    const uint8_t* xp = in_u8(x, "x");
    const uint8_t* tp = in_u8(table, "table");
    if (table.size() != 256) throw py::value_error("table: expected 256 entries");
    expect_shape(y, shape_of(x), "y");
    uint8_t* yp = out_u8(y, "y");
    const k::KernelTable* t = table_for(isa);
    const size_t count = static_cast<size_t>(x.size());
    py::gil_scoped_release release;
    k::qu8_lut(xp, count, tp, yp, threads, t);
  }, py::arg("x"), py::arg("table"), py::arg("y"), py::arg("threads") = 1, py::arg("isa") = py::none(),
     "y = table[x] for uint8 x of any C-contiguous shape and a 256-entry uint8 table.");

  km.def("qu8_requantize", [](const py::array& x, int64_t x_zp, py::array& y, int64_t y_zp, int64_t mult,
                              int64_t shift, int64_t qmin, int64_t qmax, size_t threads,
                              std::optional<std::string> isa) {
    const uint8_t* xp = in_u8(x, "x");
    expect_shape(y, shape_of(x), "y");
    uint8_t* yp = out_u8(y, "y");
    const auto [lo, hi] = clamp_args(qmin, qmax);
    const uint8_t xzp = byte_arg(x_zp, "x_zp"), yzp = byte_arg(y_zp, "y_zp");
    const int32_t m = multiplier_arg(mult, "mult"), s = shift_arg(shift, "shift");
    const k::KernelTable* t = table_for(isa);
    const size_t count = static_cast<size_t>(x.size());
    py::gil_scoped_release release;
    k::qu8_requantize(xp, count, xzp, yp, yzp, m, s, lo, hi, threads, t);
  }, py::arg("x"), py::arg("x_zp"), py::arg("y"), py::arg("y_zp"), py::arg("mult"), py::arg("shift"),
     py::arg("qmin") = 0, py::arg("qmax") = 255, py::arg("threads") = 1, py::arg("isa") = py::none(),
     "y = clamp(requantize(x - x_zp, mult, shift) + y_zp, qmin, qmax), any C-contiguous shape (a rescale).");
}
