#!/bin/sh
# Runs a test binary built for an instruction set (tests/CMakeLists.txt) when this CPU has every
# flag it needs, and otherwise exits 77, which ctest reports as skipped, saying which flags are
# missing. The binary is never started without them: its static initializers may already use them
# (nor need it exist: the sanitizer build compiles the AVX-512 one only where it can run).
# usage: run_if_cpu_has.sh "FLAG ..." BINARY [ARGS ...]   (flags as /proc/cpuinfo spells them)
flags=$1
shift
missing=""
for flag in $flags; do
  grep -qw "$flag" /proc/cpuinfo 2>/dev/null || missing="$missing $flag"
done
if [ -n "$missing" ]; then
  echo "skipped: this CPU lacks$missing, which $(basename "$1") needs"
  exit 77
fi
exec "$@"
