// Run-time CPU check. The whole project is compiled with -mavx2 -mfma -mf16c,
// so main() must call require_cpu_features() first, before any code that may
// use those instructions runs. cpu_features.cpp itself is compiled for the
// baseline x86-64 ISA (per-function target attributes), so the check and its
// error message work on a CPU without AVX.
#pragma once

#include <string>

namespace lr {

// True when the CPU (and OS) support AVX2, FMA and F16C.
bool cpu_has_avx2_fma_f16c();

// Throws lr::Error naming the missing features, e.g. "this build of lowrank
// needs a CPU with AVX2, FMA and F16C; this CPU lacks: FMA".
void require_cpu_features();

// The instruction sets the CPU kernels can be run with. Every path computes
// the same integer sums, so their results are bit-identical.
//   Avx2:       AVX2+FMA+F16C, the baseline every supported CPU has.
//   Avx512Vnni: AVX-512 F/BW/VL with VNNI (vpdpbusd / vpdpwssd for the
//               block formats' integer dot products, 32 vector registers,
//               512-bit registers for K-quant chunk pairs, Q8_0 block pairs
//               and the prompt tile).
enum class Isa { Avx2, Avx512Vnni };
const char* isa_name(Isa isa);  // "avx2", "avx512vnni"

// True when the CPU and the OS (its saved register state) support the path.
bool cpu_supports(Isa isa);

// The path the kernels take: the best the CPU supports, unless the
// environment variable LOWRANK_ISA names one ("avx2" or "avx512vnni"; "auto"
// or unset: the best). The first call reads the environment; an unknown
// value, or a path this CPU lacks, throws lr::Error naming LOWRANK_ISA, so
// main() calls it once before any kernel runs.
Isa kernel_isa();
// Switches the path for the whole process (tests run every path the CPU
// supports); throws lr::Error when the CPU lacks it.
void set_kernel_isa(Isa isa);
// The path LOWRANK_ISA asks for on a CPU with the given support (the rule
// kernel_isa() applies; value may be null). Throws lr::Error naming the
// variable.
Isa isa_from_env(const char* value, bool has_avx512vnni);

// The instruction-set path the CPU kernels take, for --version and bench,
// e.g. "avx512vnni (AVX-512 F/BW/VL+VNNI for the block formats and Q8_0, ...)" or "avx2
// (AVX2+FMA+F16C)", with the extensions this CPU has that no kernel uses
// named after it.
std::string cpu_kernel_path();

// AMX on this host, found without risking the process: CPUID must list it
// (AMX-TILE), the OS must grant the tile data state
// (arch_prctl(ARCH_REQ_XCOMP_PERM)), and a forked child must run a tile
// instruction (ldtilecfg, tilezero, tilerelease) without a fault. Some hosts
// list AMX and fault on the first tile instruction. Probed once (the
// permission request is the process's, for all its threads); --version and
// bench report it. Where it is Usable, CPUID lists AMX-INT8 and the kernel
// path is avx512vnni, the block formats' prompt kernels take its tiles
// (backend/cpu/kernels/kernels_amx.h) when amx_allowed_by_env().
enum class Amx { NotListed, NotGranted, Faults, Usable };
Amx amx_status();
const char* amx_status_name(Amx a);  // e.g. "listed by CPUID, the OS does not grant its tile state"
// Whether CPUID lists AMX-INT8 (the tile products of bytes).
bool cpu_lists_amx_int8();
// True when the environment variable LOWRANK_AMX is set to anything but ""
// or "0": the AMX prompt kernels are opt-in until they have run on an AMX
// host (their tests ran against a software model of the tile unit); read once.
bool amx_allowed_by_env();

// The same check for given feature flags (used by require_cpu_features() and
// by tests).
void require_cpu_features(bool has_avx2, bool has_fma, bool has_f16c);

}  // namespace lr
