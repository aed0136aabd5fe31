#!/usr/bin/env bash
# lowrank run --draft self: the model requantized (Q2_K, the head too) is
# written once into the model cache and drafts; the text is the one the same
# file gives as --draft-model, and the second run reuses the file.
# usage: draft_self.sh path/to/lowrank model.gguf
set -euo pipefail
bin=$1 model=$2
export XDG_CACHE_HOME=$(mktemp -d)
trap 'rm -rf "$XDG_CACHE_HOME"' EXIT
args=(run -m "$model" --raw -p "abcabcab" -n 12 --temp 0 --draft-p-min 0)
"$bin" "${args[@]}" --draft self >"$XDG_CACHE_HOME/self.txt" 2>"$XDG_CACHE_HOME/self.err"
grep -q -- "--draft self: writing" "$XDG_CACHE_HOME/self.err" || { cat "$XDG_CACHE_HOME/self.err"; exit 1; }
grep -q "^\[draft\] [1-9][0-9]* tokens drafted" "$XDG_CACHE_HOME/self.err" || { echo "no drafts"; exit 1; }
draft=$(ls "$XDG_CACHE_HOME"/lowrank/models/drafts/*.Q2_K.*.gguf)
"$bin" "${args[@]}" --draft-model "$draft" >"$XDG_CACHE_HOME/model.txt" 2>/dev/null
cmp "$XDG_CACHE_HOME/self.txt" "$XDG_CACHE_HOME/model.txt"
"$bin" "${args[@]}" --draft self >/dev/null 2>"$XDG_CACHE_HOME/again.err"
! grep -q "writing" "$XDG_CACHE_HOME/again.err" || { echo "the self-draft was written again"; exit 1; }
echo "draft_self: ok"
