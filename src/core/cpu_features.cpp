// The CPU check (the LR_BASELINE functions) is compiled for the baseline
// x86-64 ISA and avoids std::string / fmt, whose inline code would be compiled
// with the project's AVX flags: it must run on CPUs without AVX. The kernel
// path selection below it runs only after the check has passed.
#include "core/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"

#if defined(__clang__)
#define LR_BASELINE __attribute__((target("no-avx"), noinline))
#elif defined(__GNUC__)
#define LR_BASELINE __attribute__((target("no-avx,no-avx2,no-fma,no-f16c"), noinline))
#else
#define LR_BASELINE
#endif

namespace lr {

namespace {

LR_BASELINE bool has_f16c() {
#if defined(__clang__)
  // clang's __builtin_cpu_supports does not know "f16c": CPUID.1:ECX bit 29.
  // (AVX2 support, checked alongside, already implies the OS saves YMM state.)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  return (c >> 29) & 1u;
#else
  return __builtin_cpu_supports("f16c");
#endif
}

LR_BASELINE void append(char* buf, unsigned& len, unsigned cap, const char* s) {
  while (*s && len + 1 < cap) buf[len++] = *s++;
  buf[len] = '\0';
}

}  // namespace

LR_BASELINE bool cpu_has_avx2_fma_f16c() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
}

LR_BASELINE void require_cpu_features(bool has_avx2, bool has_fma, bool has_f16c) {
  if (has_avx2 && has_fma && has_f16c) return;
  char msg[160];
  unsigned len = 0;
  msg[0] = '\0';
  append(msg, len, sizeof msg,
         "this build of lowrank needs a CPU with AVX2, FMA and F16C; this CPU lacks: ");
  const char* names[3] = {"AVX2", "FMA", "F16C"};
  const bool have[3] = {has_avx2, has_fma, has_f16c};
  bool first = true;
  for (int i = 0; i < 3; ++i) {
    if (have[i]) continue;
    if (!first) append(msg, len, sizeof msg, ", ");
    append(msg, len, sizeof msg, names[i]);
    first = false;
  }
  throw Error(msg);
}

LR_BASELINE void require_cpu_features() {
  __builtin_cpu_init();
  require_cpu_features(__builtin_cpu_supports("avx2") != 0, __builtin_cpu_supports("fma") != 0,
                       has_f16c());
}

const char* isa_name(Isa isa) {
  return isa == Isa::Avx512Vnni ? "avx512vnni" : "avx2";
}

bool cpu_supports(Isa isa) {
  __builtin_cpu_init();  // libgcc also checks that the OS saves the ZMM state (XCR0)
  if (isa == Isa::Avx2) return cpu_has_avx2_fma_f16c();
  return cpu_has_avx2_fma_f16c() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
}

Isa isa_from_env(const char* value, bool has_avx512vnni) {
  const Isa best = has_avx512vnni ? Isa::Avx512Vnni : Isa::Avx2;
  if (!value || !*value || std::string(value) == "auto") return best;
  const std::string v = value;
  if (v == "avx2") return Isa::Avx2;
  if (v == "avx512vnni") {
    if (!has_avx512vnni)
      throw Error(
          "LOWRANK_ISA=avx512vnni: this CPU lacks AVX-512 F/BW/VL with VNNI (use avx2 or auto)");
    return Isa::Avx512Vnni;
  }
  throw Error("LOWRANK_ISA='" + v + "' is not a kernel path (expected auto, avx2 or avx512vnni)");
}

namespace {
std::atomic<int> g_isa{-1};         // the path in use; -1 until first asked
std::atomic<bool> g_forced{false};  // chosen by LOWRANK_ISA
}  // namespace

Isa kernel_isa() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("LOWRANK_ISA");
    const Isa isa = isa_from_env(env, cpu_supports(Isa::Avx512Vnni));
    g_forced = env && *env && std::string(env) != "auto";
    int expected = -1;
    g_isa.compare_exchange_strong(expected, int(isa));
    v = g_isa.load();
  }
  return Isa(v);
}

void set_kernel_isa(Isa isa) {
  if (!cpu_supports(isa))
    throw Error(std::string("this CPU cannot run the ") + isa_name(isa) + " kernels");
  g_isa = int(isa);
  g_forced = false;
}

namespace {

constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl: request a dynamic XSAVE feature
constexpr long kXfeatureXtiledata = 18;     // the AMX tile data

bool amx_listed() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 24) & 1u);  // AMX-TILE
}

// In a child process: one tile configured, zeroed and released. A fault
// kills the child, not the caller.
bool tile_instructions_run() {
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    alignas(64) unsigned char cfg[64] = {};
    cfg[0] = 1;    // palette 1
    cfg[16] = 64;  // tile 0: 64 bytes per row
    cfg[48] = 16;  // tile 0: 16 rows
    asm volatile("ldtilecfg %0\n\ttilezero %%tmm0\n\ttilerelease" : : "m"(cfg) : "memory");
    _exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

Amx amx_status() {
  static const Amx status = [] {
    if (!amx_listed()) return Amx::NotListed;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return Amx::NotGranted;
    return tile_instructions_run() ? Amx::Usable : Amx::Faults;
  }();
  return status;
}

bool cpu_lists_amx_int8() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 25) & 1u);
}

bool amx_allowed_by_env() {
  static const bool allowed = [] {
    const char* v = std::getenv("LOWRANK_AMX");
    return v && *v && std::string(v) != "0";
  }();
  return allowed;
}

const char* amx_status_name(Amx a) {
  switch (a) {
    case Amx::NotListed:
      return "not listed";
    case Amx::NotGranted:
      return "listed by CPUID, the OS does not grant its tile state";
    case Amx::Faults:
      return "listed by CPUID and granted, but a tile instruction faults";
    case Amx::Usable:
      return "listed by CPUID, granted, a tile instruction runs";
  }
  return "?";
}

std::string cpu_kernel_path() {
  __builtin_cpu_init();
  const Isa isa = kernel_isa();
  std::string path =
      isa == Isa::Avx512Vnni
          ? "avx512vnni (AVX-512 F/BW/VL+VNNI for the block formats and Q8_0, 512-bit prompt tiles, AVX2 elsewhere)"
          : "avx2 (AVX2+FMA+F16C)";
  if (g_forced) path += ", chosen by LOWRANK_ISA";
  std::string unused;
  auto note = [&](bool has, const char* name) {
    if (has) unused += std::string(unused.empty() ? "" : ", ") + name;
  };
  if (isa == Isa::Avx2) {
    note(__builtin_cpu_supports("avx512f"), "avx512f");
    note(__builtin_cpu_supports("avx512bw"), "avx512bw");
    note(__builtin_cpu_supports("avx512vl"), "avx512vl");
    note(__builtin_cpu_supports("avx512vnni"), "avx512vnni");
  }
  note(__builtin_cpu_supports("avx512bf16"), "avx512bf16");
  // AMX: probed in a child process (amx_status); where it runs and
  // LOWRANK_AMX=1 asks for it, the block formats' prompts of 16 tokens and
  // more take its tiles (kernels_amx.h; off by default until its tiles have
  // run on an AMX host: tested here against a software model only).
  const Amx amx = amx_status();
  const std::string amx_name = std::string("amx (") + amx_status_name(amx) + ")";
  const bool amx_used = amx == Amx::Usable && isa == Isa::Avx512Vnni && cpu_lists_amx_int8();
  if (amx_used && amx_allowed_by_env())
    path += "; AMX-INT8 tiles for the block formats' prompts, " + amx_name;
  else if (amx != Amx::NotListed)
    note(true,
         (amx_name + (amx_used ? ", its prompt kernels off (LOWRANK_AMX=1 turns them on)" : ""))
             .c_str());
  return path + (unused.empty() ? "" : "; this CPU also has " + unused + ", which no kernel uses");
}

}  // namespace lr
