// Prepared kernel calls ("steps"): a binding checks its operands and takes their pointers once, at
// session creation, and returns the call as a Step; a session's Steps then run in one native call
// (Program, bindings_steps.cc) with the GIL released once per run rather than once per kernel.
//
// def_kernel registers one prepare function twice: kernels.<name>(...) checks and runs now (the
// zero-copy entry point the tests and tools call) and kernels.steps.<name>(...) checks and returns
// the Step (what the cpu backend's binders return). One body, so the two cannot drift apart.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <functional>
#include <optional>
#include <utility>
#include <vector>

namespace edgesdk::bindings {

namespace py = pybind11;

// A kernel call bound to its operands. `run` touches only memory that `owners` keep alive (the
// arrays and plans it was prepared from) and runs without the GIL.
struct Step {
  std::function<void()> run;
  std::vector<py::object> owners;
};

inline py::object step_owner(const py::object& o) { return o; }
inline py::object step_owner(const std::optional<py::array>& o) { return o ? py::object(*o) : py::none(); }

template <class... Owners>
Step make_step(std::function<void()> run, const Owners&... owners) {
  return Step{std::move(run), {step_owner(owners)...}};
}

inline void run_released(const Step& step) {
  py::gil_scoped_release release;
  step.run();
}

namespace detail {
template <class... A>
struct prepare_args {
  template <class P>
  static auto run_now(P prepare) {
    return [prepare](A... a) { run_released(prepare(std::forward<A>(a)...)); };
  }
  template <class P>
  static auto as_step(P prepare) {
    return [prepare](A... a) { return prepare(std::forward<A>(a)...); };
  }
};
// The argument list of a prepare function: a lambda's (through its operator()) or a plain function's.
template <class F>
struct prepare_traits : prepare_traits<decltype(&F::operator())> {};
template <class C, class... A>
struct prepare_traits<Step (C::*)(A...) const> : prepare_args<A...> {};
template <class... A>
struct prepare_traits<Step (*)(A...)> : prepare_args<A...> {};
}  // namespace detail

// kernels.<name> (check, run now without the GIL) and kernels.steps.<name> (check, return the Step)
// from one prepare lambda returning a Step. `extra`: pybind11's py::arg / docstring, for both.
template <class Prepare, class... Extra>
void def_kernel(py::module_& km, const char* name, Prepare prepare, const Extra&... extra) {
  using traits = detail::prepare_traits<Prepare>;
  km.def(name, traits::run_now(prepare), extra...);
  py::module_ steps = km.attr("steps");
  steps.def(name, traits::as_step(prepare), extra...);
}

// The same for a method of a bound class: cls.<name> runs now, cls.step returns the Step.
template <class Class, class Prepare, class... Extra>
void def_kernel_method(Class& cls, const char* name, Prepare prepare, const Extra&... extra) {
  using traits = detail::prepare_traits<Prepare>;
  cls.def(name, traits::run_now(prepare), extra...);
  cls.def("step", traits::as_step(prepare), extra...);
}

}  // namespace edgesdk::bindings
