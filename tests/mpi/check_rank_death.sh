#!/usr/bin/env bash
# A rank that dies mid-run ends the others (issue 54): the last of 2 ranks kills itself while rank 0
# waits in an all-reduce (MpiRankDeath in test_communicator_mpi.cpp). mpirun must exit non-zero
# well within the limit (a hang would reach it) and say which rank died.
# Usage: check_rank_death.sh MPIRUN TEST_BINARY
set -u
mpirun=$1 binary=$2
start=$(date +%s)
output=$(timeout 60 "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$binary" \
  --gtest_also_run_disabled_tests --gtest_filter='MpiRankDeath.*' 2>&1)
status=$? seconds=$(( $(date +%s) - start ))
echo "$output" | tail -n 12
if [ "$status" -eq 0 ] || [ "$status" -eq 124 ]; then
  echo "FAIL: mpirun exited $status after $seconds s (0: the death went unnoticed; 124: the others hung)"
  exit 1
fi
if ! echo "$output" | grep -q "rank 1"; then
  echo "FAIL: mpirun exited $status but its output does not name rank 1"
  exit 1
fi
echo "ok: mpirun exited $status after $seconds s, naming rank 1"
