#!/usr/bin/env bash
# Installs the Debian packages minfer needs that are missing. As root it runs apt-get itself;
# otherwise it prints the one command to run and fails. Then it fetches XGrammar's source package
# (structured outputs) from PyPI's file host into ~/.cache/minfer/deps/, checked against its
# SHA-256; without the network the build goes on without XGrammar (the server then refuses
# response_format, grammar and regex). Nothing is downloaded from anywhere else.
set -euo pipefail

# XGrammar's C++ core (Apache-2.0), compiled by CMakeLists.txt from the unpacked sdist.
xgrammar_version=0.2.9
xgrammar_sha256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
xgrammar_url=https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-$xgrammar_version.tar.gz
deps_dir="${MINFER_DEPS_DIR:-$HOME/.cache/minfer/deps}"

fetch_xgrammar() {
  local dest="$deps_dir/xgrammar-$xgrammar_version"
  [ -f "$dest/cpp/grammar_matcher.cc" ] && return 0
  mkdir -p "$deps_dir"
  local archive="$deps_dir/xgrammar-$xgrammar_version.tar.gz"
  if ! curl -fsSL --max-time 120 -o "$archive.part" "$xgrammar_url"; then
    echo "minfer: could not fetch XGrammar $xgrammar_version; building without structured outputs" >&2
    rm -f "$archive.part"
    return 0
  fi
  if ! echo "$xgrammar_sha256  $archive.part" | sha256sum -c --status; then
    echo "minfer: XGrammar $xgrammar_version's archive has the wrong SHA-256; not used" >&2
    rm -f "$archive.part"
    return 1
  fi
  mv "$archive.part" "$archive"
  tar -xzf "$archive" -C "$deps_dir"
  rm -f "$archive"
}

packages=(cmake make g++ libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libpcre2-dev
          libcpp-httplib-dev python3-matplotlib python3-venv tmux clang libclang-rt-14-dev
          openmpi-bin libopenmpi-dev)

if ! command -v dpkg >/dev/null 2>&1; then
  echo "minfer: not a Debian system; make sure these are installed: ${packages[*]}" >&2
  fetch_xgrammar
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  fetch_xgrammar
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  echo "minfer: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fetch_xgrammar
else
  echo "minfer: missing packages; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
