#!/usr/bin/env bash
# lowrank against llama.cpp on the same GGUF files, interleaved: decode (128
# tokens after a 512-token prompt) and prefill (512 tokens) at 1 and 2
# threads (--prompt and --gen change the lengths, --gen at least 1; --fa
# runs llama.cpp with flash attention, its fastest for long prompts), both
# sides alternating round by round, medians reported with the ratios and
# each side's share of the read bandwidth lowrank's probe measured in the
# same run. lowrank runs with its default KV cache, f16 keys and values
# (bench mode k-f16), as llama.cpp does. Not run in CI.
#
#   scripts/peer-bench.sh [--rounds N] [--threads "1 2"] [--native|--avx512] [--isa "avx2 avx512vnni"]
#                         [--prompt 512] [--gen 128] [--fa] [--ik] MODEL.gguf ...
#
# --ik adds ik_llama.cpp (the fastest CPU fork of llama.cpp, commit pinned
# below) to every round: its llama-bench built -march=native with
# -DGGML_IQK_FA_ALL_QUANTS=OFF, run with -rtr 1 (weights repacked for its
# kernels at load). Source: the git directory $IK_LLAMA_GIT (a clone or
# mirror holding the commit), else cloned from GitHub; built once into
# ${XDG_CACHE_HOME:-~/.cache}/lowrank/peer/ik-<commit> (about 15 minutes on
# 2 cores).
#
# --isa runs lowrank once per kernel path (LOWRANK_ISA) in every round, each
# a row of its own (default: the path lowrank picks by itself).
#
# llama.cpp comes from the llama-cpp-python source package (pinned below; it
# vendors the whole llama.cpp tree), built once into
# ${XDG_CACHE_HOME:-~/.cache}/lowrank/peer/<version>-<flavour>: "avx2"
# (GGML_NATIVE=OFF, AVX2/FMA/F16C: runs on every host this project uses) or,
# with --native, -march=native (faster on AVX-512 hosts, but on a host that
# lists AMX without granting it that build dies of SIGILL: check it runs), or,
# with --avx512, every AVX-512 extension llama.cpp has a switch for (F, VBMI,
# VNNI, BF16) and AVX-VNNI but no AMX: the fastest build that runs on the
# Intel hosts whose AMX kernel dies (its -march=native build does there).
# Output: a markdown table on stdout; raw results in $OUT_DIR (default
# /tmp/lowrank-peer-bench-p<prompt>-g<gen>-fa<0/1>).
set -euo pipefail
cd "$(dirname "$0")/.."

PEER_VERSION=0.3.36
rounds=3
threads="1 2"
flavour=avx2
isas=auto
prompt=512
gen=128
fa=0
ik=0
IK_COMMIT=8337e4cd3861406fc04e0854b1409cd1b027fbc9
models=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --native) flavour=native; shift ;;
    --avx512) flavour=avx512; shift ;;
    --isa) isas=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --gen) gen=$2; shift 2 ;;
    --fa) fa=1; shift ;;
    --ik) ik=1; shift ;;
    -h|--help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "peer-bench: unknown option $1" >&2; exit 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
[[ ${#models[@]} -gt 0 ]] || { echo "peer-bench: give at least one GGUF file" >&2; exit 2; }
for m in "${models[@]}"; do [[ -f $m ]] || { echo "peer-bench: $m: no such file" >&2; exit 2; }; done
[[ -x build/lowrank ]] || { echo "peer-bench: build lowrank first (cmake -S . -B build && cmake --build build)" >&2; exit 2; }

cache="${XDG_CACHE_HOME:-$HOME/.cache}/lowrank/peer/$PEER_VERSION-$flavour"
bench="$cache/llama.cpp/build/bin/llama-bench"
if [[ ! -x "$bench" ]]; then
  echo "peer-bench: building llama-bench from llama-cpp-python==$PEER_VERSION ($flavour) into $cache" >&2
  mkdir -p "$cache"
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$PEER_VERSION" -d "$tmp"
  tar -xzf "$tmp"/llama_cpp_python-$PEER_VERSION.tar.gz -C "$tmp"
  rm -rf "$cache/llama.cpp"
  mv "$tmp/llama_cpp_python-$PEER_VERSION/vendor/llama.cpp" "$cache/llama.cpp"
  rm -rf "$tmp"
  flags=(-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
  [[ $flavour == native ]] && flags=(-DGGML_NATIVE=ON)
  [[ $flavour == avx512 ]] && flags+=(-DGGML_AVX=ON -DGGML_AVX_VNNI=ON -DGGML_BMI2=ON -DGGML_AVX512=ON
                                      -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON)
  cmake -S "$cache/llama.cpp" -B "$cache/llama.cpp/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF "${flags[@]}" >"$cache/cmake.log"
  cmake --build "$cache/llama.cpp/build" -j"$(nproc)" --target llama-bench llama-perplexity \
    >"$cache/build.log"
fi
export LD_LIBRARY_PATH="$cache/llama.cpp/build/bin:${LD_LIBRARY_PATH:-}"

ik_cache="${XDG_CACHE_HOME:-$HOME/.cache}/lowrank/peer/ik-${IK_COMMIT:0:7}"
ik_bench="$ik_cache/src/build/bin/llama-bench"
if [[ $ik == 1 && ! -x "$ik_bench" ]]; then
  echo "peer-bench: building ik_llama.cpp ${IK_COMMIT:0:7} into $ik_cache" >&2
  mkdir -p "$ik_cache"
  git_dir=${IK_LLAMA_GIT:-$ik_cache/git}
  [[ -d $git_dir ]] || git clone --quiet --bare https://github.com/ikawrakow/ik_llama.cpp "$git_dir"
  rm -rf "$ik_cache/src" && mkdir -p "$ik_cache/src"
  # Its vocabulary test files and web UI are not needed to build llama-bench (and a partial
  # mirror may lack their blobs).
  git -C "$git_dir" archive "$IK_COMMIT" -- . ':(exclude)models/*.gguf' \
    ':(exclude)examples/server/public_llamacpp' ':(exclude)examples/server/webui/dist' 2>/dev/null \
    | tar -x -C "$ik_cache/src"
  cmake -S "$ik_cache/src" -B "$ik_cache/src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DGGML_IQK_FA_ALL_QUANTS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    >"$ik_cache/cmake.log"
  cmake --build "$ik_cache/src/build" -j"$(nproc)" --target llama-bench >"$ik_cache/build.log"
fi

out=${OUT_DIR:-/tmp/lowrank-peer-bench-p$prompt-g$gen-fa$fa}
mkdir -p "$out"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
cpu_family=$(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
cpu_model=$(sed -n 's/^model[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
cpu_isa=$(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|avx512f\|avx512_vnni\|avx512_bf16\|avx512_fp16\|amx_tile' | tr '\n' ' ')
cpu="$cpu (family $cpu_family model $cpu_model; ${cpu_isa% })"
for m in "${models[@]}"; do
  for t in $threads; do
    for r in $(seq 1 "$rounds"); do
      tag="$(basename "$m" .gguf)-t$t-r$r"
      echo "peer-bench: $tag" >&2
      "$bench" -m "$m" -t "$t" -p "$prompt" -n "$gen" -fa "$fa" -r 1 -o json >"$out/$tag.llama.json" 2>"$out/$tag.llama.err"
      rm -f "$out/$tag.ik.json"
      # Its own library path: ik_llama.cpp's libggml and libllama are not llama.cpp's.
      [[ $ik == 1 ]] && LD_LIBRARY_PATH="$ik_cache/src/build/bin:$ik_cache/src/build/src:$ik_cache/src/build/ggml/src" \
        "$ik_bench" -m "$m" -t "$t" -p "$prompt" -n "$gen" -fa "$fa" -rtr 1 -r 1 -o json \
        >"$out/$tag.ik.json" 2>"$out/$tag.ik.err"
      for isa in $isas; do
        LOWRANK_ISA=$isa build/lowrank bench -m "$m" --dense "$m" --modes k-f16 --prompt "$prompt" --gen "$gen" --reps 1 \
          -t "$t" --json "$out/$tag.lowrank-$isa.json" >"$out/$tag.lowrank-$isa.txt" 2>/dev/null
      done
    done
  done
done

python3 - "$out" "$cpu" "$flavour" "$PEER_VERSION" "$rounds" "$isas" "$prompt" "$gen" "$fa" "${models[@]}" <<'PY'
import glob, json, os, statistics, sys
out, cpu, flavour, version, rounds, isas, P, G, fa, *models = sys.argv[1:]
fa = ", flash attention" if fa == "1" else ""
ik = bool(glob.glob(f"{out}/*.ik.json"))
peers = ", ik_llama.cpp 8337e4c (native, -rtr 1)" if ik else ""
print(f"CPU: {cpu}; llama.cpp from llama-cpp-python {version} ({flavour} build{fa}){peers}; {rounds} interleaved rounds, medians\n")
ik_head = f" ik pp{P} tok/s | prefill vs ik | ik tg{G} tok/s | decode vs ik |" if ik else ""
print(f"| model | threads | lowrank kernels | llama.cpp pp{P} tok/s | lowrank pp{P} tok/s | prefill ratio | llama.cpp tg{G} tok/s | lowrank tg{G} tok/s | decode ratio |{ik_head} lowrank MB/token | llama.cpp % of probe | lowrank % of probe | probe GB/s |")
print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: | ---: | ---: |" if ik else "") + " ---: | ---: | ---: | ---: |")
for m in models:
    name = os.path.basename(m)[:-5]
    for t in sorted({p.split("-t")[-1].split("-r")[0] for p in glob.glob(f"{out}/{name}-t*-r*.llama.json")}, key=int):
      for isa in isas.split():
        lp, lt, wp, wt, mb, bw, kp, kt = [], [], [], [], [], [], [], []
        for f in sorted(glob.glob(f"{out}/{name}-t{t}-r*.llama.json")):
            for row in json.load(open(f)):
                (lp if row["n_prompt"] > 0 else lt).append(row["avg_ts"])
            if ik:
                for row in json.load(open(f.replace(".llama.json", ".ik.json"))):
                    (kp if row["n_prompt"] > 0 else kt).append(row["avg_ts"])
            lj = json.load(open(f.replace(".llama.json", f".lowrank-{isa}.json")))
            row = lj["rows"][0]
            wp.append(int(P) / (row["prefill_ms"] / 1000))
            wt.append(row["tokens_per_s"])
            mb.append(row["weight_mb_per_token"] + row["kv_mb_per_token"])
            bw.append(lj["read_bandwidth_gbs"])
        kernels = open(f.replace(".llama.json", f".lowrank-{isa}.txt")).read().split("CPU kernels: ")[-1].split(" ")[0]
        med = statistics.median
        share = lambda tps: 100 * tps * med(mb) / 1000 / med(bw)
        ik_cols = (f" {med(kp):.1f} | {med(wp) / med(kp):.2f} | {med(kt):.1f} | {med(wt) / med(kt):.2f} |"
                   if ik else "")
        print(f"| {name} | {t} | {kernels} | {med(lp):.1f} | {med(wp):.1f} | {med(wp) / med(lp):.2f} | {med(lt):.1f} | "
              f"{med(wt):.1f} | {med(wt) / med(lt):.2f} |{ik_cols} {med(mb):.0f} | {share(med(lt)):.0f}% | {share(med(wt)):.0f}% | {med(bw):.1f} |")
PY
