// Python face of the kernel library: edgesdk._native.kernels. Zero-copy: every array argument
// must already be a C-contiguous numpy array of the stated dtype (nothing is converted or
// copied; outputs are written in place into caller-provided arrays), and the GIL is released
// while a kernel runs. Packed weights and convolution plans are opaque objects built once.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <vector>

#include "bindings_steps.h"
#include "bindings_util.h"
#include "kernels/dispatch.h"
#include "kernels/operators.h"
#include "kernels/thread_pool.h"

namespace py = pybind11;
namespace k = edgesdk::kernels;
using namespace edgesdk::bindings;

void register_ops_kernels(py::module_& km);  // bindings_ops.cc
void register_qu8_kernels(py::module_& km);  // bindings_qu8.cc
void register_chw_kernels(py::module_& km);  // bindings_chw.cc
void register_steps(py::module_& km);  // bindings_steps.cc

namespace {

k::ConvGeometry make_geometry(std::pair<size_t, size_t> kernel, std::pair<size_t, size_t> stride,
                              std::pair<size_t, size_t> dilation, std::vector<size_t> pads) {
  if (pads.size() != 4) throw py::value_error("pads must be (top, left, bottom, right)");
  k::ConvGeometry g;
  g.kh = kernel.first; g.kw = kernel.second;
  g.stride_h = stride.first; g.stride_w = stride.second;
  g.dil_h = dilation.first; g.dil_w = dilation.second;
  g.pad_top = pads[0]; g.pad_left = pads[1]; g.pad_bottom = pads[2]; g.pad_right = pads[3];
  return g;
}

// Convolution plan holding (a reference to) its packed weights.
struct PyConvPlan {
  std::shared_ptr<k::PackedGemmWeights> weights;
  k::ConvPlan plan;
  size_t n, h, w, c;
};

// Clustered convolution plan holding (a reference to) its packed weights.
struct PyClusteredConvPlan {
  std::shared_ptr<k::ClusteredWeights> weights;
  k::ClusteredConvPlan plan;
  size_t n, h, w, c;
};

// run() / step() of a convolution plan binding (PyConvPlan, PyClusteredConvPlan): NHWC x and out of
// the plan's shapes. ConvPlan also takes channel slices of wider NHWC buffers (nhwc_pixel_stride):
// it reads and writes them in place.
template <class Plan>
Step prepare_plan(const py::object& self, const py::array& x, py::array& out, const std::string& act,
                  std::optional<float> alpha, std::optional<float> beta, size_t threads) {
  Plan& p = self.cast<Plan&>();
  const size_t in_stride = nhwc_pixel_stride(x, {p.n, p.h, p.w, p.c}, "x", false);
  const size_t out_stride = nhwc_pixel_stride(out, {p.n, p.plan.out_h(), p.plan.out_w(), p.weights->n}, "out", true);
  const float* xp = static_cast<const float*>(x.data());
  float* op = static_cast<float*>(out.mutable_data());
  const k::Activation ac = make_act(act, alpha, beta);
  if constexpr (std::is_same_v<Plan, PyConvPlan>) {
    return make_step([&p, xp, op, ac, threads, in_stride, out_stride] {
      p.plan.run(xp, op, ac, threads, in_stride, out_stride);
    }, self, x, out);
  } else {  // the clustered plan reads and writes whole pixels only
    if (in_stride != p.c || out_stride != p.weights->n) throw py::value_error("x and out must be C-contiguous");
    return make_step([&p, xp, op, ac, threads] { p.plan.run(xp, op, ac, threads); }, self, x, out);
  }
}

}  // namespace

#define ACT_ARGS py::arg("act") = "none", py::arg("alpha") = py::none(), py::arg("beta") = py::none()

void register_kernels(py::module_& m) {
  py::module_ km = m.def_submodule("kernels", "SIMD kernel library (zero-copy numpy entry points).");
  register_steps(km);  // first: def_kernel registers into kernels.steps

  km.def("supported_isas", [] {
    std::vector<std::string> out;
    for (k::Isa isa : k::supported_isas()) out.emplace_back(k::isa_name(isa));
    return out;
  }, "ISA levels this CPU can run, lowest first.");
  km.def("active_isa", [] { return std::string(k::active_kernels().name); }, "The level kernels use by default.");
  km.def("set_isa", [](const std::string& name) { k::set_active_isa(k::parse_isa(name)); },
         "Forces a level (scalar, avx2, avxvnni, avx512, avx512vnni, avx512amx, neon, neonfp16, neondot) process-wide; raises if "
         "this CPU cannot run it.");
  km.def("reset_isa", &k::reset_active_isa, "Back to the best level (or EDGESDK_CPU_ISA).");
  km.def("kernel_names", [](std::optional<std::string> isa) {
    py::dict out;
    for (const auto& [slot, name] : k::kernel_names(isa ? k::parse_isa(*isa) : k::active_kernels().isa))
      out[slot] = name;
    return out;
  }, py::arg("isa") = py::none(),
     "{slot: kernel name} of a level's table (default: the active level), e.g. 'igemm_f32w': "
     "'f32_igemm_6x16__avx2' (XNNPACK's <datatype>_<op>_<tile>__<isa>, cpu_native/src/kernels/ukernels.h); "
     "any level compiled in for this arch, whether or not this CPU runs it. Empty slots are left out.");
  km.def("hardware_threads", &k::hardware_threads);

  py::class_<k::PackedGemmWeights, std::shared_ptr<k::PackedGemmWeights>>(km, "PackedGemmWeights")
      .def_property_readonly("n", [](const k::PackedGemmWeights& w) { return w.n; })
      .def_property_readonly("k", [](const k::PackedGemmWeights& w) { return w.k; })
      .def_property_readonly("nr", [](const k::PackedGemmWeights& w) { return w.nr; })
      .def_property_readonly("fp16", [](const k::PackedGemmWeights& w) { return w.type == k::WeightType::F16; })
      .def_property_readonly("fp16_arith", [](const k::PackedGemmWeights& w) { return w.f16_arith; },
                             "Packed for the fp16-arithmetic kernel (fp16 activations and products, fp32 sums).")
      .def_property_readonly("isa", [](const k::PackedGemmWeights& w) { return std::string(w.table->name); });

  km.def("pack_gemm", [](const py::array& w, std::optional<py::array> bias, const std::string& layout, bool fp16,
                         std::optional<std::string> isa, bool fp16_arith, size_t window) {
    if (w.ndim() != 2) throw py::value_error("w must be 2-D");
    if (layout != "nk" && layout != "kn") throw py::value_error("layout must be 'nk' or 'kn'");
    if (window == 0 || w.shape(1) % static_cast<py::ssize_t>(window) != 0 || (window > 1 && layout != "nk"))
      throw py::value_error("window must divide the columns of 'nk' weights");
    const bool nk = layout == "nk";
    const size_t n = static_cast<size_t>(w.shape(nk ? 0 : 1)), kk = static_cast<size_t>(w.shape(nk ? 1 : 0));
    const float* b = nullptr;
    if (bias) {
      b = in_f32(*bias, "bias");
      expect_shape(*bias, {n}, "bias");
    }
    const k::KernelTable* t = table_for(isa);
    const auto wl = nk ? k::WeightLayout::NK : k::WeightLayout::KN;
    const auto type = fp16 ? k::WeightType::F16 : k::WeightType::F32;
    if (w.dtype().kind() == 'f' && w.itemsize() == 2) {  // numpy float16: IEEE binary16 bits
      if (!(w.flags() & py::array::c_style)) throw py::value_error("w: must be C-contiguous");
      const auto* h = static_cast<const uint16_t*>(w.data());
      return std::make_shared<k::PackedGemmWeights>(
          k::pack_gemm_weights_f16(h, n, kk, wl, b, type, t, fp16_arith, window));
    }
    return std::make_shared<k::PackedGemmWeights>(
        k::pack_gemm_weights(in_f32(w, "w"), n, kk, wl, b, type, t, fp16_arith, window));
  }, py::arg("w"), py::arg("bias") = py::none(), py::arg("layout") = "nk", py::arg("fp16") = false,
     py::arg("isa") = py::none(), py::arg("fp16_arith") = false, py::arg("window") = 1,
     "Packs weights (float32, or float16 stored as fp16) given as N x K ('nk') or K x N ('kn') into "
     "NR-wide panels, fp32 or fp16 (fp16=True). fp16_arith=True (fp16 sessions) with fp16=True packs "
     "for the level's fp16-arithmetic kernel where it has one (neonfp16): activations are then "
     "rounded to fp16 and multiplied in half, with fp32 accumulation. window=KH*KW: the rows are OIHW "
     "convolution filters (O x C*KH*KW), packed in the kernels' (kh, kw, c) column order.");

  def_kernel(km, "gemm", [](const py::array& a, std::shared_ptr<k::PackedGemmWeights> weights, py::array& out,
                            const std::string& act, std::optional<float> alpha, std::optional<float> beta,
                            size_t threads) {
    if (weights == nullptr) throw py::type_error("w must be PackedGemmWeights, not None");
    const k::PackedGemmWeights& w = *weights;
    const float* ap = in_f32(a, "a");
    if (a.ndim() != 2 || static_cast<size_t>(a.shape(1)) != w.k) throw py::value_error("a must be (M, K)");
    const size_t m = static_cast<size_t>(a.shape(0));
    expect_shape(out, {m, w.n}, "out");
    float* op = out_f32(out, "out");
    const k::Activation ac = make_act(act, alpha, beta);
    return make_step([ap, m, weights, op, ac, threads] {
      k::gemm(ap, m, weights->k, *weights, op, weights->n, ac, threads);
    }, a, out);
  }, py::arg("a"), py::arg("w"), py::arg("out"), ACT_ARGS, py::arg("threads") = 1,
     "out[M, N] = act(a[M, K] @ W + bias).");

  py::class_<PyConvPlan> conv_plan(km, "ConvPlan");
  conv_plan
      .def(py::init([](std::shared_ptr<k::PackedGemmWeights> w, std::vector<size_t> input_shape,
                       std::pair<size_t, size_t> kernel, std::pair<size_t, size_t> stride,
                       std::pair<size_t, size_t> dilation, std::vector<size_t> pads, const std::string& algorithm) {
             if (input_shape.size() != 4) throw py::value_error("input_shape must be (N, H, W, C)");
             const k::ConvGeometry g = make_geometry(kernel, stride, dilation, pads);
             k::ConvAlgorithm algo;
             if (algorithm == "auto") algo = k::ConvAlgorithm::Auto;
             else if (algorithm == "direct") algo = k::ConvAlgorithm::Direct;
             else if (algorithm == "winograd") algo = k::ConvAlgorithm::Winograd;
             else throw py::value_error("algorithm must be 'auto', 'direct' or 'winograd'");
             return new PyConvPlan{w,
                                   k::ConvPlan(input_shape[0], input_shape[1], input_shape[2], input_shape[3], g, *w, algo),
                                   input_shape[0], input_shape[1], input_shape[2], input_shape[3]};
           }),
           py::arg("w"), py::arg("input_shape"), py::arg("kernel"), py::arg("stride") = std::pair<size_t, size_t>{1, 1},
           py::arg("dilation") = std::pair<size_t, size_t>{1, 1}, py::arg("pads") = std::vector<size_t>{0, 0, 0, 0},
           py::arg("algorithm") = "auto",
           "Plan for an NHWC convolution with weights packed from OHWI as (O, KH*KW*C). algorithm: 'auto' "
           "(Winograd F(4x4, 3x3) for the 3x3 stride-1 convolutions it wins on, unless EDGESDK_CPU_WINOGRAD=0; "
           "the (indirect) GEMM otherwise), 'direct' (never Winograd) or 'winograd' (forced: raises "
           "ValueError where it does not apply).")
      .def_property_readonly("output_shape", [](const PyConvPlan& p) {
        return std::vector<size_t>{p.n, p.plan.out_h(), p.plan.out_w(), p.weights->n};
      })
      .def_property_readonly("is_gemm", [](const PyConvPlan& p) { return p.plan.is_gemm(); })
      .def_property_readonly("is_winograd", [](const PyConvPlan& p) { return p.plan.is_winograd(); })
      .def_property_readonly("algorithm", [](const PyConvPlan& p) { return std::string(p.plan.algorithm_name()); },
                             "'gemm' (1x1 stride 1, unpadded), 'indirect' (indirect GEMM) or 'winograd43' "
                             "(Winograd F(4x4, 3x3)).")
      .def_property_readonly("kernel_names", [](const PyConvPlan& p) {
        const k::KernelTable& t = *p.weights->table;
        std::vector<std::string> out{p.weights->f16_arith ? t.names.igemm_f16 : p.weights->igemm_name()};
        if (p.plan.is_winograd()) {
          out.insert(out.begin(), t.names.winograd_input);
          out.emplace_back(t.names.winograd_output);
        }
        return out;
      }, "The microkernels a run calls, in order (the transforms around the GEMM for Winograd).")
      ;
  def_kernel_method(conv_plan, "run", &prepare_plan<PyConvPlan>, py::arg("x"), py::arg("out"), ACT_ARGS,
                    py::arg("threads") = 1);

  def_kernel(km, "depthwise_conv", [](const py::array& x, const py::array& w, std::optional<py::array> bias, py::array& out,
                              std::pair<size_t, size_t> stride, std::pair<size_t, size_t> dilation,
                              std::vector<size_t> pads, const std::string& act, std::optional<float> alpha,
                              std::optional<float> beta, size_t threads, bool fp16_arith) {
    if (x.ndim() != 4 || w.ndim() != 3) throw py::value_error("x must be (N, H, W, C) and w (KH, KW, C*multiplier)");
    const auto xs = shape_of(x), ws = shape_of(w);
    if (ws[2] % xs[3] != 0) throw py::value_error("w's last dim must be a multiple of C");
    const size_t mult = ws[2] / xs[3];
    const k::ConvGeometry g = make_geometry({ws[0], ws[1]}, stride, dilation, pads);
    const size_t oh = k::conv_output_size(xs[1], g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
    const size_t ow = k::conv_output_size(xs[2], g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
    expect_shape(out, {xs[0], oh, ow, ws[2]}, "out");
    const float* b = nullptr;
    if (bias) {
      b = in_f32(*bias, "bias");
      expect_shape(*bias, {ws[2]}, "bias");
    }
    const float* xp = in_f32(x, "x");
    const float* wp = in_f32(w, "w");
    float* op = out_f32(out, "out");
    const k::Activation ac = make_act(act, alpha, beta);
    return make_step([xp, xs, mult, g, wp, b, op, ac, threads, fp16_arith] {
      k::depthwise_conv(xp, xs[0], xs[1], xs[2], xs[3], mult, g, wp, b, op, ac, threads, nullptr, fp16_arith);
    }, x, w, bias, out);
  }, py::arg("x"), py::arg("w"), py::arg("bias"), py::arg("out"), py::arg("stride") = std::pair<size_t, size_t>{1, 1},
     py::arg("dilation") = std::pair<size_t, size_t>{1, 1}, py::arg("pads") = std::vector<size_t>{0, 0, 0, 0},
     ACT_ARGS, py::arg("threads") = 1, py::arg("fp16_arith") = false,
     "NHWC depthwise convolution, w (KH, KW, C*multiplier). fp16_arith=True (fp16 sessions) runs the "
     "level's fp16-arithmetic kernel where it has one (neonfp16).");

  auto pool = [](k::PoolKind kind) {
    return [kind](const py::array& x, py::array& out, std::pair<size_t, size_t> kernel, std::pair<size_t, size_t> stride,
                  std::pair<size_t, size_t> dilation, std::vector<size_t> pads, bool count_include_pad,
                  const std::string& act, std::optional<float> alpha, std::optional<float> beta, size_t threads) {
      if (x.ndim() != 4) throw py::value_error("x must be (N, H, W, C)");
      const auto xs = shape_of(x);
      const k::ConvGeometry g = make_geometry(kernel, stride, dilation, pads);
      const size_t oh = k::conv_output_size(xs[1], g.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom);
      const size_t ow = k::conv_output_size(xs[2], g.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right);
      expect_shape(out, {xs[0], oh, ow, xs[3]}, "out");
      const float* xp = in_f32(x, "x");
      float* op = out_f32(out, "out");
      const k::Activation ac = make_act(act, alpha, beta);
      return make_step([kind, xp, xs, g, count_include_pad, op, ac, threads] {
        k::pool2d(kind, xp, xs[0], xs[1], xs[2], xs[3], g, count_include_pad, op, ac, threads);
      }, x, out);
    };
  };
  for (const auto& [name, kind] : {std::pair{"max_pool", k::PoolKind::Max}, std::pair{"avg_pool", k::PoolKind::Average}})
    def_kernel(km, name, pool(kind), py::arg("x"), py::arg("out"), py::arg("kernel"), py::arg("stride") = std::pair<size_t, size_t>{1, 1},
           py::arg("dilation") = std::pair<size_t, size_t>{1, 1}, py::arg("pads") = std::vector<size_t>{0, 0, 0, 0},
           py::arg("count_include_pad") = false, ACT_ARGS, py::arg("threads") = 1, "NHWC pooling.");

  def_kernel(km, "global_avg_pool", [](const py::array& x, py::array& out, const std::string& act, std::optional<float> alpha,
                               std::optional<float> beta, size_t threads) {
    if (x.ndim() != 4) throw py::value_error("x must be (N, H, W, C)");
    const auto xs = shape_of(x);
    expect_shape(out, {xs[0], xs[3]}, "out");
    const float* xp = in_f32(x, "x");
    float* op = out_f32(out, "out");
    const k::Activation ac = make_act(act, alpha, beta);
    return make_step([xp, xs, op, ac, threads] { k::global_avgpool(xp, xs[0], xs[1] * xs[2], xs[3], op, ac, threads); },
                     x, out);
  }, py::arg("x"), py::arg("out"), ACT_ARGS, py::arg("threads") = 1, "(N, H, W, C) -> (N, C) mean.");

  def_kernel(km, "binary", [](const std::string& op, const py::array& a, const py::array& b, py::array& out, bool b_first,
                      const std::string& act, std::optional<float> alpha, std::optional<float> beta, size_t threads) {
    const k::BinaryOp bop = op == "add" ? k::BinaryOp::Add : op == "sub" ? k::BinaryOp::Sub : op == "mul" ? k::BinaryOp::Mul
        : throw py::value_error("op must be add, sub or mul");
    if (a.ndim() < 1) throw py::value_error("a must have at least one dimension");
    const size_t c = static_cast<size_t>(a.shape(a.ndim() - 1)), total = static_cast<size_t>(a.size());
    const size_t rows = c == 0 ? 0 : total / c;
    const size_t bsize = static_cast<size_t>(b.size());
    // b broadcasts: same shape, one value per channel (last dim), or a scalar.
    const k::Broadcast bc = shape_of(b) == shape_of(a) ? k::Broadcast::None
                            : bsize == 1               ? k::Broadcast::Scalar
                            : bsize == c               ? k::Broadcast::PerChannel
                            : throw py::value_error("b must have a's shape, C = a.shape[-1] values, or one value");
    expect_shape(out, shape_of(a), "out");
    const float* ap = in_f32(a, "a");
    const float* bp = in_f32(b, "b");
    float* op_ = out_f32(out, "out");
    const k::Activation ac = make_act(act, alpha, beta);
    return make_step([bop, bc, ap, bp, op_, rows, c, ac, threads, b_first] {
      k::binary(bop, bc, ap, bp, op_, rows, c, ac, threads, b_first);
    }, a, b, out);
  }, py::arg("op"), py::arg("a"), py::arg("b"), py::arg("out"), py::arg("b_first") = false, ACT_ARGS,
     py::arg("threads") = 1, "out = act(a op b) (b op a with b_first), b broadcast per channel or as a scalar.");

  def_kernel(km, "activation", [](py::array& x, const std::string& act, std::optional<float> alpha, std::optional<float> beta,
                          size_t threads, std::optional<std::string> isa) {
    float* xp = out_f32(x, "x");
    const size_t n = static_cast<size_t>(x.size());
    const k::Activation ac = make_act(act, alpha, beta);
    const k::KernelTable* t = table_for(isa);
    return make_step([xp, n, ac, threads, t] { k::activation(xp, n, ac, threads, t); }, x);
  }, py::arg("x"), ACT_ARGS, py::arg("threads") = 1, py::arg("isa") = py::none(),
     "In-place activation (isa: force a kernel level, for tests).");

  km.def("softmax", [](const py::array& x, py::array& out, size_t threads) {
    if (x.ndim() < 1) throw py::value_error("x must have at least one dimension");
    expect_shape(out, shape_of(x), "out");
    const size_t n = static_cast<size_t>(x.shape(x.ndim() - 1));
    const size_t rows = n == 0 ? 0 : static_cast<size_t>(x.size()) / n;
    const float* xp = in_f32(x, "x");
    float* op = out_f32(out, "out");
    py::gil_scoped_release release;
    k::softmax(xp, op, rows, n, threads);
  }, py::arg("x"), py::arg("out"), py::arg("threads") = 1, "Two-pass softmax over the last axis (out may be x).");

  py::class_<k::ClusteredWeights, std::shared_ptr<k::ClusteredWeights>>(km, "ClusteredWeights")
      .def_property_readonly("n", [](const k::ClusteredWeights& w) { return w.n; })
      .def_property_readonly("k", [](const k::ClusteredWeights& w) { return w.k; })
      .def_property_readonly("bits", [](const k::ClusteredWeights& w) { return w.bits; })
      .def_property_readonly("isa", [](const k::ClusteredWeights& w) { return std::string(w.table->name); })
      .def_property_readonly("nbytes", [](const k::ClusteredWeights& w) {
        return w.words.size() * 4 + w.tables.size() * 4;
      });

  km.def("pack_clustered", [](const py::array& indices, unsigned bits, size_t rows, size_t cols, const py::array& codebook,
                              std::optional<py::array> bias, std::optional<std::string> isa) {
    require_array<uint8_t>(indices, "indices", false);
    if (bits < 1 || bits > 8) throw py::value_error("bits must be 1..8");
    if (static_cast<size_t>(indices.size()) * 8 < rows * cols * bits) throw py::value_error("indices: stream too short");
    const size_t entries = size_t{1} << bits;
    if (codebook.ndim() != 2 || static_cast<size_t>(codebook.shape(1)) != entries ||
        (static_cast<size_t>(codebook.shape(0)) != 1 && static_cast<size_t>(codebook.shape(0)) != rows))
      throw py::value_error("codebook must be (1 or rows, 2**bits)");
    const bool per_row = static_cast<size_t>(codebook.shape(0)) == rows && rows != 1;
    const float* b = nullptr;
    if (bias) {
      b = in_f32(*bias, "bias");
      expect_shape(*bias, {rows}, "bias");
    }
    const auto* idx = static_cast<const uint8_t*>(indices.data());
    const k::KernelTable* t = table_for(isa);
    if (codebook.dtype().kind() == 'f' && codebook.itemsize() == 2) {
      if (!(codebook.flags() & py::array::c_style)) throw py::value_error("codebook: must be C-contiguous");
      return std::make_shared<k::ClusteredWeights>(k::pack_clustered_f16(
          idx, bits, rows, cols, static_cast<const uint16_t*>(codebook.data()), per_row, b, t));
    }
    return std::make_shared<k::ClusteredWeights>(
        k::pack_clustered(idx, bits, rows, cols, in_f32(codebook, "codebook"), per_row, b, t));
  }, py::arg("indices"), py::arg("bits"), py::arg("rows"), py::arg("cols"), py::arg("codebook"),
     py::arg("bias") = py::none(), py::arg("isa") = py::none(),
     "Packs b-bit indices (LSB-first stream over the row-major rows x cols matrix) and a float32 or "
     "float16 codebook (1 or rows, 2**bits) for clustered_gemm.");

  def_kernel(km, "clustered_gemm", [](const py::array& x, std::shared_ptr<k::ClusteredWeights> weights, py::array& out, const std::string& act,
                              std::optional<float> alpha, std::optional<float> beta, size_t threads) {
    if (weights == nullptr) throw py::type_error("w must be ClusteredWeights, not None");
    const k::ClusteredWeights& w = *weights;
    if (x.ndim() != 2 || static_cast<size_t>(x.shape(1)) != w.k) throw py::value_error("x must be (M, K)");
    const size_t m = static_cast<size_t>(x.shape(0));
    expect_shape(out, {m, w.n}, "out");
    const float* xp = in_f32(x, "x");
    float* op = out_f32(out, "out");
    const k::Activation ac = make_act(act, alpha, beta);
    return make_step([xp, m, weights, op, ac, threads] {
      k::clustered_gemm(xp, m, weights->k, *weights, op, weights->n, ac, threads);
    }, x, out);
  }, py::arg("x"), py::arg("w"), py::arg("out"), ACT_ARGS, py::arg("threads") = 1,
     "out[M, N] = act(x @ W.T + bias) with W looked up from the codebook in registers.");

  py::class_<PyClusteredConvPlan> clustered_plan(km, "ClusteredConvPlan");
  clustered_plan
      .def(py::init([](std::shared_ptr<k::ClusteredWeights> w, std::vector<size_t> input_shape,
                       std::pair<size_t, size_t> kernel, std::pair<size_t, size_t> stride,
                       std::pair<size_t, size_t> dilation, std::vector<size_t> pads) {
             if (input_shape.size() != 4) throw py::value_error("input_shape must be (N, H, W, C)");
             const k::ConvGeometry g = make_geometry(kernel, stride, dilation, pads);
             if (w->k != g.kh * g.kw * input_shape[3])
               throw py::value_error("clustered weights have " + std::to_string(w->k) + " columns, the geometry needs "
                                     "KH*KW*C = " + std::to_string(g.kh * g.kw * input_shape[3]));
             return new PyClusteredConvPlan{w, k::ClusteredConvPlan(input_shape[0], input_shape[1], input_shape[2],
                                                                    input_shape[3], g, *w),
                                            input_shape[0], input_shape[1], input_shape[2], input_shape[3]};
           }),
           py::arg("w"), py::arg("input_shape"), py::arg("kernel"), py::arg("stride") = std::pair<size_t, size_t>{1, 1},
           py::arg("dilation") = std::pair<size_t, size_t>{1, 1}, py::arg("pads") = std::vector<size_t>{0, 0, 0, 0},
           "Plan for an NHWC KxK convolution with clustered weights (pack_clustered of the (O, KH*KW*C) index "
           "matrix in (kh, kw, c) column order), fed from an indirection buffer: no padded copy, no im2col. "
           "One plan per arena (it caches the indirection for the input address it last saw).")
      .def_property_readonly("output_shape", [](const PyClusteredConvPlan& p) {
        return std::vector<size_t>{p.n, p.plan.out_h(), p.plan.out_w(), p.weights->n};
      })
      .def_property_readonly("is_winograd", [](const PyClusteredConvPlan& p) { return p.plan.is_winograd(); },
                             "True where the plan runs Winograd F(4x4, 3x3) (3x3 stride-1 layers with enough tiles).")
      .def_property_readonly("indirection_bytes", [](const PyClusteredConvPlan& p) { return p.plan.indirection_bytes(); },
                             "Bytes of the indirection buffer and its zero row (0 before the first run).")
      .def_property_readonly("panel_bytes", [](const PyClusteredConvPlan& p) { return p.plan.panel_bytes(); },
                             "Bytes each running thread holds: the decoded weight panel and its decode chunk, plus, for "
                             "Winograd, the panel's transformed weights and products.")
      ;
  def_kernel_method(clustered_plan, "run", &prepare_plan<PyClusteredConvPlan>, py::arg("x"), py::arg("out"), ACT_ARGS,
                    py::arg("threads") = 1);

  def_kernel(km, "nnm_gather", [](const py::array& cent, const py::array& assign, std::optional<py::array> bias, py::array& out,
                          const std::string& act, std::optional<float> alpha, std::optional<float> beta, size_t threads) {
    require_array<int32_t>(assign, "assign", false);
    if (assign.ndim() != 2) throw py::value_error("assign must be (groups, K)");
    const size_t groups = static_cast<size_t>(assign.shape(0)), kk = static_cast<size_t>(assign.shape(1));
    if (cent.ndim() < 1 || static_cast<size_t>(cent.shape(cent.ndim() - 1)) % groups != 0)
      throw py::value_error("cent's last dim must be groups * K'");
    const size_t width = static_cast<size_t>(cent.shape(cent.ndim() - 1)), kc = width / groups;
    const size_t pixels = width == 0 ? 0 : static_cast<size_t>(cent.size()) / width;
    std::vector<size_t> want = shape_of(cent);
    want.back() = kk;
    expect_shape(out, want, "out");
    const float* b = nullptr;
    if (bias) {
      b = in_f32(*bias, "bias");
      expect_shape(*bias, {kk}, "bias");
    }
    const float* cp = in_f32(cent, "cent");
    float* op = out_f32(out, "out");
    const auto* ap = static_cast<const int32_t*>(assign.data());
    const k::Activation ac = make_act(act, alpha, beta);
    return make_step([cp, pixels, width, groups, kc, ap, kk, b, op, ac, threads] {
      k::nnm_gather(cp, pixels, width, groups, kc, ap, kk, b, op, kk, ac, threads);
    }, cent, assign, bias, out);
  }, py::arg("cent"), py::arg("assign"), py::arg("bias"), py::arg("out"), ACT_ARGS, py::arg("threads") = 1,
     "NNM: out[..., k] = act(bias[k] + sum_g cent[..., g*K' + assign[g, k]]).");

  register_ops_kernels(km);
  register_qu8_kernels(km);
  register_chw_kernels(km);
  // The CHW entry points are also reachable as edgesdk._native.<name> (the session code's spelling).
  for (const char* name : {"depthwise_conv_chw", "depthwise_chw_kernel", "global_avgpool_chw", "transpose_2d"})
    m.attr(name) = km.attr(name);
}
