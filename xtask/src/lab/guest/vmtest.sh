#!/bin/bash
# Runs every lab test binary listed in $LAB_RUN/tests.txt (one line: file name in
# $LAB_BIN/tests, a tab, the libtest name filter, a tab, the --skip arguments), one test at a time, saving each
# binary's libtest output under $RDMA_TRACE_LAB_OUT/tests/ for the host to count.
mkdir -p "$RDMA_TRACE_LAB_OUT/tests"
while IFS=$'\t' read -r exe filter skips; do
  [ -n "$exe" ] || continue
  echo "[vm-test] ===== $exe"
  started=$SECONDS
  # shellcheck disable=SC2086 # $skips is a list of --skip NAME words
  "$LAB_BIN/tests/$exe" --ignored --test-threads=1 "$filter" $skips 2>&1 |
    tee "$RDMA_TRACE_LAB_OUT/tests/$exe.log"
  echo "[vm-test] ===== $exe exited with ${PIPESTATUS[0]} after $((SECONDS - started)) s"
done <"$LAB_RUN/tests.txt"
exit 0
