// Python bindings of the sparse 1x1 convolution (kernels/operators_sparse.h): pack_sparse_conv1x1
// (CSR weights -> a packed, read-only object) and sparse_conv1x1 (CHW images through it). Defined on
// edgesdk._native itself and, like the other kernels, on edgesdk._native.kernels. Bad arguments
// raise ValueError with a one-line message (dtypes included: the session converts before calling).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

#include "bindings_util.h"
#include "kernels/operators_sparse.h"

namespace py = pybind11;
namespace k = edgesdk::kernels;
using edgesdk::bindings::make_act;
using edgesdk::bindings::chw_call;
using edgesdk::bindings::shape_of;

namespace {

template <class T>
const T* typed(const py::array& a, const char* name, const char* dtype, size_t length) {
  if (!a.dtype().is(py::dtype::of<T>()))
    throw py::value_error(std::string(name) + ": expected dtype " + dtype + ", got " + std::string(py::str(a.dtype())));
  if (a.ndim() != 1 || static_cast<size_t>(a.shape(0)) != length)
    throw py::value_error(std::string(name) + ": expected shape (" + std::to_string(length) + ",), got " +
                          std::string(py::str(py::tuple(py::cast(shape_of(a))))));
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + ": must be C-contiguous");
  return static_cast<const T*>(a.data());
}

const char* kind_name(k::SpmmValues v) {
  switch (v) {
    case k::SpmmValues::F32: return "f32";
    case k::SpmmValues::F16: return "f16";
    case k::SpmmValues::Codebook: return "codebook";
  }
  return "?";
}

using Packed = k::SparseConv1x1Weights;

std::shared_ptr<Packed> pack(const py::array& row_ptr, const py::array& cols, std::optional<py::array> values,
                             std::optional<py::array> bias, int64_t input_channels, std::optional<py::array> indices,
                             std::optional<py::array> codebook, int64_t block) {
  if (row_ptr.ndim() != 1 || row_ptr.shape(0) < 2)
    throw py::value_error("row_ptr: expected shape (K + 1,) with K >= 1");
  if (input_channels <= 0) throw py::value_error("input_channels must be positive");
  if (block < 0) throw py::value_error("block must be 0 (choose), 1, 2, 4 or 8");
  const size_t k_rows = static_cast<size_t>(row_ptr.shape(0)) - 1;
  const int64_t* rp = typed<int64_t>(row_ptr, "row_ptr", "int64", k_rows + 1);
  if (cols.ndim() != 1) throw py::value_error("cols: expected a 1-d array");
  const size_t nnz = static_cast<size_t>(cols.shape(0));
  const int32_t* cp = typed<int32_t>(cols, "cols", "int32", nnz);
  if (rp[0] != 0 || rp[k_rows] != static_cast<int64_t>(nnz))
    throw py::value_error("row_ptr must run from 0 to len(cols) (" + std::to_string(nnz) + ")");
  const float* vf = nullptr;
  const uint16_t* vh = nullptr;
  bool half = false;
  const uint8_t* idx = nullptr;
  const float* book = nullptr;
  size_t groups = 0, tsize = 0;
  if (values) {
    if (indices || codebook) throw py::value_error("give values, or indices with codebook, not both");
    if (values->dtype().is(py::dtype::of<float>())) vf = typed<float>(*values, "values", "float32", nnz);
    else if (values->dtype().is(py::dtype("float16"))) half = true, vh = typed<uint16_t>(values->view("uint16"), "values", "float16", nnz);
    else throw py::value_error("values: expected dtype float32 or float16, got " + std::string(py::str(values->dtype())));
  } else {
    if (!indices || !codebook) throw py::value_error("values is None: give indices (uint8) and codebook (float32 (G, T))");
    idx = typed<uint8_t>(*indices, "indices", "uint8", nnz);
    if (!codebook->dtype().is(py::dtype::of<float>()) || codebook->ndim() != 2 || !(codebook->flags() & py::array::c_style))
      throw py::value_error("codebook: expected a C-contiguous float32 array (G, T)");
    groups = static_cast<size_t>(codebook->shape(0));
    tsize = static_cast<size_t>(codebook->shape(1));
    book = static_cast<const float*>(codebook->data());
  }
  const float* bp = bias ? typed<float>(*bias, "bias", "float32", k_rows) : nullptr;
  // Keep the (possibly viewed) arrays alive while packing: they are the arguments themselves.
  return std::make_shared<Packed>(k::pack_sparse_conv1x1(rp, cp, k_rows, static_cast<size_t>(input_channels),
      values ? (half ? k::SpmmValues::F16 : k::SpmmValues::F32) : k::SpmmValues::Codebook, vf, vh, idx,
                                                         book, groups, tsize, bp, static_cast<size_t>(block)));
}

void run(const py::array& x, const Packed& w, py::array& y, const std::string& act_name, std::optional<float> alpha,
         std::optional<float> beta, int64_t threads) {
  const auto [n, hw] = chw_call(x, y, w.c, w.k, threads);
  const k::Activation act = make_act(act_name, alpha, beta);
  const float* xp = static_cast<const float*>(x.data());
  float* yp = static_cast<float*>(y.mutable_data());
  py::gil_scoped_release release;
  k::sparse_conv1x1(xp, n, hw, w, yp, act, static_cast<size_t>(threads));
}

void define(py::module_& m, py::object cls) {
  m.attr("SparseConv1x1Weights") = cls;
}

}  // namespace

void register_sparse(py::module_& m, py::module_& km) {
  auto cls = py::class_<Packed, std::shared_ptr<Packed>>(
      m, "SparseConv1x1Weights",
      "Packed sparse 1x1 convolution weights (pack_sparse_conv1x1): read-only, usable from several threads.")
      .def_property_readonly("block", [](const Packed& w) { return w.block; })
      .def_property_readonly("rows", [](const Packed& w) { return w.k; })
      .def_property_readonly("cols", [](const Packed& w) { return w.c; })
      .def_property_readonly("nnz", [](const Packed& w) { return w.nnz; })
      .def_property_readonly("stored", [](const Packed& w) { return w.stored; })
      .def_property_readonly("nbytes", [](const Packed& w) { return w.nbytes(); })
      .def_property_readonly("kernel_name", [](const Packed& w) { return std::string(w.kernel_name()); })
      .def_property_readonly("value_kind", [](const Packed& w) { return std::string(kind_name(w.kind)); })
      .def_property_readonly("isa", [](const Packed& w) { return std::string(w.table->name); })
      .def("__repr__", [](const Packed& w) {
        return "SparseConv1x1Weights(rows=" + std::to_string(w.k) + ", cols=" + std::to_string(w.c) +
               ", nnz=" + std::to_string(w.nnz) + ", stored=" + std::to_string(w.stored) + ", block=" +
               std::to_string(w.block) + ", value_kind='" + kind_name(w.kind) + "', kernel_name='" + w.kernel_name() +
               "')";
      });
  define(km, cls);
  const char* pack_doc =
      "Packs CSR weights (row_ptr int64 (K+1,), cols int32 strictly increasing per row, values float32/float16 "
      "or indices uint8 + codebook float32 (G, T), G in {1, K}) for sparse_conv1x1 at the active ISA level; "
      "block=0 picks the block height, else 1, 2, 4 or 8 (8 on avx512 levels). Zero values are dropped.";
  const char* run_doc =
      "y = act(W x + bias) per image: x float32 (N, C, H, W) or (N, C, HW), y float32 (N, K, ...) with the same "
      "pixel count; NaN/inf follow the dense product. Releases the GIL.";
  for (py::module_* mod : {&m, &km}) {
    mod->def("pack_sparse_conv1x1", &pack, py::arg("row_ptr"), py::arg("cols"), py::arg("values"), py::arg("bias"),
             py::arg("input_channels"), py::kw_only(), py::arg("indices") = py::none(),
             py::arg("codebook") = py::none(), py::arg("block") = 0, pack_doc);
    mod->def("sparse_conv1x1", &run, py::arg("x"), py::arg("w"), py::arg("y"), py::arg("act_name") = "none",
             py::arg("act_alpha") = py::none(), py::arg("act_beta") = py::none(), py::arg("threads") = 1, run_doc);
  }
}
