#!/usr/bin/env bash
# Reproduces README's key-cache table: perplexity of a model on
# ../shared/data/wiki.eval.raw with every key cache type, the first $CHUNKS
# windows of $CTX tokens. Each window's first half runs as a prompt (exact
# attention, then the keys are compressed; SVDq fits its sequence basis
# here), the second half is fed one token at a time through the decode path
# and scored against the compressed cache. Prints one line per configuration:
# the command, the perplexity and what the key cache held.
#   [MODEL=NAME] [CTX=2048] [ROWS=all|short] [CALIB_SAMPLES=16] scripts/kv_cache_table.sh [OUTDIR] [CHUNKS]
# MODEL: a name scripts/fetch-model.sh knows (default: the default model);
# ROWS=short: the cache types and SVDq's two bases only, no schedules or
# ablations (for the larger models, whose decode is slower).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/lowrank-kv}
chunks=${2:-8}
ctx=${CTX:-2048}
bin=${LOWRANK_BIN:-build/lowrank}
mkdir -p "$out"
if [ -n "${MODEL:-}" ]; then
  model=$(scripts/fetch-model.sh --model "$MODEL")
else
  model=$(scripts/fetch-model.sh)
fi
cal="$out/$(basename "$model" .gguf)-kvcal.gguf"
[ -f "$cal" ] || $bin calibrate-kv -m "$model" --calib ../shared/data/wiki.calib.raw \
  --calib-samples "${CALIB_SAMPLES:-16}" --calib-len "$ctx" -o "$cal" 2>/dev/null
row() {
  local m=$1; shift
  echo "## $* (model $(basename "$m"))"
  $bin perplexity -m "$m" -f ../shared/data/wiki.eval.raw -c "$ctx" --chunks "$chunks" --decode \
    --no-progress -t 2 "$@" 2>/dev/null
}
rows=(
  "$model|--cache-type-k f32"
  "$model|--cache-type-k f16"
  "$model|--cache-type-k q8_0"
  "$model|--cache-type-k q4_0"
  "$model|--cache-type-k kivi2"
  # SVDq as specified: key metric, basis of the keys where they were seen.
  "$model|--cache-type-k svdq --svdq-metric key --svdq-positions seen"
  "$cal|--cache-type-k svdq --svdq-basis calibrated --svdq-metric key"
  # lowrank's defaults: query-aware basis, RoPE-spread over the context.
  "$model|--cache-type-k svdq"
  "$cal|--cache-type-k svdq --svdq-basis calibrated"
  # Other schedules (query metric, every position).
  "$model|--cache-type-k svdq --svdq-rank 32 --svdq-schedule 4,4,2,2,2,2,2,2"
  "$model|--cache-type-k svdq --svdq-energy 1 --svdq-schedule 4,2,2,2,1,1,0,0"
  "$model|--cache-type-k svdq --svdq-energy 1 --svdq-schedule 4,4,2,2,2,2,0,0"
  "$model|--cache-type-k svdq --svdq-energy 1 --svdq-schedule 8,4,4,2,2,2,2,0"
  "$cal|--cache-type-k svdq --svdq-basis calibrated --svdq-energy 1 --svdq-schedule 8,4,4,2,2,2,2,0"
  # Ablation of the two changes at that schedule.
  "$model|--cache-type-k svdq --svdq-energy 1 --svdq-schedule 8,4,4,2,2,2,2,0 --svdq-metric key --svdq-positions seen"
  "$model|--cache-type-k svdq --svdq-energy 1 --svdq-schedule 8,4,4,2,2,2,2,0 --svdq-positions seen"
  "$model|--cache-type-k svdq --svdq-energy 1 --svdq-schedule 8,4,4,2,2,2,2,0 --svdq-metric key"
)
[ "${ROWS:-all}" = short ] && rows=("${rows[@]:0:9}")
# FROM=n skips the first n rows (to resume a run).
for r in "${rows[@]:${FROM:-0}}"; do
  # shellcheck disable=SC2086
  row "${r%%|*}" ${r#*|}
done
