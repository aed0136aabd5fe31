#!/usr/bin/env bash
# Perplexity of a model with every per-token key and value cache type
# (--cache-type-k, --cache-type-v: f16, q8_0, q4_0 and their Hadamard-rotated
# forms), beside llama.cpp's llama-perplexity with the same -ctk/-ctv (its
# quantized caches rotated, as it does by default, and with
# LLAMA_ATTN_ROT_DISABLE=1). Prints a markdown table.
#   [MODEL=qwen2.5-coder-1.5b] [CTX=4096] [CHUNKS=1] [LLAMA_PERPLEXITY=path] \
#     scripts/kv-types-table.sh [OUTDIR]
# (OUTDIR keeps each row's log; a row whose log is there is not run again.)
# lowrank rows: the first half of each window runs as a prompt, the second
# half is decoded a token at a time against the typed cache and scored
# (--decode). llama.cpp rows: its own method (each window evaluated in
# batches of 512 through the typed cache, the second half scored). Compare
# each tool's rows with its own f16 row.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/lowrank-kv-types}
ctx=${CTX:-4096}
chunks=${CHUNKS:-1}
bin=${LOWRANK_BIN:-build/lowrank}
peer=${LLAMA_PERPLEXITY:-$HOME/.cache/lowrank/peer/0.3.36-avx512/llama.cpp/build/bin/llama-perplexity}
model=$(scripts/fetch-model.sh --model "${MODEL:-qwen2.5-coder-1.5b}")
mkdir -p "$out"
echo "| tool | keys | values | ppl | vs the tool's f16 |"
echo "| --- | --- | --- | ---: | ---: |"
base=""
for kv in "f16 f16" "q4_0 f16" "q4_0-rot f16" "q8_0-rot f16" "f16 q8_0" "f16 q4_0" "f16 q4_0-rot" \
          "q8_0-rot q8_0-rot" "q4_0-rot q4_0-rot"; do
  set -- $kv
  log="$out/lowrank-$1-$2.txt"
  [ -s "$log" ] || $bin perplexity -m "$model" -f ../shared/data/wiki.eval.raw -c "$ctx" --chunks "$chunks" \
    --decode --no-progress -t 2 --cache-type-k "$1" --cache-type-v "$2" >"$log" 2>&1
  ppl=$(sed -n 's/^ppl = \([0-9.]*\).*/\1/p' "$log")
  [ -z "$base" ] && base=$ppl
  echo "| lowrank | $1 | $2 | $ppl | $(python3 -c "print(f'{($ppl/$base-1)*100:+.2f}%')") |"
done
[ -x "$peer" ] || { echo "(llama-perplexity not found at $peer: llama.cpp rows left out)"; exit 0; }
base=""
for kv in "f16 f16 0" "q4_0 f16 1" "q4_0 f16 0" "f16 q8_0 0" "f16 q4_0 1" "f16 q4_0 0" "q8_0 q8_0 0" \
          "q4_0 q4_0 0"; do
  set -- $kv
  log="$out/llama-$1-$2-norot$3.txt"
  [ -s "$log" ] || LLAMA_ATTN_ROT_DISABLE=$3 "$peer" -m "$model" -f ../shared/data/wiki.eval.raw -c "$ctx" \
    --chunks "$chunks" -t 2 -fa on -ctk "$1" -ctv "$2" >"$log" 2>&1
  ppl=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$log")
  [ -z "$base" ] && base=$ppl
  rot=$([ "$3" = 1 ] && echo " (LLAMA_ATTN_ROT_DISABLE=1)" || true)
  echo "| llama.cpp$rot | $1 | $2 | $ppl | $(python3 -c "print(f'{($ppl/$base-1)*100:+.2f}%')") |"
done
