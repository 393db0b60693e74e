#!/bin/bash
# What tracing costs a verbs program, side by side in one boot (the machine is noisy: only
# ratios within one run mean anything). Run with:
#   cargo build --release -p rdma-trace
#   cargo xtask lab --run xtask/src/lab/guest/bench-cost.sh [--kernel trixie]
# Optional: copy another build to target/lab/bin/rdma-trace-base to compare against it.
#
# Each configuration runs the companion workload in a loop (eight 4 KiB MRs registered and
# deregistered per run, CQ events) for $SECS seconds and counts completed runs; with
# kernel.bpf_stats_enabled on, rdma-trace's summary gives the kernel's own per-program
# figures (run_cnt, run_time_ns from bpf_prog_info) for its programs.
set -u
SECS=${BENCH_SECS:-20}
OUT=${RDMA_TRACE_LAB_OUT:-/tmp}/bench-cost
mkdir -p "$OUT"
WL=/mnt/host/bin/rdma-trace-workload
NEW=/mnt/host/bin/rdma-trace
BASE=/mnt/host/bin/rdma-trace-base
sysctl -qw kernel.bpf_stats_enabled=1

runs() { grep -c "run [0-9]* ok" "$1" 2>/dev/null || echo 0; }

# One configuration: $1 name, then the tracer command (empty for none).
bench() {
  local name=$1
  shift
  local tp= bt=
  if [ "$#" -gt 0 ]; then
    "$@" >"$OUT/$name.tracer.err" 2>&1 &
    tp=$!
    for _ in $(seq 600); do
      grep -q "rdma-trace: tracing\|ready" "$OUT/$name.tracer.err" 2>/dev/null && break
      sleep 0.2
    done
  fi
  timeout -s INT "$SECS" "$WL" --mr-sizes 4K,4K,4K,4K,4K,4K,4K,4K --iterations 4 --loop \
    --announce /dev/null 2>"$OUT/$name.workload.err"
  if [ -n "$tp" ]; then
    kill -INT "$tp"
    wait "$tp"
  fi
  echo "$name $(runs "$OUT/$name.workload.err")" >>"$OUT/runs.txt"
}

: >"$OUT/runs.txt"
bench none
bench rdma-trace "$NEW" trace -q
# The kernel probes alone (no libibverbs uprobes): what the verbs-call view costs.
KERNEL_ONLY=()
for id in umem_get rxe_reg_mr mlx5_reg_mr uverbs_mmap rxe_mmap mlx5_mmap mmap_io comp_handler \
  rxe_create_cq mlx5_create_cq comp_event_read umem_release mr_dereg; do
  KERNEL_ONLY+=(--probe "$id")
done
bench rdma-trace-kernel "$NEW" trace -q "${KERNEL_ONLY[@]}"
# The kernel probes and the control-path verbs calls, without ibv_get_cq_event (one call per
# completion event: the only data-path uprobe).
CONTROL=("${KERNEL_ONLY[@]}")
for id in ibv_open_device ibv_reg_mr ibv_reg_mr_iova2 ibv_dereg_mr ibv_create_comp_channel \
  ibv_create_cq ibv_create_qp; do
  CONTROL+=(--probe "$id")
done
bench rdma-trace-control "$NEW" trace -q "${CONTROL[@]}"
[ -x "$BASE" ] && bench rdma-trace-base "$BASE" trace -q
cat >/tmp/bench.bt <<'EOF'
BEGIN { printf("ready\n"); }
kprobe:ib_uverbs_mmap, kprobe:rxe_reg_user_mr, kprobe:ib_umem_release, kprobe:ib_uverbs_comp_handler,
kprobe:rxe_mmap, kprobe:rxe_create_cq, kprobe:ib_uverbs_comp_event_read { @[probe] = count(); }
EOF
bench bpftrace bpftrace /tmp/bench.bt

none=$(awk '$1 == "none" { print $2 }' "$OUT/runs.txt")
echo "== workload runs in ${SECS} s (ratio = untraced / traced: the slowdown) =="
while read -r name n; do
  awk -v n="$n" -v b="$none" -v name="$name" \
    'BEGIN { printf "%-16s %6d runs  slowdown %.2fx\n", name, n, (n > 0 ? b / n : 0) }'
done <"$OUT/runs.txt"
echo "== per program, kernel BPF stats =="
for f in "$OUT"/rdma-trace*.tracer.err; do
  name=${f##*/}
  grep "program .* per run" "$f" | sed "s|^ *|${name%.tracer.err}: |"
done
exit 0
