#!/usr/bin/env bash
# Speculative decoding (--draft ngram) against plain decoding, interleaved:
# the same prompt, greedy, rounds of (none, ngram); prints each run's decode
# tok/s, the medians, and whether the texts are identical.
# usage: scripts/spec-bench.sh MODEL PROMPT_FILE [ROUNDS] [THREADS] [N]
set -euo pipefail
model=$1 prompt=$2 rounds=${3:-3} threads=${4:-2} n=${5:-128}
bin=${LOWRANK:-build/lowrank}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
  for d in none ngram; do
    "$bin" run -m "$model" -f "$prompt" -n "$n" --temp 0 --draft "$d" -t "$threads" \
      >"$tmp/$d.txt" 2>"$tmp/$d.err"
    tps=$(grep -o 'decode [0-9.]* tok/s' "$tmp/$d.err" | awk '{print $2}')
    gen=$(grep -o 'generated: [0-9]* tokens' "$tmp/$d.err" | awk '{print $2}')
    echo "round $r $d $tps tok/s ($gen tokens)" | tee -a "$tmp/all"
    cp "$tmp/$d.txt" "$tmp/$d.$r.txt"
  done
  cmp -s "$tmp/none.$r.txt" "$tmp/ngram.$r.txt" || { echo "round $r: texts differ"; exit 1; }
done
for d in none ngram; do
  printf '%s median %s tok/s\n' "$d" \
    "$(awk -v d="$d" '$3 == d {print $4}' "$tmp/all" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
done
echo "texts identical in every round ($(wc -w <"$tmp/ngram.1.txt") words)"
