#!/usr/bin/env bash
# Installs the Debian packages minfer needs that are missing. As root it runs apt-get itself;
# otherwise it prints the one command to run and fails. Nothing is downloaded from anywhere else.
set -euo pipefail

packages=(cmake make g++ libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libpcre2-dev
          libcpp-httplib-dev python3-matplotlib python3-venv tmux clang libclang-rt-14-dev)

if ! command -v dpkg >/dev/null 2>&1; then
  echo "minfer: not a Debian system; make sure these are installed: ${packages[*]}" >&2
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  echo "minfer: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "minfer: missing packages; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
