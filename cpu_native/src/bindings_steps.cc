// kernels.Step, kernels.Program and the steps that are not one kernel (chain, copy): see
// bindings_steps.h. A run of a session used to cross from Python into C++ once per step (0.3-0.5
// us each: argument conversion, operand checks, activation lookup, GIL release); a Program crosses
// once per run and its Steps carry their checked pointers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings_steps.h"

namespace py = pybind11;
using edgesdk::bindings::Step;

namespace {

// A session's runners in order: Steps run natively, any other callable (numpy copies, reference
// fallbacks, composite Python runners) is called with the GIL held. Consecutive Steps run under
// one GIL release.
class Program {
 public:
  explicit Program(const py::list& runners) {
    for (const py::handle r : runners) {
      if (py::isinstance<Step>(r)) items_.push_back({r.cast<std::shared_ptr<Step>>(), py::none()});
      else if (PyCallable_Check(r.ptr())) items_.push_back({nullptr, py::reinterpret_borrow<py::object>(r)});
      else throw py::type_error("Program: runners must be Steps or callables, got " +
                                std::string(py::str(py::type::of(r))));
    }
  }

  void run() const {
    size_t i = 0;
    while (i < items_.size()) {
      if (items_[i].step == nullptr) {
        items_[i].call();
        ++i;
        continue;
      }
      py::gil_scoped_release release;
      for (; i < items_.size() && items_[i].step != nullptr; ++i) items_[i].step->run();
    }
  }

  size_t native_steps() const {
    size_t n = 0;
    for (const Item& item : items_) n += item.step != nullptr;
    return n;
  }
  size_t size() const { return items_.size(); }

 private:
  struct Item {
    std::shared_ptr<Step> step;  // null: a Python callable
    py::object call;
  };
  std::vector<Item> items_;
};

size_t nbytes_of(const py::array& a) { return static_cast<size_t>(a.nbytes()); }

}  // namespace

void register_steps(py::module_& km) {
  py::module_ steps = km.def_submodule(
      "steps", "Prepared kernel calls: the functions of edgesdk._native.kernels with the same arguments, "
               "which check them and return a Step instead of running (the cpu backend's runners).");
  py::class_<Step, std::shared_ptr<Step>>(km, "Step", "A kernel call bound to its operands; call it to run it.")
      .def("__call__", &edgesdk::bindings::run_released);

  py::class_<Program>(km, "Program",
                      "A session's runners (Steps run natively, other callables through Python), run in "
                      "order by one call.")
      .def(py::init<const py::list&>(), py::arg("runners"))
      .def("run", &Program::run)
      .def_property_readonly("native_steps", &Program::native_steps, "How many runners are Steps.")
      .def("__len__", &Program::size);

  steps.def("chain", [](const std::vector<std::shared_ptr<Step>>& parts) {
    for (const auto& p : parts)
      if (p == nullptr) throw py::value_error("chain: None is not a Step");
    // The parts it holds keep their own operands alive: the chain owns nothing more.
    return Step{[parts] { for (const auto& p : parts) p->run(); }, {}};
  }, py::arg("parts"), "One Step running ``parts`` in order.");

  edgesdk::bindings::def_kernel(km, "copy_bytes", [](const py::array& src, py::array& dst) {
    if (!(src.flags() & py::array::c_style) || !(dst.flags() & py::array::c_style))
      throw py::value_error("copy_bytes: src and dst must be C-contiguous");
    if (!dst.writeable()) throw py::value_error("copy_bytes: dst must be writable");
    if (nbytes_of(src) != nbytes_of(dst))
      throw py::value_error("copy_bytes: src has " + std::to_string(nbytes_of(src)) + " bytes, dst " +
                            std::to_string(nbytes_of(dst)));
    const void* sp = src.data();
    void* dp = dst.mutable_data();
    const size_t n = nbytes_of(src);
    return edgesdk::bindings::make_step([sp, dp, n] { std::memmove(dp, sp, n); }, src, dst);
  }, py::arg("src"), py::arg("dst"), "dst's bytes = src's (C-contiguous, the same size; overlap allowed).");
}
