#!/usr/bin/env bash
# Speculative decoding against plain decoding, interleaved: the same prompt,
# greedy, rounds of every variant (default: --draft none, --draft ngram);
# prints each run's decode tok/s and drafts, then a markdown table of the
# medians. The drafting variants run on the CPU batch and must give one
# text; --draft none runs the one-slot session, whose text may differ in
# the prompt's last bits (docs/server.md), and is compared and reported.
# usage: scripts/spec-bench.sh MODEL PROMPT_FILE [ROUNDS] [THREADS] [N] [VARIANT...]
#   e.g. scripts/spec-bench.sh M p.txt 3 2 128 "--draft none" "--draft self" "--draft-model D.gguf"
set -euo pipefail
model=$1 prompt=$2 rounds=${3:-3} threads=${4:-2} n=${5:-128}
shift $(($# < 5 ? $# : 5))
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=("--draft none" "--draft ngram")
bin=${LOWRANK:-build/lowrank}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
  for i in "${!variants[@]}"; do
    # shellcheck disable=SC2086
    "$bin" run -m "$model" -f "$prompt" -n "$n" --temp 0 -t "$threads" ${variants[$i]} \
      >"$tmp/$i.$r.txt" 2>"$tmp/$i.err"
    tps=$(grep -o 'decode [0-9.]* tok/s' "$tmp/$i.err" | awk '{print $2}')
    draft=$(grep -o '^\[draft\].*' "$tmp/$i.err" || echo "[draft] none")
    echo "round $r | ${variants[$i]} | $tps tok/s | $draft" | tee -a "$tmp/all"
    echo "$i $tps" >>"$tmp/tps"
    cp "$tmp/$i.err" "$tmp/$i.last.err"
  done
done
ref=""
for i in "${!variants[@]}"; do
  [[ ${variants[$i]} == "--draft none" ]] && continue
  [ -n "$ref" ] || ref=$i
  for r in $(seq 1 "$rounds"); do
    cmp -s "$tmp/$ref.1.txt" "$tmp/$i.$r.txt" || { echo "'${variants[$i]}' round $r: not the text of '${variants[$ref]}'"; exit 1; }
  done
done
echo
echo "| drafts | decode tok/s (median of $rounds) | drafted, taken, tokens per step (last round) |"
echo "| --- | ---: | --- |"
for i in "${!variants[@]}"; do
  med=$(awk -v i="$i" '$1 == i {print $2}' "$tmp/tps" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  draft=$(grep -o '^\[draft\].*' "$tmp/$i.last.err" | sed 's/^\[draft\] //' || echo "-")
  echo "| \`${variants[$i]}\` | $med | ${draft:--} |"
done
if [ -n "$ref" ]; then
  for i in "${!variants[@]}"; do
    [[ ${variants[$i]} == "--draft none" ]] || continue
    if cmp -s "$tmp/$i.1.txt" "$tmp/$ref.1.txt"; then echo; echo "plain decoding gave the same text";
    else echo; echo "plain decoding (the one-slot session) parted from the batch's text"; fi
  done
fi
