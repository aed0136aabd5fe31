#!/usr/bin/env bash
# Decode speed beside other busy processes: lowrank (and, when given, a
# second lowrank binary and llama.cpp's llama-bench) on one GGUF file, with
# 0, 1, 2, ... processes that spin on the same cores, interleaved round by
# round. Shows what happens when a host has more runnable threads than cores.
# Not run in CI.
#
#   scripts/busy-bench.sh [--rounds N] [--busy "0 1 2"] [--threads T] [--other "BIN ..."] [--llama-bench BIN] MODEL.gguf
#
# Output: one line per (round, busy processes, program): decode tok/s
# (`lowrank bench --modes per-token --prompt 16 --gen 64 --reps 3`, median;
# llama-bench -p 0 -n 64 -r 3, mean).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=2 busy="0 1 2" threads=2 other="" llama=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --busy) busy=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --other) other=$2; shift 2 ;;
    --llama-bench) llama=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "busy-bench: unknown option $1" >&2; exit 2 ;;
    *) model=$1; shift ;;
  esac
done
[[ -n ${model:-} && -f $model ]] || { echo "busy-bench: give one GGUF file" >&2; exit 2; }
[[ -x build/lowrank ]] || { echo "busy-bench: build lowrank first" >&2; exit 2; }
[[ -z $llama ]] || export LD_LIBRARY_PATH="$(dirname "$llama"):${LD_LIBRARY_PATH:-}"
echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores, $threads threads"
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; hogs=(); }
trap stop_hogs EXIT
for r in $(seq 1 "$rounds"); do
  for b in $busy; do
    for _ in $(seq 1 "$b"); do (while :; do :; done) & hogs+=($!); done
    for bin in build/lowrank $other; do
      tps=$(timeout 300 "$bin" bench --modes per-token -m "$model" --prompt 16 --gen 64 -t "$threads" --reps 3 2>/dev/null |
            awk -F'|' '/^\| 1.00/ {gsub(/ /, "", $7); print $7}')
      echo "round $r, $b busy: $bin ${tps:-failed} tok/s"
    done
    if [[ -n $llama ]]; then
      tps=$(timeout 300 "$llama" -m "$model" -t "$threads" -p 0 -n 64 -r 3 -o csv 2>/dev/null | tail -n 1 |
            awk -F, '{gsub(/"/, "", $(NF-1)); printf "%.1f", $(NF-1)}')
      echo "round $r, $b busy: llama-bench ${tps:-failed} tok/s"
    fi
    stop_hogs
  done
done
