#!/usr/bin/env bash
# Installs lowrank's build dependencies from Debian packages (idempotent).
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config python3 python3-pip python3-venv
  libopenblas-dev liblapacke-dev     # BLAS / LAPACK (SVD, Cholesky for compression)
  nlohmann-json3-dev                 # JSON (config.json, safetensors headers, fixtures)
  libpcre2-dev                       # tokenizer pre-tokenizer regexes
  libcli11-dev libfmt-dev            # command line, formatting
  libcpp-httplib-dev                 # HTTP for lowrank serve
  nginx-light                        # tests/server/test_deploy.py: replicas behind nginx
  libgtest-dev libbenchmark-dev      # tests, kernel benchmarks
  clang libclang-rt-14-dev           # libFuzzer targets
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
echo "install-deps: all build dependencies present"
