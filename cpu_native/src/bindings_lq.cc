// Python bindings of the LQ-Nets bitwise GEMM and convolution (kernels/lq.h): LQGemm and LQConv,
// defined on edgesdk._native and edgesdk._native.kernels. Bad arguments raise ValueError with a
// one-line message; run() releases the GIL.
//
// Geometry: LQConv takes the kernel size (and the input channels) at construction and the input
// shape (from x), strides, dilations and pads at run(), so one prepared layer serves any input size.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings_util.h"
#include "kernels/lq.h"

namespace py = pybind11;
namespace k = edgesdk::kernels;
using edgesdk::bindings::make_act;
using edgesdk::bindings::shape_of;

namespace {

std::string shape_str(const std::vector<size_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// A C-contiguous array of exactly dtype T (compared by kind and size), with the given rank.
template <class T>
const T* typed(const py::array& a, const char* name, char kind, py::ssize_t ndim) {
  const py::dtype dt = a.dtype();
  if (dt.kind() != kind || static_cast<size_t>(dt.itemsize()) != sizeof(T))
    throw py::value_error(std::string(name) + ": expected " + (kind == 'u' ? "uint" : "float") +
                          std::to_string(8 * sizeof(T)) + ", got " + std::string(py::str(dt)));
  if (a.ndim() != ndim) throw py::value_error(std::string(name) + ": expected a " + std::to_string(ndim) + "-d array");
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + ": must be C-contiguous");
  return static_cast<const T*>(a.data());
}

k::LqActQuant make_quant(const py::array& act_basis, double act_offset, const py::array& thresholds,
                         const py::array& codes) {
  k::LqActQuant q;
  const float* ab = typed<float>(act_basis, "act_basis", 'f', 1);
  q.kx = static_cast<size_t>(act_basis.shape(0));
  if (q.kx < 1 || q.kx > 8) throw py::value_error("act_basis: 1..8 activation bits, got " + std::to_string(q.kx));
  q.alpha.assign(ab, ab + q.kx);
  q.offset = static_cast<float>(act_offset);
  const float* th = typed<float>(thresholds, "thresholds", 'f', 1);
  q.thresholds.assign(th, th + thresholds.shape(0));
  const uint8_t* cd = typed<uint8_t>(codes, "codes", 'u', 1);
  q.codes.assign(cd, cd + codes.shape(0));
  return q;
}

const k::LqKernels& pick(const std::optional<std::string>& isa, const std::optional<std::string>& popcnt) {
  const k::KernelTable* t = edgesdk::bindings::table_for(isa);  // throws for a level this CPU lacks
  return k::lq_kernels(k::lq_variant_for(t->isa, popcnt.value_or("auto")));
}

// planes (O, Kw, ceil(n/32)) uint32, basis (O, Kw) float32, bias (O,) float32: returns (O, Kw).
std::pair<size_t, size_t> check_weights(const py::array& planes, const py::array& basis, size_t n,
                                        const std::optional<py::array>& bias) {
  typed<uint32_t>(planes, "planes", 'u', 3);
  typed<float>(basis, "basis", 'f', 2);
  const auto ps = shape_of(planes), bs = shape_of(basis);
  const size_t o = ps[0], kw = ps[1];
  if (o == 0) throw py::value_error("planes: no output channels");
  if (kw < 1 || kw > 8) throw py::value_error("planes: 1..8 weight bit-planes, got " + std::to_string(kw));
  if (ps[2] != (n + 31) / 32)
    throw py::value_error("planes: expected shape " + shape_str({o, kw, (n + 31) / 32}) + " for n = " +
                          std::to_string(n) + ", got " + shape_str(ps));
  if (bs != std::vector<size_t>{o, kw})
    throw py::value_error("basis: expected shape " + shape_str({o, kw}) + ", got " + shape_str(bs));
  if (bias) {
    typed<float>(*bias, "bias", 'f', 1);
    if (static_cast<size_t>(bias->shape(0)) != o)
      throw py::value_error("bias: expected shape " + shape_str({o}) + ", got " + shape_str(shape_of(*bias)));
  }
  return {o, kw};
}

template <class F>
auto value_errors(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  } catch (const std::runtime_error& e) {
    throw py::value_error(e.what());
  }
}

struct PyLQGemm {
  k::LqLayer layer;
};

struct PyLQConv {
  k::LqLayer layer;
  size_t c = 0, kh = 0, kw = 0;
};

std::shared_ptr<PyLQGemm> make_gemm(const py::array& planes, const py::array& basis, int64_t n,
                                    const py::array& act_basis, double act_offset, const py::array& thresholds,
                                    const py::array& codes, std::optional<py::array> bias,
                                    const std::optional<std::string>& isa, const std::optional<std::string>& popcnt) {
  if (n <= 0) throw py::value_error("n must be positive");
  const auto [o, kw] = check_weights(planes, basis, static_cast<size_t>(n), bias);
  return value_errors([&] {
    const k::LqActQuant q = make_quant(act_basis, act_offset, thresholds, codes);
    const k::LqKernels& kern = pick(isa, popcnt);
    auto g = std::make_shared<PyLQGemm>();
    g->layer = k::lq_prepare_gemm(static_cast<const uint32_t*>(planes.data()), static_cast<const float*>(basis.data()),
                                  o, kw, static_cast<size_t>(n), q, bias ? static_cast<const float*>(bias->data()) : nullptr,
                                  kern);
    return g;
  });
}

std::shared_ptr<PyLQConv> make_conv(const py::array& planes, const py::array& basis, int64_t channels,
                                    std::pair<int64_t, int64_t> kernel, const py::array& act_basis, double act_offset,
                                    const py::array& thresholds, const py::array& codes, std::optional<py::array> bias,
                                    const std::optional<std::string>& isa, const std::optional<std::string>& popcnt) {
  if (channels <= 0) throw py::value_error("channels must be positive");
  if (kernel.first <= 0 || kernel.second <= 0) throw py::value_error("kernel must be positive");
  const size_t c = static_cast<size_t>(channels), kh = static_cast<size_t>(kernel.first),
               kwid = static_cast<size_t>(kernel.second);
  const auto [o, kw] = check_weights(planes, basis, c * kh * kwid, bias);
  return value_errors([&] {
    const k::LqActQuant q = make_quant(act_basis, act_offset, thresholds, codes);
    const k::LqKernels& kern = pick(isa, popcnt);
    auto p = std::make_shared<PyLQConv>();
    p->layer = k::lq_prepare_conv(static_cast<const uint32_t*>(planes.data()), static_cast<const float*>(basis.data()),
                                  o, kw, c, kh, kwid, q, bias ? static_cast<const float*>(bias->data()) : nullptr, kern);
    p->c = c, p->kh = kh, p->kw = kwid;
    return p;
  });
}

void check_io(const py::array& x, py::array& y) {
  if (!x.dtype().is(py::dtype::of<float>()))
    throw py::value_error("x: expected float32, got " + std::string(py::str(x.dtype())));
  if (!y.dtype().is(py::dtype::of<float>()))
    throw py::value_error("y: expected float32, got " + std::string(py::str(y.dtype())));
  if (!(x.flags() & py::array::c_style)) throw py::value_error("x: must be C-contiguous");
  if (!(y.flags() & py::array::c_style)) throw py::value_error("y: must be C-contiguous");
  if (!y.writeable()) throw py::value_error("y: must be writable");
}

void run_gemm(const PyLQGemm& g, const py::array& x, py::array& y, const std::string& act_name,
              std::optional<float> alpha, std::optional<float> beta, int64_t threads) {
  check_io(x, y);
  const k::LqLayer& l = g.layer;
  if (x.ndim() != 2 || static_cast<size_t>(x.shape(1)) != l.n)
    throw py::value_error("x: expected shape (M, " + std::to_string(l.n) + "), got " + shape_str(shape_of(x)));
  const size_t m = static_cast<size_t>(x.shape(0));
  if (shape_of(y) != std::vector<size_t>{m, l.o})
    throw py::value_error("y: expected shape " + shape_str({m, l.o}) + ", got " + shape_str(shape_of(y)));
  if (threads < 1) throw py::value_error("threads must be >= 1");
  const k::Activation act = make_act(act_name, alpha, beta);
  const float* xp = static_cast<const float*>(x.data());
  float* yp = static_cast<float*>(y.mutable_data());
  py::gil_scoped_release release;
  k::lq_gemm(l, xp, m, yp, act, static_cast<size_t>(threads));
}

void run_conv(const PyLQConv& p, const py::array& x, py::array& y, std::pair<int64_t, int64_t> stride,
              std::pair<int64_t, int64_t> dilation, std::vector<int64_t> pads, const std::string& act_name,
              std::optional<float> alpha, std::optional<float> beta, int64_t threads) {
  check_io(x, y);
  if (x.ndim() != 4 || static_cast<size_t>(x.shape(3)) != p.c)
    throw py::value_error("x: expected NHWC (B, H, W, " + std::to_string(p.c) + "), got " + shape_str(shape_of(x)));
  if (stride.first <= 0 || stride.second <= 0) throw py::value_error("stride must be positive");
  if (dilation.first <= 0 || dilation.second <= 0) throw py::value_error("dilation must be positive");
  if (pads.size() != 4) throw py::value_error("pads must be (top, left, bottom, right)");
  for (int64_t v : pads)
    if (v < 0) throw py::value_error("pads must be >= 0");
  if (threads < 1) throw py::value_error("threads must be >= 1");
  k::LqConvGeometry g;
  g.kh = p.kh, g.kw = p.kw;
  g.stride_h = static_cast<size_t>(stride.first), g.stride_w = static_cast<size_t>(stride.second);
  g.dil_h = static_cast<size_t>(dilation.first), g.dil_w = static_cast<size_t>(dilation.second);
  g.pad_top = static_cast<size_t>(pads[0]), g.pad_left = static_cast<size_t>(pads[1]);
  g.pad_bottom = static_cast<size_t>(pads[2]), g.pad_right = static_cast<size_t>(pads[3]);
  const auto xs = shape_of(x);
  const size_t oh = k::lq_conv_out(xs[1], g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
  const size_t ow = k::lq_conv_out(xs[2], g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
  if (oh == 0 || ow == 0) throw py::value_error("the kernel window does not fit the padded input");
  const std::vector<size_t> want{xs[0], oh, ow, p.layer.o};
  if (shape_of(y) != want) throw py::value_error("y: expected shape " + shape_str(want) + ", got " + shape_str(shape_of(y)));
  const k::Activation act = make_act(act_name, alpha, beta);
  const float* xp = static_cast<const float*>(x.data());
  float* yp = static_cast<float*>(y.mutable_data());
  py::gil_scoped_release release;
  k::lq_conv(p.layer, xp, xs[0], xs[1], xs[2], g, yp, act, static_cast<size_t>(threads));
}

std::vector<std::string> variant_names() {
  std::vector<std::string> out;
  for (k::LqVariant v : k::lq_supported_variants()) out.emplace_back(k::lq_variant_name(v));
  return out;
}

}  // namespace

void register_lq(py::module_& m, py::module_& km) {
  auto gemm = py::class_<PyLQGemm, std::shared_ptr<PyLQGemm>>(
      m, "LQGemm",
      "LQ-Nets bitwise GEMM: y = act(Q(x) @ W.T + bias) with binary-coded weights (Kw bit-planes and a per-channel "
      "basis) and activations quantized to Kx bits (basis, offset, thresholds, codes), computed with AND + popcount. "
      "Read-only, usable from several threads.")
      .def(py::init(&make_gemm), py::arg("planes"), py::arg("basis"), py::arg("n"), py::arg("act_basis"),
           py::arg("act_offset"), py::arg("thresholds"), py::arg("codes"), py::arg("bias") = py::none(), py::kw_only(),
           py::arg("isa") = py::none(), py::arg("popcnt") = py::none(),
           "planes uint32 (O, Kw, ceil(n/32)) (bit k of plane j: word k>>5, bit k&31; 1 = +1), basis float32 "
           "(O, Kw), act_basis float32 (Kx,), act_offset c, thresholds float32 (2^Kx - 1,) ascending, codes uint8 "
           "(2^Kx,), bias float32 (O,). isa: a level this CPU runs (default the active one); popcnt: 'auto' "
           "(EDGESDK_LQ_POPCNT, else VPOPCNTDQ where the CPU has it), 'shuffle' (vpshufb counts) or 'vpopcnt'.")
      .def("run", &run_gemm, py::arg("x"), py::arg("y"), py::arg("act_name") = "none",
           py::arg("act_alpha") = py::none(), py::arg("act_beta") = py::none(), py::arg("threads") = 1,
           "y (M, O) = act(...) for x float32 (M, n); a row with a NaN input is NaN. Releases the GIL.")
      .def_property_readonly("kernel", [](const PyLQGemm& g) { return std::string(g.layer.k->gemm_name); })
      .def_property_readonly("encoder", [](const PyLQGemm& g) { return std::string(g.layer.k->encode_name); })
      .def_property_readonly("variant", [](const PyLQGemm& g) { return std::string(k::lq_variant_name(g.layer.k->variant)); })
      .def_property_readonly("out_features", [](const PyLQGemm& g) { return g.layer.o; })
      .def_property_readonly("in_features", [](const PyLQGemm& g) { return g.layer.n; })
      .def("__repr__", [](const PyLQGemm& g) {
        return "LQGemm(n=" + std::to_string(g.layer.n) + ", out=" + std::to_string(g.layer.o) + ", kw=" +
               std::to_string(g.layer.kw) + ", kx=" + std::to_string(g.layer.q.kx) + ", kernel='" + g.layer.k->gemm_name + "')";
      });
  auto conv = py::class_<PyLQConv, std::shared_ptr<PyLQConv>>(
      m, "LQConv",
      "LQ-Nets bitwise convolution (groups = 1, NHWC): LQGemm's formula per output pixel over the valid taps; "
      "padded taps contribute exactly 0. Read-only, usable from several threads.")
      .def(py::init(&make_conv), py::arg("planes"), py::arg("basis"), py::arg("channels"), py::arg("kernel"),
           py::arg("act_basis"), py::arg("act_offset"), py::arg("thresholds"), py::arg("codes"),
           py::arg("bias") = py::none(), py::kw_only(), py::arg("isa") = py::none(), py::arg("popcnt") = py::none(),
           "As LQGemm, with n = channels * KH * KW in ONNX order (k = (c*KH + kh)*KW + kw); kernel = (KH, KW).")
      .def("run", &run_conv, py::arg("x"), py::arg("y"), py::arg("stride") = std::pair<int64_t, int64_t>{1, 1},
           py::arg("dilation") = std::pair<int64_t, int64_t>{1, 1}, py::arg("pads") = std::vector<int64_t>{0, 0, 0, 0},
           py::arg("act_name") = "none", py::arg("act_alpha") = py::none(), py::arg("act_beta") = py::none(),
           py::arg("threads") = 1,
           "y NHWC (B, OH, OW, O) from x NHWC (B, H, W, C); pads (top, left, bottom, right). An output pixel "
           "whose window reads a NaN is NaN in every channel. Releases the GIL.")
      .def_property_readonly("kernel", [](const PyLQConv& p) { return std::string(p.layer.k->gemm_name); })
      .def_property_readonly("encoder", [](const PyLQConv& p) { return std::string(p.layer.k->encode_name); })
      .def_property_readonly("variant", [](const PyLQConv& p) { return std::string(k::lq_variant_name(p.layer.k->variant)); })
      .def_property_readonly("out_channels", [](const PyLQConv& p) { return p.layer.o; })
      .def_property_readonly("channels", [](const PyLQConv& p) { return p.c; })
      .def_property_readonly("kernel_size", [](const PyLQConv& p) { return std::make_pair(p.kh, p.kw); })
      .def("output_shape", [](const PyLQConv& p, std::vector<size_t> input_shape, std::pair<size_t, size_t> stride,
                              std::pair<size_t, size_t> dilation, std::vector<size_t> pads) {
             if (input_shape.size() != 4 || pads.size() != 4) throw py::value_error("input_shape (B, H, W, C), pads of 4");
             return std::vector<size_t>{input_shape[0],
                                        k::lq_conv_out(input_shape[1], p.kh, stride.first, dilation.first, pads[0], pads[2]),
                                        k::lq_conv_out(input_shape[2], p.kw, stride.second, dilation.second, pads[1], pads[3]),
                                        p.layer.o};
           }, py::arg("input_shape"), py::arg("stride") = std::pair<size_t, size_t>{1, 1},
           py::arg("dilation") = std::pair<size_t, size_t>{1, 1}, py::arg("pads") = std::vector<size_t>{0, 0, 0, 0});
  km.attr("LQGemm") = gemm;
  km.attr("LQConv") = conv;
  for (py::module_* mod : {&m, &km})
    mod->def("lq_variants", &variant_names,
             "The LQ popcount kernel variants this CPU runs: scalar, avx2, avx512bw, avx512vpopcnt, neon.");
}
