#!/usr/bin/env bash
# Installs mlaserve's build and run dependencies from Debian 12's packages; with --tests also
# what the test suite and the trainer (tools/train) need: NumPy, PyTorch with OpenBLAS, the
# King James Bible, jsonschema and Pydantic (to check constrained output), clang-format (the
# code's style), Node.js for the reference tokenizers and chat templates, and Chromium for the
# web page's browser test. Does nothing when all is there.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config git
          nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libpcre2-dev libcpp-httplib-dev
          libopenmpi-dev openmpi-bin libnuma-dev python3)
if [ "${1:-}" = "--tests" ]; then
  packages+=(libgtest-dev libgmock-dev libbenchmark-dev python3-numpy python3-torch libopenblas0 bible-kjv python3-jsonschema python3-pytest
             python3-pydantic python3-email-validator python3-jinja2 chromium clang-format)
fi
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
# The tokenizer reference test installs its npm packages itself; it needs node and npm.
if [ "${1:-}" = "--tests" ]; then command -v npm >/dev/null 2>&1 || missing+=(nodejs npm); fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
