// Runtime CPU feature detection, shared by the Python extension and the standalone driver.
// Plain C++17 with no Python dependency so it can be cross-compiled and run under an emulator.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace edgesdk::cpu {

struct CpuFeatures {
  std::string arch;    // ISA this binary was compiled for: "x86_64", "aarch64", ...
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", "ARM", ... or "unknown"
  std::string model;   // x86 brand string, aarch64 "implementer 0x41 part 0xd0c", or "unknown"
  // Fixed key set and order per arch (false when absent) so callers can index it blindly.
  std::vector<std::pair<std::string, bool>> flags;
};

// The ISA name of the code being run; dispatch picks kernels for this ISA only.
const char* compiled_arch();

// Features both the CPU and the OS support (e.g. AVX is false if the OS does not save YMM state).
CpuFeatures detect();

}  // namespace edgesdk::cpu
