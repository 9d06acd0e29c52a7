// edgesdk._native: the compiled part of edgesdk. For now, CPU feature detection that the
// SIMD kernel dispatch will use; edgesdk/native.py is the typed Python face of it.
#include <pybind11/pybind11.h>

#include "cpu_features.h"

void register_kernels(pybind11::module_& m);  // bindings_kernels.cc
void register_sparse(pybind11::module_& m, pybind11::module_& km);  // bindings_sparse.cc
void register_huffman(pybind11::module_& m, pybind11::module_& km);  // bindings_huffman.cc
void register_lq(pybind11::module_& m, pybind11::module_& km);  // bindings_lq.cc

namespace py = pybind11;

#if !defined(EDGESDK_VERSION) || !defined(EDGESDK_COMPILER_ID) || !defined(EDGESDK_COMPILER_VERSION)
#error "build through CMakeLists.txt, which defines EDGESDK_VERSION and EDGESDK_COMPILER_*"
#endif

namespace {

py::dict cpu_features() {
  const auto f = edgesdk::cpu::detect();
  py::dict flags;
  for (const auto& [name, present] : f.flags) flags[py::str(name)] = present;
  py::dict out;
  out["arch"] = f.arch;
  out["vendor"] = f.vendor;
  out["model"] = f.model;
  out["flags"] = flags;
  return out;
}

py::dict build_info() {
  py::dict out;
  out["compiler"] = EDGESDK_COMPILER_ID;
  out["compiler_version"] = EDGESDK_COMPILER_VERSION;
  out["arch"] = edgesdk::cpu::compiled_arch();
  out["cxx_standard"] = static_cast<int>(__cplusplus / 100 % 100);  // 201703L -> 17
  return out;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "edgesdk native extension: CPU feature detection for SIMD kernel dispatch.";
  m.attr("__version__") = EDGESDK_VERSION;
  m.def("cpu_features", &cpu_features,
        "Dict with arch, vendor, model and flags {name: bool} (fixed key set per arch).");
  m.def("build_info", &build_info,
        "Dict with the compiler id and version, the target arch and the C++ standard (17, 20, ...).");
  register_kernels(m);
  py::module_ km = m.attr("kernels").cast<py::module_>();
  register_sparse(m, km);
  register_huffman(m, km);
  register_lq(m, km);
}
