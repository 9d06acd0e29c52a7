// Standalone driver: prints what edgesdk._native.cpu_features() reports, without Python.
// Used to check detection on other ISAs, e.g. a static aarch64 build run under qemu-aarch64.
// Output: "arch: ...", "vendor: ...", "model: ..." then one "name=0|1" line per flag.
#include <cstdio>

#include "cpu_features.h"

int main() {
  const auto f = edgesdk::cpu::detect();
  std::printf("arch: %s\nvendor: %s\nmodel: %s\n", f.arch.c_str(), f.vendor.c_str(), f.model.c_str());
  for (const auto& [name, present] : f.flags) std::printf("%s=%d\n", name.c_str(), present ? 1 : 0);
  return 0;
}
