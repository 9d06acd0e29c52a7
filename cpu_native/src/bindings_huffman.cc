// Python bindings of the Huffman-coded weight blocks (kernels/huffman.h): huffman_decode (every
// entry of a HuffmanBlocks tensor; the stream's validator on every package load) and
// HuffmanConv1x1 (the streaming sparse 1x1 convolution). Defined on edgesdk._native itself and on
// edgesdk._native.kernels. A stream that breaks the format, or bad arguments, raise ValueError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

#include "bindings_util.h"
#include "kernels/huffman.h"

namespace py = pybind11;
namespace k = edgesdk::kernels;
using edgesdk::bindings::make_act;
using edgesdk::bindings::chw_call;
using edgesdk::bindings::shape_of;
using edgesdk::bindings::table_for;

namespace {

// A 1-d C-contiguous array of T (dtype checked by kind and size), length checked when want >= 0.
template <class T>
const T* vec(const py::array& a, const char* name, char kind, py::ssize_t want = -1) {
  const py::dtype dt = a.dtype();
  if (dt.kind() != kind || static_cast<size_t>(dt.itemsize()) != sizeof(T))
    throw py::value_error(std::string(name) + ": expected " + (kind == 'u' ? "uint" : kind == 'f' ? "float" : "int") +
                          std::to_string(8 * sizeof(T)) + ", got " + std::string(py::str(dt)));
  if (a.ndim() != 1) throw py::value_error(std::string(name) + ": expected a 1-d array");
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + ": must be C-contiguous");
  if (want >= 0 && a.shape(0) != want)
    throw py::value_error(std::string(name) + ": expected " + std::to_string(want) + " values, got " +
                          std::to_string(a.shape(0)));
  return static_cast<const T*>(a.data());
}

struct Arrays {
  k::HuffmanStream s;
  k::HuffmanTable gaps, index;
  k::HuffmanPairTable pairs;
  size_t total = 0;
};

void fill(Arrays& a, int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols, const std::string& layout,
          const py::array& stream, const py::array& offsets, const py::array& entries,
          const std::optional<py::array>& gap_lengths, const std::optional<py::array>& index_lengths,
          std::optional<bool> pairs = std::nullopt) {
  if (rows <= 0 || cols <= 0) throw py::value_error("rows and cols must be positive");
  if (block_rows <= 0 || block_rows > (1 << 16) || block_cols <= 0 || block_cols > 4095)
    throw py::value_error("blocks of 1..65536 rows and 1..4095 columns");
  if (layout != "sparse" && layout != "dense") throw py::value_error("layout must be 'sparse' or 'dense'");
  k::HuffmanStream& s = a.s;
  s.rows = static_cast<size_t>(rows);
  s.cols = static_cast<size_t>(cols);
  s.block_rows = static_cast<size_t>(block_rows);
  s.block_cols = static_cast<size_t>(block_cols);
  s.dense = layout == "dense";
  const size_t nb = s.blocks();
  s.stream = vec<uint8_t>(stream, "stream", 'u');
  s.stream_bytes = static_cast<size_t>(stream.shape(0));
  s.offsets = vec<uint32_t>(offsets, "block_offsets", 'u', static_cast<py::ssize_t>(nb + 1));
  s.entries = vec<uint32_t>(entries, "block_entries", 'u', static_cast<py::ssize_t>(nb));
  if (gap_lengths) {
    a.gaps = k::HuffmanTable::build(vec<uint8_t>(*gap_lengths, "gap_lengths", 'u'),
                                    static_cast<size_t>(gap_lengths->shape(0)), "gap_lengths");
    s.gaps = &a.gaps;
  }
  if (index_lengths) {
    a.index = k::HuffmanTable::build(vec<uint8_t>(*index_lengths, "index_lengths", 'u'),
                                     static_cast<size_t>(index_lengths->shape(0)), "index_lengths");
    s.index = &a.index;
  }
  s.check();
  for (size_t b = 0; b < nb; ++b) a.total += s.entries[b];
  // The pair table (4096 entries to build) pays on large tensors; pairs forces it on or off.
  if (s.gaps != nullptr && s.index != nullptr && pairs.value_or(a.total > 16384)) {
    a.pairs = k::HuffmanPairTable::build(a.gaps, a.index, static_cast<unsigned>(s.block_cols));
    s.pairs = &a.pairs;
  }
}

py::tuple decode(int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols, const std::string& layout,
                 const py::array& stream, const py::array& offsets, const py::array& entries,
                 std::optional<py::array> gap_lengths, std::optional<py::array> index_lengths,
                 std::optional<bool> pairs) {
  Arrays a;
  fill(a, rows, cols, block_rows, block_cols, layout, stream, offsets, entries, gap_lengths, index_lengths, pairs);
  const auto n = static_cast<py::ssize_t>(a.total);
  py::array_t<int64_t> r(n), c(n), i(n);
  int64_t* rp = r.mutable_data();
  int64_t* cp = c.mutable_data();
  int64_t* ip = i.mutable_data();
  {
    py::gil_scoped_release release;
    k::huffman_decode_all(a.s, rp, cp, ip);
  }
  return py::make_tuple(r, c, i);
}

using Conv = k::HuffmanConv1x1;

std::shared_ptr<Conv> prepare(int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols,
                              const std::string& layout, const py::array& stream, const py::array& offsets,
                              const py::array& entries, std::optional<py::array> gap_lengths,
                              std::optional<py::array> index_lengths, std::optional<py::array> codebook,
                              std::optional<py::array> values, std::optional<py::array> bias,
                              const std::optional<std::string>& isa) {
  Arrays a;  // checks the arguments (the stream itself: prepare decodes it)
  fill(a, rows, cols, block_rows, block_cols, layout, stream, offsets, entries, gap_lengths, index_lengths);
  k::SpmmValues kind = k::SpmmValues::Codebook;
  const void* raw = nullptr;
  const float* book = nullptr;
  size_t groups = 0;
  if (codebook) {
    if (values) throw py::value_error("give a codebook or raw values, not both");
    if (!index_lengths) throw py::value_error("a codebook needs index_lengths");
    if (!codebook->dtype().is(py::dtype::of<float>()) || codebook->ndim() != 2 || !(codebook->flags() & py::array::c_style))
      throw py::value_error("codebook: expected a C-contiguous float32 array (G, T)");
    if (codebook->shape(1) != index_lengths->shape(0))
      throw py::value_error("codebook: " + std::to_string(codebook->shape(1)) + " entries a row, index_lengths has " +
                            std::to_string(index_lengths->shape(0)));
    groups = static_cast<size_t>(codebook->shape(0));
    book = static_cast<const float*>(codebook->data());
  } else {
    if (!values) throw py::value_error("give a codebook (with index_lengths) or raw values (float32 / float16)");
    if (index_lengths) throw py::value_error("raw values with index_lengths");
    if (values->dtype().is(py::dtype::of<float>())) {
      kind = k::SpmmValues::F32;
      raw = vec<float>(*values, "values", 'f', static_cast<py::ssize_t>(a.total));
    } else if (values->dtype().is(py::dtype("float16"))) {
      kind = k::SpmmValues::F16;
      raw = vec<uint16_t>(values->view("uint16"), "values", 'u', static_cast<py::ssize_t>(a.total));
    } else {
      throw py::value_error("values: expected float32 or float16, got " + std::string(py::str(values->dtype())));
    }
  }
  const float* bp = bias ? vec<float>(*bias, "bias", 'f', rows) : nullptr;
  const k::KernelTable* t = table_for(isa);
  const size_t icount = index_lengths ? static_cast<size_t>(index_lengths->shape(0)) : 0;
  const size_t gcount = gap_lengths ? static_cast<size_t>(gap_lengths->shape(0)) : 0;
  return std::make_shared<Conv>(k::prepare_huffman_conv1x1(
      a.s.rows, a.s.cols, a.s.block_rows, a.s.block_cols, a.s.dense, a.s.stream, a.s.stream_bytes, a.s.offsets,
      a.s.entries, gap_lengths ? static_cast<const uint8_t*>(gap_lengths->data()) : nullptr, gcount,
      index_lengths ? static_cast<const uint8_t*>(index_lengths->data()) : nullptr, icount, kind, raw, book, groups,
      bp, t));
}

double run(const Conv& w, const py::array& x, py::array& y, const std::string& act_name, std::optional<float> alpha,
           std::optional<float> beta, int64_t threads) {
  const auto [n, hw] = chw_call(x, y, w.c, w.k, threads);
  const k::Activation act = make_act(act_name, alpha, beta);
  const float* xp = static_cast<const float*>(x.data());
  float* yp = static_cast<float*>(y.mutable_data());
  py::gil_scoped_release release;
  return k::huffman_conv1x1(xp, n, hw, w, yp, act, static_cast<size_t>(threads)).decode_seconds;
}

const char* kind_name(k::SpmmValues v) {
  switch (v) {
    case k::SpmmValues::F32: return "f32";
    case k::SpmmValues::F16: return "f16";
    case k::SpmmValues::Codebook: return "codebook";
  }
  return "?";
}

}  // namespace

void register_huffman(py::module_& m, py::module_& km) {
  const char* decode_doc =
      "Every entry of Huffman-coded blocks (edgesdk.compress.huffman's format): (rows, cols, idx) int64 arrays in "
      "stored order, idx -1 without index_lengths (raw values). stream uint8 (with its 8 padding bytes), "
      "block_offsets / block_entries uint32, gap_lengths (sparse layout) / index_lengths uint8. Raises ValueError "
      "naming the block on a stream that breaks the format. pairs: decode (gap, index) pairs by one lookup "
      "(default: on large tensors; the result is the same). Releases the GIL.";
  auto cls = py::class_<Conv, std::shared_ptr<Conv>>(
      m, "HuffmanConv1x1",
      "Streaming sparse 1x1 convolution from Huffman-coded weight blocks: each block row is decoded into a "
      "per-thread workspace just before use. Read-only, usable from several threads.")
      .def(py::init(&prepare), py::arg("rows"), py::arg("cols"), py::arg("block_rows"), py::arg("block_cols"),
           py::arg("layout"), py::arg("stream"), py::arg("block_offsets"), py::arg("block_entries"),
           py::arg("gap_lengths") = py::none(), py::arg("index_lengths") = py::none(), py::kw_only(),
           py::arg("codebook") = py::none(), py::arg("values") = py::none(), py::arg("bias") = py::none(),
           py::arg("isa") = py::none(),
           "Prepares the layer (K = rows output channels, C = cols input channels): codebook float32 (G, T), G in "
           "{1, K}, T = len(index_lengths), or raw values float32 / float16 (one per entry); bias float32 (K,). "
           "isa: a level this CPU runs (default: the active one). Decodes the stream once to check it.")
      .def("run", &run, py::arg("x"), py::arg("y"), py::arg("act_name") = "none", py::arg("act_alpha") = py::none(),
           py::arg("act_beta") = py::none(), py::arg("threads") = 1,
           "y = act(W x + bias) per image: x float32 (N, C, H, W) or (N, C, HW), y float32 (N, K, ...); NaN/inf "
           "follow the dense product. Returns the seconds spent decoding, summed over the threads. Releases the GIL.")
      .def("decode_only", [](const Conv& w, int64_t threads) {
             if (threads < 1) throw py::value_error("threads must be >= 1");
             py::gil_scoped_release release;
             k::huffman_conv1x1_decode_only(w, static_cast<size_t>(threads));
           }, py::arg("threads") = 1,
           "Decodes every block row into the workspaces as run does, multiplying nothing (benchmarks).")
      .def_property_readonly("rows", [](const Conv& w) { return w.k; })
      .def_property_readonly("cols", [](const Conv& w) { return w.c; })
      .def_property_readonly("nnz", [](const Conv& w) { return w.nnz; })
      .def_property_readonly("nbytes", [](const Conv& w) { return w.nbytes(); })
      .def_property_readonly("workspace_entries", [](const Conv& w) { return w.max_block_row_entries; })
      .def_property_readonly("kernel_name", [](const Conv& w) { return std::string(w.kernel_name); })
      .def_property_readonly("value_kind", [](const Conv& w) { return std::string(kind_name(w.kind)); })
      .def_property_readonly("isa", [](const Conv& w) { return std::string(w.table->name); })
      .def("__repr__", [](const Conv& w) {
        return "HuffmanConv1x1(rows=" + std::to_string(w.k) + ", cols=" + std::to_string(w.c) + ", block=(" +
               std::to_string(w.block_rows) + ", " + std::to_string(w.block_cols) + "), nnz=" + std::to_string(w.nnz) +
               ", value_kind='" + kind_name(w.kind) + "', kernel_name='" + w.kernel_name + "')";
      });
  km.attr("HuffmanConv1x1") = cls;
  for (py::module_* mod : {&m, &km})
    mod->def("huffman_decode", &decode, py::arg("rows"), py::arg("cols"), py::arg("block_rows"), py::arg("block_cols"),
             py::arg("layout"), py::arg("stream"), py::arg("block_offsets"), py::arg("block_entries"),
             py::arg("gap_lengths") = py::none(), py::arg("index_lengths") = py::none(), py::kw_only(),
             py::arg("pairs") = py::none(), decode_doc);
}
