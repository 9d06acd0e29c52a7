#include "cpu_features.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <fstream>
#if defined(__linux__)
#include <sys/auxv.h>
#endif
#endif

namespace edgesdk::cpu {
namespace {

[[maybe_unused]] std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  const auto first = s.find_first_not_of(ws);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(ws) - first + 1);
}

#if defined(__x86_64__)

struct Regs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// Zeros when the leaf is above the CPU's maximum, so a missing leaf reads as "no feature".
Regs cpuid(unsigned leaf, unsigned subleaf = 0) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) r = Regs{};
  return r;
}

bool bit(unsigned reg, int n) { return (reg >> n) & 1u; }

// XCR0 lists the register states the OS saves on context switch. Inline asm instead of
// _xgetbv() so this file needs no -mxsave; callers must first check CPUID.1:ECX.OSXSAVE.
unsigned long long xcr0() {
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

std::string vendor_string() {
  const Regs r = cpuid(0);
  char s[13] = {};
  std::memcpy(s, &r.ebx, 4);  // the vendor id is spelled out in EBX, EDX, ECX order
  std::memcpy(s + 4, &r.edx, 4);
  std::memcpy(s + 8, &r.ecx, 4);
  return s;
}

std::string brand_string() {
  char s[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    const Regs r = cpuid(0x80000002u + i);
    const unsigned words[4] = {r.eax, r.ebx, r.ecx, r.edx};
    std::memcpy(s + 16 * i, words, 16);
  }
  return trim(s);
}

std::vector<std::pair<std::string, bool>> x86_flags() {
  const Regs l1 = cpuid(1), l7 = cpuid(7, 0);
  const Regs l7s1 = l7.eax >= 1 ? cpuid(7, 1) : Regs{};
  const unsigned long long xcr = bit(l1.ecx, 27) ? xcr0() : 0;
  // The CPU may have AVX while the OS does not save YMM/ZMM state; using it then corrupts
  // registers across context switches, so gate on XCR0: SSE+AVX state (bits 1, 2), and for
  // AVX-512 also opmask, ZMM0-15 upper halves and ZMM16-31 (bits 5, 6, 7).
  const bool os_avx = (xcr & 0x06) == 0x06;
  const bool os_avx512 = os_avx && (xcr & 0xE0) == 0xE0;
  // AMX: XTILECFG and XTILEDATA (bits 17, 18). Linux sets both where it supports AMX, but a process
  // must still ask for XTILEDATA before its first tile instruction (dispatch.cc, amx_permitted).
  const bool os_amx = (xcr & 0x60000) == 0x60000;
  return {
      {"sse4_2", bit(l1.ecx, 20)},
      {"popcnt", bit(l1.ecx, 23)},
      {"bmi2", bit(l7.ebx, 8)},
      {"avx", os_avx && bit(l1.ecx, 28)},
      {"avx2", os_avx && bit(l7.ebx, 5)},
      {"fma", os_avx && bit(l1.ecx, 12)},
      {"f16c", os_avx && bit(l1.ecx, 29)},
      {"avx_vnni", os_avx && bit(l7s1.eax, 4)},
      {"avx512f", os_avx512 && bit(l7.ebx, 16)},
      {"avx512dq", os_avx512 && bit(l7.ebx, 17)},
      {"avx512cd", os_avx512 && bit(l7.ebx, 28)},
      {"avx512bw", os_avx512 && bit(l7.ebx, 30)},
      {"avx512vl", os_avx512 && bit(l7.ebx, 31)},
      {"avx512vnni", os_avx512 && bit(l7.ecx, 11)},
      {"avx512vpopcntdq", os_avx512 && bit(l7.ecx, 14)},
      {"amx_tile", os_amx && bit(l7.edx, 24)},
      {"amx_int8", os_amx && bit(l7.edx, 25)},
  };
}

#elif defined(__aarch64__)

// Bit values from the kernel UAPI (arch/arm64/include/uapi/asm/hwcap.h), for old libc
// headers and for non-Linux builds that have none.
#ifndef AT_HWCAP2
#define AT_HWCAP2 26
#endif
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
#ifndef HWCAP_FPHP
#define HWCAP_FPHP (1UL << 9)
#endif
#ifndef HWCAP_ASIMDHP
#define HWCAP_ASIMDHP (1UL << 10)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#ifndef HWCAP_SVE
#define HWCAP_SVE (1UL << 22)
#endif
#ifndef HWCAP_ASIMDFHM
#define HWCAP_ASIMDFHM (1UL << 23)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1UL << 13)
#endif
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1UL << 14)
#endif

std::vector<std::pair<std::string, bool>> arm_flags() {
#if defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
#else
  const unsigned long hw = HWCAP_ASIMD, hw2 = 0;  // no aux vector: assume the mandatory Advanced SIMD
#endif
  auto has = [](unsigned long caps, unsigned long mask) { return (caps & mask) == mask; };
  return {
      {"neon", has(hw, HWCAP_ASIMD)},
      {"fp16", has(hw, HWCAP_FPHP | HWCAP_ASIMDHP)},  // scalar and vector fp16 arithmetic
      {"fhm", has(hw, HWCAP_ASIMDFHM)},                // FMLAL/FMLSL: fp16 products into fp32
      {"dotprod", has(hw, HWCAP_ASIMDDP)},
      {"i8mm", has(hw2, HWCAP2_I8MM)},
      {"bf16", has(hw2, HWCAP2_BF16)},
      {"sve", has(hw, HWCAP_SVE)},
  };
}

const char* implementer_name(const std::string& hex) {
  static const std::pair<unsigned long, const char*> kNames[] = {
      {0x41, "ARM"},     {0x42, "Broadcom"}, {0x48, "HiSilicon"}, {0x4e, "NVIDIA"},
      {0x51, "Qualcomm"}, {0x53, "Samsung"}, {0x61, "Apple"},     {0xc0, "Ampere"},
  };
  const unsigned long id = std::strtoul(hex.c_str(), nullptr, 16);
  for (const auto& [code, name] : kNames)
    if (code == id) return name;
  return "unknown";
}

// MIDR fields of the first core listed in /proc/cpuinfo (on big.LITTLE that may be a small
// core); vendor and model stay "unknown" when the file or the fields are missing.
void read_midr(CpuFeatures& f) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, implementer, part;
  while (std::getline(in, line) && (implementer.empty() || part.empty())) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon));
    if (key == "CPU implementer" && implementer.empty()) implementer = trim(line.substr(colon + 1));
    if (key == "CPU part" && part.empty()) part = trim(line.substr(colon + 1));
  }
  if (implementer.empty() || part.empty()) return;
  f.vendor = implementer_name(implementer);
  f.model = "implementer " + implementer + " part " + part;
}

#endif

}  // namespace

const char* compiled_arch() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown";
#endif
}

CpuFeatures detect() {
  CpuFeatures f{compiled_arch(), "unknown", "unknown", {}};
#if defined(__x86_64__)
  f.vendor = vendor_string();
  const std::string brand = brand_string();
  if (!brand.empty()) f.model = brand;
  f.flags = x86_flags();
#elif defined(__aarch64__)
  read_midr(f);
  f.flags = arm_flags();
#endif
  return f;
}

}  // namespace edgesdk::cpu
