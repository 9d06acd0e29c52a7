// edgesdk._native.kernels, continued: the bindings of operators_nn.h (normalisation, softmax along
// an axis, reductions, batched MatMul, ConvTranspose, resize). Same rules as bindings_kernels.cc:
// zero-copy C-contiguous arrays of the stated dtype, outputs written in place, the GIL released
// while a kernel runs; every shape, dtype and index table is checked first (ValueError, TypeError
// for a dtype), since these run on user models. isa= forces a kernel level (tests).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings_util.h"
#include "kernels/operators_nn.h"

namespace py = pybind11;
namespace k = edgesdk::kernels;
using namespace edgesdk::bindings;

namespace {

using Pair = std::pair<size_t, size_t>;

// a * b * c, or ValueError when it overflows (sizes come from the caller).
size_t product(size_t a, size_t b, size_t c, const char* what) {
  size_t ab = 0, abc = 0;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc))
    throw py::value_error(std::string(what) + ": sizes overflow");
  return abc;
}

void expect_size(const py::array& a, size_t want, const char* name) {
  if (static_cast<size_t>(a.size()) != want)
    throw py::value_error(std::string(name) + ": expected " + std::to_string(want) + " elements, got " +
                          std::to_string(a.size()));
}

// Optional float32 vector of `n` values (null for None).
const float* optional_vector(const std::optional<py::array>& a, size_t n, const char* name) {
  if (!a) return nullptr;
  expect_shape(*a, {n}, name);
  return in_f32(*a, name);
}

const int32_t* index_table(const py::array& a, size_t n, size_t extent, const char* name) {
  require_array<int32_t>(a, name, false);
  expect_shape(a, {n}, name);
  const auto* p = static_cast<const int32_t*>(a.data());
  for (size_t i = 0; i < n; ++i)
    if (p[i] < 0 || static_cast<size_t>(p[i]) >= extent)
      throw py::value_error(std::string(name) + ": index " + std::to_string(p[i]) + " at " + std::to_string(i) +
                            " is outside [0, " + std::to_string(extent) + ")");
  return p;
}

k::ReduceOp reduce_op(const std::string& op) {
  if (op == "sum") return k::ReduceOp::Sum;
  if (op == "mean") return k::ReduceOp::Mean;
  if (op == "max") return k::ReduceOp::Max;
  if (op == "min") return k::ReduceOp::Min;
  if (op == "l2") return k::ReduceOp::L2;
  if (op == "sum_square") return k::ReduceOp::SumSquare;
  if (op == "log_sum_exp") return k::ReduceOp::LogSumExp;
  throw py::value_error("op must be sum, mean, max, min, l2, sum_square or log_sum_exp, got '" + op + "'");
}

bool is_nhwc(const std::string& layout) {
  if (layout != "nchw" && layout != "nhwc") throw py::value_error("layout must be 'nchw' or 'nhwc'");
  return layout == "nhwc";
}

// LayerNormalization and InstanceNormalization are one kernel (RowNormUkernel) and one wrapper: x
// and y of one shape, scale and the optional bias of `channels` values (x's axis 1), then
// run(x, y, shape, scale, bias, table) without the GIL.
template <class Run>
void row_norm(const py::array& x, const py::array& scale, const std::optional<py::array>& bias, py::array& y,
              const std::optional<std::string>& isa, Run run) {
  const auto s = shape_of(x);
  expect_shape(y, s, "y");
  expect_shape(scale, {s[1]}, "scale");
  const float* xp = in_f32(x, "x");
  const float* sp = in_f32(scale, "scale");
  const float* bp = optional_vector(bias, s[1], "bias");
  float* yp = out_f32(y, "y");
  const k::KernelTable* t = table_for(isa);
  py::gil_scoped_release release;
  run(xp, yp, s, sp, bp, t);
}

void register_norms(py::module_& km) {
  km.def("layer_norm", [](const py::array& x, const py::array& scale, std::optional<py::array> bias, py::array& y,
                          float eps, size_t threads, std::optional<std::string> isa) {
    if (x.ndim() != 2 || x.shape(1) == 0) throw py::value_error("x must be (rows, cols) with cols > 0");
    row_norm(x, scale, bias, y, isa, [&](const float* xp, float* yp, const std::vector<size_t>& s, const float* sp,
                                         const float* bp, const k::KernelTable* t) {
      k::layer_norm(xp, yp, s[0], s[1], sp, bp, eps, threads, t);
    });
  }, py::arg("x"), py::arg("scale"), py::arg("bias"), py::arg("y"), py::arg("eps") = 1e-5f, py::arg("threads") = 1,
     py::arg("isa") = py::none(),
     "y = (x - mean) / sqrt(var + eps) * scale + bias over each row of x (rows, cols); y may be x.");

  km.def("instance_norm", [](const py::array& x, const py::array& scale, std::optional<py::array> bias, py::array& y,
                             float eps, size_t threads, std::optional<std::string> isa) {
    if (x.ndim() != 3 || x.shape(1) == 0 || x.shape(2) == 0) throw py::value_error("x must be (N, C, S) with C, S > 0");
    row_norm(x, scale, bias, y, isa, [&](const float* xp, float* yp, const std::vector<size_t>& s, const float* sp,
                                         const float* bp, const k::KernelTable* t) {
      k::instance_norm(xp, yp, s[0], s[1], s[2], sp, bp, eps, threads, t);
    });
  }, py::arg("x"), py::arg("scale"), py::arg("bias"), py::arg("y"), py::arg("eps") = 1e-5f, py::arg("threads") = 1,
     py::arg("isa") = py::none(),
     "Each (n, c) row of x (N, C, S) normalised over S, then * scale[c] + bias[c]; y may be x.");
}

void register_softmax_reduce(py::module_& km) {
  // An overload of softmax(x, out, threads) (bindings_kernels.cc): told apart by outer/axis/inner.
  km.def("softmax", [](const py::array& x, py::array& y, size_t outer, size_t axis, size_t inner, bool log,
                       size_t threads, std::optional<std::string> isa) {
    const size_t total = product(outer, axis, inner, "softmax");
    expect_size(x, total, "x");
    expect_size(y, total, "y");
    const float* xp = in_f32(x, "x");
    float* yp = out_f32(y, "y");
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::softmax_axis(xp, yp, outer, axis, inner, log, threads, t);
  }, py::arg("x"), py::arg("y"), py::arg("outer"), py::arg("axis"), py::arg("inner"), py::arg("log") = false,
     py::arg("threads") = 1, py::arg("isa") = py::none(),
     "Softmax (log-softmax with log=True) along the middle axis of x seen as (outer, axis, inner); y may be x.");

  km.def("reduce", [](const py::array& x, py::array& y, size_t outer, size_t axis, size_t inner, const std::string& op,
                      size_t threads, std::optional<std::string> isa) {
    const k::ReduceOp rop = reduce_op(op);
    expect_size(x, product(outer, axis, inner, "reduce"), "x");
    expect_size(y, product(outer, 1, inner, "reduce"), "y");
    const float* xp = in_f32(x, "x");
    float* yp = out_f32(y, "y");
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::reduce(xp, yp, outer, axis, inner, rop, threads, t);
  }, py::arg("x"), py::arg("y"), py::arg("outer"), py::arg("axis"), py::arg("inner"), py::arg("op"),
     py::arg("threads") = 1, py::arg("isa") = py::none(),
     "y (outer*inner values) = op over the middle axis of x seen as (outer, axis, inner); op: sum, mean, max, "
     "min (NaN propagates), l2, sum_square, log_sum_exp.");

  km.def("argreduce", [](const py::array& x, py::array& y, size_t outer, size_t axis, size_t inner,
                         const std::string& op, bool select_last_index, size_t threads, std::optional<std::string> isa) {
    if (op != "max" && op != "min") throw py::value_error("op must be 'max' or 'min'");
    if (axis == 0) throw py::value_error("argreduce: the axis is empty");
    expect_size(x, product(outer, axis, inner, "argreduce"), "x");
    expect_size(y, product(outer, 1, inner, "argreduce"), "y");
    const float* xp = in_f32(x, "x");
    require_array<int64_t>(y, "y", true);
    auto* yp = static_cast<int64_t*>(y.mutable_data());
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::argreduce(xp, yp, outer, axis, inner, op == "max", select_last_index, threads, t);
  }, py::arg("x"), py::arg("y"), py::arg("outer"), py::arg("axis"), py::arg("inner"), py::arg("op"),
     py::arg("select_last_index") = false, py::arg("threads") = 1, py::arg("isa") = py::none(),
     "y (int64, outer*inner) = index of the max / min along the middle axis: the first one, or the last with "
     "select_last_index. NaN counts as the extreme (numpy.argmax/argmin: the first NaN; the last NaN with "
     "select_last_index).");
}

void register_matmul(py::module_& km) {
  km.def("batched_matmul", [](const py::array& a, const py::array& b, py::array& y, const py::array& a_index,
                              const py::array& b_index, size_t threads, const std::string& act,
                              std::optional<float> alpha, std::optional<float> beta, bool transpose_b,
                              std::optional<std::string> isa) {
    if (a.ndim() != 3 || b.ndim() != 3 || y.ndim() != 3) throw py::value_error("a, b and y must be 3-D");
    const auto as = shape_of(a), bs = shape_of(b), ys = shape_of(y);
    k::BatchedMatmulShape s;
    s.batch = ys[0]; s.m = as[1]; s.k = as[2]; s.n = transpose_b ? bs[1] : bs[2];
    s.a_batches = as[0]; s.b_batches = bs[0]; s.transpose_b = transpose_b;
    if ((transpose_b ? bs[2] : bs[1]) != s.k)
      throw py::value_error(transpose_b ? "b must be (BB, N, K) with a's K" : "b must be (BB, K, N) with a's K");
    expect_shape(y, {s.batch, s.m, s.n}, "y");
    const float* ap = in_f32(a, "a");
    const float* bp = in_f32(b, "b");
    float* yp = out_f32(y, "y");
    require_array<int64_t>(a_index, "a_index", false);
    require_array<int64_t>(b_index, "b_index", false);
    expect_shape(a_index, {s.batch}, "a_index");
    expect_shape(b_index, {s.batch}, "b_index");
    const auto* ai = static_cast<const int64_t*>(a_index.data());
    const auto* bi = static_cast<const int64_t*>(b_index.data());
    for (size_t i = 0; i < s.batch; ++i)
      if (ai[i] < 0 || static_cast<size_t>(ai[i]) >= s.a_batches || bi[i] < 0 || static_cast<size_t>(bi[i]) >= s.b_batches)
        throw py::value_error("a_index / b_index: entry " + std::to_string(i) + " is out of range");
    const k::Activation ac = make_act(act, alpha, beta);
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::batched_matmul(ap, bp, yp, s, ai, bi, ac, threads, t);
  }, py::arg("a"), py::arg("b"), py::arg("y"), py::arg("a_index"), py::arg("b_index"), py::arg("threads") = 1,
     py::arg("act") = "none", py::arg("alpha") = py::none(), py::arg("beta") = py::none(),
     py::arg("transpose_b") = false, py::arg("isa") = py::none(),
     "y[i] = act(a[a_index[i]] @ b[b_index[i]]) with a (BA, M, K), b (BB, K, N) or (BB, N, K) with transpose_b, "
     "y (B, M, N); a_index, b_index int64 (B,).");
}

struct PyConvTranspose {
  std::shared_ptr<k::ConvTransposeWeights> w;
};

k::ConvTransposeGeometry transpose_geometry(Pair stride, Pair dilation, const std::vector<size_t>& pads, Pair out_pad) {
  if (pads.size() != 4) throw py::value_error("pads must be (top, left, bottom, right)");
  k::ConvTransposeGeometry g;
  g.stride_h = stride.first; g.stride_w = stride.second;
  g.dil_h = dilation.first; g.dil_w = dilation.second;
  g.pad_top = pads[0]; g.pad_left = pads[1]; g.pad_bottom = pads[2]; g.pad_right = pads[3];
  g.out_pad_h = out_pad.first; g.out_pad_w = out_pad.second;
  return g;
}

// conv_transpose_nhwc / _nchw: the argument checks, then the operator.
void conv_transpose(bool nhwc, const py::array& x, const PyConvTranspose& p, const std::optional<py::array>& bias,
                    py::array& y, Pair kernel, Pair stride, Pair dilation, const std::vector<size_t>& pads,
                    Pair out_pad, const std::string& act, std::optional<float> alpha, std::optional<float> beta,
                    size_t threads) {
  const k::ConvTransposeWeights& w = *p.w;
  if (kernel != Pair{w.kh, w.kw}) throw py::value_error("kernel does not match the packed weights");
  const k::ConvTransposeGeometry g = transpose_geometry(stride, dilation, pads, out_pad);
  if (x.ndim() != 4) throw py::value_error(nhwc ? "x must be (N, H, W, C_in)" : "x must be (N, C_in, H, W)");
  const auto xs = shape_of(x);
  const size_t n = xs[0], h = nhwc ? xs[1] : xs[2], wd = nhwc ? xs[2] : xs[3], c = nhwc ? xs[3] : xs[1];
  if (c != w.c_in) throw py::value_error("x: C_in does not match the packed weights");
  const size_t oh = k::conv_transpose_output_size(h, w.kh, g.stride_h, g.dil_h, g.pad_top, g.pad_bottom, g.out_pad_h);
  const size_t ow = k::conv_transpose_output_size(wd, w.kw, g.stride_w, g.dil_w, g.pad_left, g.pad_right, g.out_pad_w);
  expect_shape(y, nhwc ? std::vector<size_t>{n, oh, ow, w.c_out} : std::vector<size_t>{n, w.c_out, oh, ow}, "y");
  const float* xp = in_f32(x, "x");
  const float* bp = optional_vector(bias, w.c_out, "bias");
  float* yp = out_f32(y, "y");
  const k::Activation ac = make_act(act, alpha, beta);
  py::gil_scoped_release release;
  if (nhwc) k::conv_transpose_nhwc(xp, n, h, wd, w, g, bp, yp, ac, threads);
  else k::conv_transpose_nchw(xp, n, h, wd, w, g, bp, yp, ac, threads);
}

void register_conv_transpose(py::module_& km) {
  py::class_<PyConvTranspose>(km, "ConvTransposeWeights")
      .def_property_readonly("c_in", [](const PyConvTranspose& p) { return p.w->c_in; })
      .def_property_readonly("c_out", [](const PyConvTranspose& p) { return p.w->c_out; })
      .def_property_readonly("group", [](const PyConvTranspose& p) { return p.w->groups; })
      .def_property_readonly("kernel", [](const PyConvTranspose& p) { return Pair{p.w->kh, p.w->kw}; })
      .def_property_readonly("depthwise", [](const PyConvTranspose& p) { return p.w->depthwise; })
      .def_property_readonly("isa", [](const PyConvTranspose& p) { return std::string(p.w->table->name); });

  km.def("pack_conv_transpose", [](const py::array& w, size_t group, std::optional<std::string> isa) {
    if (w.ndim() != 4) throw py::value_error("w must be (C_in, C_out/group, kh, kw)");
    const auto s = shape_of(w);
    if (group == 0 || s[0] % group != 0) throw py::value_error("w: C_in must be a positive multiple of group");
    const float* wp = in_f32(w, "w");
    return PyConvTranspose{std::make_shared<k::ConvTransposeWeights>(
        k::pack_conv_transpose(wp, s[0], s[1], s[2], s[3], group, table_for(isa)))};
  }, py::arg("w"), py::arg("group") = 1, py::arg("isa") = py::none(),
     "Packs ConvTranspose weights in ONNX layout (C_in, C_out/group, kh, kw) for conv_transpose_nhwc/_nchw.");

  for (const bool nhwc : {true, false}) {
    km.def(nhwc ? "conv_transpose_nhwc" : "conv_transpose_nchw",
           [nhwc](const py::array& x, const PyConvTranspose& p, std::optional<py::array> bias, py::array& y,
                  Pair kernel, Pair stride, Pair dilation, std::vector<size_t> pads, Pair output_padding,
                  const std::string& act, std::optional<float> alpha, std::optional<float> beta, size_t threads) {
             conv_transpose(nhwc, x, p, bias, y, kernel, stride, dilation, pads, output_padding, act, alpha, beta,
                            threads);
           },
           py::arg("x"), py::arg("packed"), py::arg("bias"), py::arg("y"), py::arg("kernel"),
           py::arg("stride") = Pair{1, 1}, py::arg("dilation") = Pair{1, 1},
           py::arg("pads") = std::vector<size_t>{0, 0, 0, 0}, py::arg("output_padding") = Pair{0, 0},
           py::arg("act") = "none", py::arg("alpha") = py::none(), py::arg("beta") = py::none(), py::arg("threads") = 1,
           nhwc ? "ConvTranspose 2-D: x (N, H, W, C_in) -> y (N, OH, OW, C_out), OH = (H-1)*sh - top - bottom + "
                  "dh*(kh-1) + oph + 1; pads (top, left, bottom, right)."
                : "ConvTranspose 2-D on NCHW: x (N, C_in, H, W) -> y (N, C_out, OH, OW) (transposed to NHWC inside).");
  }
}

// x and y as (N, C, H, W) or (N, H, W, C); returns {n, c, h, w, oh, ow}.
std::vector<size_t> resize_dims(const py::array& x, const py::array& y, bool nhwc) {
  if (x.ndim() != 4 || y.ndim() != 4) throw py::value_error("x and y must be 4-D");
  const auto xs = shape_of(x), ys = shape_of(y);
  const size_t c = nhwc ? xs[3] : xs[1];
  if (ys[0] != xs[0] || (nhwc ? ys[3] : ys[1]) != c) throw py::value_error("y: N and C must match x");
  return {xs[0], c, nhwc ? xs[1] : xs[2], nhwc ? xs[2] : xs[3], nhwc ? ys[1] : ys[2], nhwc ? ys[2] : ys[3]};
}

void register_resize(py::module_& km) {
  km.def("resize_nearest", [](const py::array& x, py::array& y, const py::array& iy, const py::array& ix,
                              const std::string& layout, size_t threads, std::optional<std::string> isa) {
    const bool nhwc = is_nhwc(layout);
    const auto d = resize_dims(x, y, nhwc);
    k::ResizeTables tb;
    tb.iy0 = index_table(iy, d[4], d[2], "iy");
    tb.ix0 = index_table(ix, d[5], d[3], "ix");
    const float* xp = in_f32(x, "x");
    float* yp = out_f32(y, "y");
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::resize(false, xp, yp, d[0], d[1], d[2], d[3], d[4], d[5], nhwc, tb, threads, t);
  }, py::arg("x"), py::arg("y"), py::arg("iy"), py::arg("ix"), py::arg("layout") = "nchw", py::arg("threads") = 1,
     py::arg("isa") = py::none(),
     "y[..., oy, ox] = x[..., iy[oy], ix[ox]] over the spatial axes (iy, ix int32 source indices).");

  km.def("resize_linear", [](const py::array& x, py::array& y, const py::array& iy0, const py::array& iy1,
                             const py::array& wy, const py::array& ix0, const py::array& ix1, const py::array& wx,
                             const std::string& layout, size_t threads, std::optional<std::string> isa) {
    const bool nhwc = is_nhwc(layout);
    const auto d = resize_dims(x, y, nhwc);
    k::ResizeTables tb;
    tb.iy0 = index_table(iy0, d[4], d[2], "iy0");
    tb.iy1 = index_table(iy1, d[4], d[2], "iy1");
    tb.ix0 = index_table(ix0, d[5], d[3], "ix0");
    tb.ix1 = index_table(ix1, d[5], d[3], "ix1");
    expect_shape(wy, {d[4]}, "wy");
    expect_shape(wx, {d[5]}, "wx");
    tb.wy = in_f32(wy, "wy");
    tb.wx = in_f32(wx, "wx");
    const float* xp = in_f32(x, "x");
    float* yp = out_f32(y, "y");
    const k::KernelTable* t = table_for(isa);
    py::gil_scoped_release release;
    k::resize(true, xp, yp, d[0], d[1], d[2], d[3], d[4], d[5], nhwc, tb, threads, t);
  }, py::arg("x"), py::arg("y"), py::arg("iy0"), py::arg("iy1"), py::arg("wy"), py::arg("ix0"), py::arg("ix1"),
     py::arg("wx"), py::arg("layout") = "nchw", py::arg("threads") = 1, py::arg("isa") = py::none(),
     "Bilinear resize over the spatial axes: along x (1 - wx)*x[ix0] + wx*x[ix1], then the same along y.");
}

}  // namespace

void register_ops_kernels(py::module_& km) {
  register_norms(km);
  register_softmax_reduce(km);
  register_matmul(km);
  register_conv_transpose(km);
  register_resize(km);
}
