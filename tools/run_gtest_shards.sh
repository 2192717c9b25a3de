#!/usr/bin/env bash
# Runs a GoogleTest binary as SHARDS processes at once (GTEST_TOTAL_SHARDS, GTEST_SHARD_INDEX:
# every test in exactly one shard), each limited to TIMEOUT_S seconds; prints each shard's brief
# output (the failures with their messages, and the count of tests that ran) and fails if any
# shard failed, crashed or ran past its limit. `make test-asan` and `make test-tsan` use it
# instead of ctest's process per test: under a sanitizer the start and exit of a process are most
# of a short test's cost (see the Makefile).
# Usage: tools/run_gtest_shards.sh BINARY SHARDS TIMEOUT_S [GTEST_ARGS...]
set -u
binary=$1 shards=$2 limit=$3
shift 3
logs=$(mktemp -d)
pids=()
for ((i = 0; i < shards; i++)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "$limit" "$binary" --gtest_brief=1 "$@" \
    >"$logs/$i" 2>&1 &
  pids+=($!)
done
rc=0
for ((i = 0; i < shards; i++)); do
  wait "${pids[$i]}"
  code=$?
  echo "--- shard $((i + 1)) of $shards: exit $code$([ "$code" = 124 ] && echo " (over ${limit} s)")"
  cat "$logs/$i"
  [ "$code" = 0 ] || rc=1
done
rm -rf "$logs"
exit $rc
