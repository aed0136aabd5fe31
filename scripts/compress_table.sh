#!/usr/bin/env bash
# Reproduces README's compression table: perplexity of the default model on
# ../shared/data/wiki.eval.raw (llama.cpp protocol, ctx 512, first $CHUNKS
# windows) dense and compressed at several keeps with svd, whiten and
# whiten + basis sharing (g=2), calibrated on ../shared/data/wiki.calib.raw.
#   scripts/compress_table.sh [OUTDIR] [CHUNKS]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/lowrank-table}
chunks=${2:-32}
keeps=${KEEPS:-0.9,0.8,0.7,0.6,0.5}
bin=${LOWRANK_BIN:-build/lowrank}
mkdir -p "$out"
calib=(--calib ../shared/data/wiki.calib.raw --calib-samples 64 --calib-len 512)
ppl() { $bin perplexity -m "$1" -f ../shared/data/wiki.eval.raw -c 512 --chunks "$chunks" --no-progress -t 2; }

echo "dense: $(ppl "$(scripts/fetch-model.sh)")"
$bin compress --method svd --keep "$keeps" -o "$out/svd-{keep}.gguf" 2>/dev/null
$bin compress --method whiten --keep "$keeps" "${calib[@]}" -o "$out/whiten-{keep}.gguf" 2>/dev/null
$bin compress --method whiten --basis-sharing 2 --keep "$keeps" "${calib[@]}" -o "$out/bs2-{keep}.gguf" 2>/dev/null
for k in ${keeps//,/ }; do
  for m in svd whiten bs2; do
    f="$out/$m-$k.gguf"
    echo "$m keep $k: $(ppl "$f") | $(stat -c %s "$f") bytes"
  done
done
