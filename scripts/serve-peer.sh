#!/usr/bin/env bash
# lowrank serve against llama-server on the same GGUF file, same threads and
# slots: scripts/serve-bench.py at each concurrency, the two servers taking
# turns level by level (one server runs at a time). Not run in CI.
#
#   scripts/serve-peer.sh [--threads 2] [--slots 8] [--concurrency 1,2,4,8,16]
#                         [--prompt-tokens 256] [--gen 64] [--native] [--no-peer] MODEL.gguf [LOWRANK_MODEL.gguf]
#
# A second file runs on lowrank only, as a third column (a compressed model
# beside its dense source); --no-peer leaves llama-server out. llama-server comes from the llama-cpp-python
# source package (pinned as in scripts/peer-bench.sh), built once into
# ${XDG_CACHE_HOME:-~/.cache}/lowrank/peer/<version>-<flavour>.
# Output: markdown tables on stdout; raw rows in $OUT_DIR (default /tmp/lowrank-serve-peer).
# LOWRANK_SERVE_ARGS adds flags to lowrank serve (e.g. "--decode-chunk 512").
set -euo pipefail
cd "$(dirname "$0")/.."

PEER_VERSION=0.3.36
threads=2 slots=8 levels=1,2,4,8,16 ptok=256 gen=64 flavour=avx2 peer=1
files=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --concurrency) levels=$2; shift 2 ;;
    --prompt-tokens) ptok=$2; shift 2 ;;
    --gen) gen=$2; shift 2 ;;
    --native) flavour=native; shift ;;
    --no-peer) peer=0; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "serve-peer: unknown option $1" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
[[ ${#files[@]} -ge 1 ]] || { echo "serve-peer: give a GGUF file" >&2; exit 2; }
model=${files[0]}
[[ -x build/lowrank ]] || { echo "serve-peer: build lowrank first" >&2; exit 2; }

cache="${XDG_CACHE_HOME:-$HOME/.cache}/lowrank/peer/$PEER_VERSION-$flavour"
server="$cache/llama.cpp/build/bin/llama-server"
if [[ $peer == 1 && ! -x "$server" ]]; then
  [[ -d "$cache/llama.cpp" ]] || { echo "serve-peer: run scripts/peer-bench.sh once (it fetches llama.cpp into $cache)" >&2; exit 2; }
  echo "serve-peer: building llama-server in $cache" >&2
  cmake -S "$cache/llama.cpp" -B "$cache/llama.cpp/build" -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_EXAMPLES=ON >"$cache/cmake-server.log"
  cmake --build "$cache/llama.cpp/build" -j"$(nproc)" --target llama-server >"$cache/build-server.log"
fi
export LD_LIBRARY_PATH="$cache/llama.cpp/build/bin:${LD_LIBRARY_PATH:-}"
out=${OUT_DIR:-/tmp/lowrank-serve-peer}
mkdir -p "$out"
port=18181

wait_ready() {  # PID LOG
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 "$1" 2>/dev/null || { echo "serve-peer: the server exited:" >&2; tail -n 5 "$2" >&2; return 1; }
    sleep 0.2
  done
  echo "serve-peer: server on port $port not ready" >&2; return 1
}
# run NAME LEVEL CMD...: one server, one concurrency level, then stop it.
run() {
  local name=$1 level=$2; shift 2
  port=$((port + 1))  # a fresh port: the last server's may still be in TIME_WAIT
  "$@" "$port" >"$out/$name-c$level.log" 2>&1 &  # the command ends in --port
  local pid=$!
  wait_ready "$pid" "$out/$name-c$level.log"
  scripts/serve-bench.py --url "http://127.0.0.1:$port" --concurrency "$level" --prompt-tokens "$ptok" --gen "$gen" \
    --json "$out/$name-c$level.json" | tail -n 1
  kill -TERM "$pid"; wait "$pid" || true
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
echo "CPU: $cpu; $threads threads, $slots slots, prompts ~$ptok tokens, $gen out; llama-server from llama-cpp-python $PEER_VERSION ($flavour)"
for level in ${levels//,/ }; do
  echo "## concurrency $level"
  if [[ $peer == 1 ]]; then
    run llama "$level" "$server" -m "$model" -t "$threads" -np "$slots" -c $((slots * (ptok + gen + 64))) \
      --host 127.0.0.1 --port
  fi
  # shellcheck disable=SC2086  # LOWRANK_SERVE_ARGS: more `lowrank serve` flags, split on spaces
  run lowrank "$level" build/lowrank serve -m "$model" -t "$threads" -np "$slots" -c $((ptok + gen + 64)) ${LOWRANK_SERVE_ARGS:-} --port
  if [[ ${#files[@]} -ge 2 ]]; then
    run lowrank-second "$level" build/lowrank serve -m "${files[1]}" -t "$threads" -np "$slots" -c $((ptok + gen + 64)) --port
  fi
done
