#!/bin/bash
# The guest side of `cargo xtask bench`: what watching costs a verbs workload, for each way
# of watching it, side by side in one boot (these machines are noisy: only what one run
# compares means anything). Rounds interleave the configurations, each round in another
# order; the host takes medians and ratios from $OUT/results.jsonl.
#
# Configurations (what runs beside the workloads):
#   none         nothing
#   bt-agg       bpftrace: kprobes (+ kretprobes where rdma-trace has a return probe) on the
#                kernel functions rdma-trace's plan resolved here, counting stacks in a map
#   bt-stream    bpftrace: the same functions, one printf line per event with its kernel
#                stack (entry) or return value, written to a file
#   bt-stream-u  bt-stream plus uprobes/uretprobes on the libibverbs calls rdma-trace traces
#   rt-kernel    rdma-trace trace -q -o FILE --probe ID… (the same kernel functions)
#   rt-stack-ids rt-kernel with --stack-ids: records carry a stack id, not the frames
#   rt-default   rdma-trace trace -q -o FILE (every probe, uprobes included)
#   rt-cmd       rdma-trace trace -q -o FILE -- bash workloads.sh (its syscalls too)
#   rt-metrics   rdma-trace daemon --metrics --metrics-only --probe ID… (the same kernel
#                functions, counted in BPF maps, nothing streamed): against bt-agg
# Workloads (each times itself; see workloads.sh below): the MR loop at 4 KiB, 1 MiB and
# 64 MiB (ns a reg+dereg pair), ibv_rc_pingpong -e (µs an iteration), ib_write_bw (ns of the
# client's run), the companion (ms of its run).
set -u
RUN=${LAB_RUN:-$(dirname "$0")}
# shellcheck source=/dev/null
[ -f "$RUN/bench.env" ] && . "$RUN/bench.env"
ROUNDS=${BENCH_ROUNDS:-3}
OUT=${RDMA_TRACE_LAB_OUT:-/tmp}/bench
RT=/mnt/host/bin/rdma-trace
WL=/mnt/host/bin/rdma-trace-workload
IP=10.0.0.1
rm -rf "$OUT"
mkdir -p "$OUT"
RES=$OUT/results.jsonl
: >"$RES"
sysctl -qw kernel.bpf_stats_enabled=1
HZ=$(getconf CLK_TCK)

# --- what the plan resolved on this kernel -------------------------------------------------
"$RT" probes --no-attach --json >"$OUT/probes.jsonl" 2>"$OUT/probes.err" || {
  echo "[bench] rdma-trace probes failed: $(cat "$OUT/probes.err")"
  exit 1
}
field() { sed -n "s/.*\"$1\":\"\\{0,1\\}\\([^\",}]*\\).*/\\1/p" <<<"$2"; }
KPROBES=() KSYMS=() KRET=() USYMS=() URET=()
while read -r l; do
  [ "$(field status "$l")" = planned ] || continue
  case $(field kind "$l") in
    kprobe)
      KPROBES+=(--probe "$(field id "$l")")
      KSYMS+=("$(field symbol "$l")")
      [ "$(field return "$l")" = true ] && KRET+=("$(field symbol "$l")")
      ;;
    uprobe)
      USYMS+=("$(field path "$l"):$(field symbol "$l")")
      [ "$(field return "$l")" = true ] && URET+=("$(field path "$l"):$(field symbol "$l")")
      ;;
  esac
done <"$OUT/probes.jsonl"
echo "[bench] ${#KSYMS[@]} kernel functions (${#KRET[@]} with returns), ${#USYMS[@]} libibverbs functions (${#URET[@]} with returns)"
join() { local IFS=,; echo "$*"; }
kp() { local p=$1; shift; local out=() s; for s in "$@"; do out+=("$p:$s"); done; join "${out[@]}"; }

cat >"$OUT/agg.bt" <<EOF
BEGIN { printf("ready\n"); }
$(kp kprobe "${KSYMS[@]}") { @entry[probe, kstack] = count(); }
$(kp kretprobe "${KRET[@]}") { @ret[probe] = count(); }
EOF
STREAM_K="$(kp kprobe "${KSYMS[@]}") { printf(\"E %llu %s %d %d %lx %lx %lx\\n%s\\n\", nsecs, probe, pid, tid, arg0, arg1, arg2, kstack); }
$(kp kretprobe "${KRET[@]}") { printf(\"E %llu %s %d %d %ld\\n\", nsecs, probe, pid, tid, retval); }"
printf 'BEGIN { printf("ready\\n"); }\n%s\n' "$STREAM_K" >"$OUT/stream.bt"
{
  printf 'BEGIN { printf("ready\\n"); }\n%s\n' "$STREAM_K"
  echo "$(kp uprobe "${USYMS[@]}") { printf(\"E %llu %s %d %d %lx %lx %lx\\n\", nsecs, probe, pid, tid, arg0, arg1, arg2); }"
  echo "$(kp uretprobe "${URET[@]}") { printf(\"E %llu %s %d %d %ld\\n\", nsecs, probe, pid, tid, retval); }"
} >"$OUT/stream-u.bt"

# --- the workloads: one line each, "name value unit" --------------------------------------
cat >"$OUT/workloads.sh" <<EOF
#!/bin/bash
# \$1: where each workload's figure goes.
set -u
M=\$1
for s in 4K:300 1M:100 64M:8; do
  out=\$($WL --announce /dev/null --mr-sizes \${s%:*} --reg-loop \${s#*:} 2>&1)
  v=\$(sed -n 's/.*reg-loop .* median_ns=\([0-9]*\).*/\1/p' <<<"\$out")
  echo "mr-\${s%:*} \${v:-0} ns" >>"\$M"
done
port=18515
ibv_rc_pingpong -e -d rxe0 -g 1 -n 300 -p \$port >/tmp/pp-s.log 2>&1 &
s=\$!
sleep 1
ibv_rc_pingpong -e -d rxe0 -g 1 -n 300 -p \$port $IP >/tmp/pp-c.log 2>&1
wait \$s
v=\$(sed -n 's/.*iters in .* = \([0-9.]*\) usec\/iter.*/\1/p' /tmp/pp-c.log | head -1)
echo "pingpong-e \${v:-0} us" >>"\$M"
ib_write_bw -F -d rxe0 -x 1 -n 1000 >/tmp/bw-s.log 2>&1 &
s=\$!
sleep 1
t0=\$(date +%s%N)
ib_write_bw -F -d rxe0 -x 1 -n 1000 $IP >/tmp/bw-c.log 2>&1
t1=\$(date +%s%N)
wait \$s
grep -q "BW average" /tmp/bw-c.log && echo "write-bw \$((t1 - t0)) ns" >>"\$M" || echo "write-bw 0 ns" >>"\$M"
out=\$($WL --announce /dev/null --mr-sizes 4K,1M --iterations 8 2>&1)
v=\$(sed -n 's/.*run 1 ok: .*, \([0-9.]*\) ms\$/\1/p' <<<"\$out")
echo "companion \${v:-0} ms" >>"\$M"
EOF
chmod 755 "$OUT/workloads.sh"

# --- one configuration, one round ----------------------------------------------------------
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# CPU seconds of a live process (user + system), from /proc/PID/stat.
cpu_ms() { awk -v hz="$HZ" '{ print int(($14 + $15) * 1000 / hz) }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# The kernel's BPF stats of every program a process holds: "runs run_time_ns".
bpf_stats() {
  local runs=0 ns=0 f
  for f in /proc/"$1"/fdinfo/*; do
    grep -q '^prog_type:' "$f" 2>/dev/null || continue
    runs=$((runs + $(sed -n 's/^run_cnt:\s*//p' "$f")))
    ns=$((ns + $(sed -n 's/^run_time_ns:\s*//p' "$f")))
  done
  echo "$runs $ns"
}
wait_ready() { # $1 pid, $2 file to grep, $3 pattern
  local i
  for ((i = 0; i < 1200; i++)); do
    grep -q "$3" "$2" 2>/dev/null && return 0
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

one() {
  local r=$1 cfg=$2 dir=$OUT/$2.$1 pid= t0 ready=0 stop=0 cpu=0 bpf="0 0" events=0 lost=0 ring=0
  # Outputs go to the guest's own memory, as to a local disk (the 9p share is far slower).
  local work=/tmp/bench-out/$cfg.$r
  mkdir -p "$dir" "$work"
  local M=$dir/metrics.txt
  : >"$M"
  t0=$(now_ms)
  case $cfg in
    none | rt-cmd) ;;
    bt-agg) bpftrace -B line "$OUT/agg.bt" >"$work/out" 2>"$dir/err" & pid=$! ;;
    bt-stream) bpftrace -B line "$OUT/stream.bt" >"$work/out" 2>"$dir/err" & pid=$! ;;
    bt-stream-u) bpftrace -B line "$OUT/stream-u.bt" >"$work/out" 2>"$dir/err" & pid=$! ;;
    rt-kernel) "$RT" trace -q -o "$work/out" "${KPROBES[@]}" 2>"$dir/err" & pid=$! ;;
    rt-stack-ids) "$RT" trace -q -o "$work/out" --stack-ids "${KPROBES[@]}" 2>"$dir/err" & pid=$! ;;
    rt-default) "$RT" trace -q -o "$work/out" 2>"$dir/err" & pid=$! ;;
    rt-metrics)
      "$RT" daemon --socket "$work/sock" --metrics 127.0.0.1:9470 --metrics-only "${KPROBES[@]}" 2>"$dir/err" &
      pid=$!
      ;;
  esac
  if [ -n "$pid" ]; then
    case $cfg in
      bt-*) wait_ready "$pid" "$work/out" '^ready' ;;
      rt-*) wait_ready "$pid" "$dir/err" 'rdma-trace: tracing' ;;
    esac || echo "[bench] $cfg round $r: the tracer did not start: $(tail -3 "$dir/err")"
    ready=$(($(now_ms) - t0))
  fi
  if [ "$cfg" = rt-cmd ]; then
    "$RT" trace -q -o "$work/out" -- "$OUT/workloads.sh" "$M" 2>"$dir/err"
  else
    "$OUT/workloads.sh" "$M"
  fi
  if [ -n "$pid" ]; then
    cpu=$(cpu_ms "$pid")
    bpf=$(bpf_stats "$pid")
    t0=$(now_ms)
    kill -INT "$pid"
    wait "$pid"
    stop=$(($(now_ms) - t0))
  fi
  case $cfg in
    bt-agg) events=$(grep -o ']: [0-9]*$' "$work/out" | awk '{ s += $2 } END { print s + 0 }') ;;
    bt-stream*)
      events=$(grep -c '^E ' "$work/out")
      # bpftrace says what its output buffer dropped as "Lost N events".
      lost=$(sed -n 's/^Lost \([0-9]*\) events.*/\1/p' "$work/out" | awk '{ s += $1 } END { print s + 0 }')
      ;;
    rt-metrics)
      # Its summary: "rdma-trace: N events delivered, …" (each one counted in the kernel).
      events=$(sed -n 's/^rdma-trace: \([0-9]*\) events delivered.*/\1/p' "$dir/err" | tail -1)
      lost=$(sed -n 's/^rdma-trace: [0-9]* events delivered, \([0-9]*\) lost.*/\1/p' "$dir/err" | tail -1)
      links=$(sed -n 's/^ *links: \([0-9]*\) held.*/\1/p' "$dir/err" | tail -1)
      ;;
    rt-*)
      events=$(tail -1 "$work/out" | sed -n 's/.*"exit_code":-\{0,1\}[0-9]*,"delivered":\([0-9]*\).*/\1/p')
      lost=$(tail -1 "$work/out" | sed -n 's/.*"delivered":[0-9]*,"lost":\([0-9]*\).*/\1/p')
      grep "program .* per run\|stopping took\|ring: \|stacks by id\|links: " "$dir/err" | sed "s/^ */[bench] $cfg round $r: /"
      # "ring: N records, B bytes (…)": what the programs wrote to the ring.
      ring=$(sed -n 's/^ *ring: [0-9]* records, \([0-9]*\) bytes.*/\1/p' "$dir/err" | tail -1)
      # "links: N held (…)": what the kernel undoes at detach, one at a time.
      links=$(sed -n 's/^ *links: \([0-9]*\) held.*/\1/p' "$dir/err" | tail -1)
      ;;
  esac
  while read -r w v unit; do
    printf '{"round":%d,"config":"%s","workload":"%s","value":%s,"unit":"%s"}\n' "$r" "$cfg" "$w" "$v" "$unit" >>"$RES"
  done <"$M"
  set -- $bpf
  printf '{"round":%d,"config":"%s","attach_ms":%d,"stop_ms":%d,"cpu_ms":%d,"events":%d,"lost":%d,"bpf_runs":%d,"bpf_ns":%d,"ring_bytes":%d,"links":%d}\n' \
    "$r" "$cfg" "$ready" "$stop" "$cpu" "${events:-0}" "${lost:-0}" "$1" "$2" "${ring:-0}" "${links:-0}" >>"$RES"
  echo "[bench] round $r $cfg: attach ${ready} ms, stop ${stop} ms, cpu ${cpu} ms, events ${events:-0} (lost ${lost:-0}), bpf $1 runs $2 ns; $(tr '\n' ' ' <"$M")"
  # Keep what proves the counts, not the bulk.
  [ -f "$work/out" ] && [ "$(stat -c %s "$work/out")" -le 4000000 ] && cp "$work/out" "$dir/out"
  rm -rf "$work"
}

# shellcheck disable=SC2206
CONFIGS=(${BENCH_CONFIGS:-none bt-agg bt-stream bt-stream-u rt-kernel rt-stack-ids rt-default rt-cmd rt-metrics})
# A warm-up run, not counted: the first verbs program of a boot pays for cold caches.
"$OUT/workloads.sh" /dev/null
echo "[bench] warmed up; ${ROUNDS} rounds of: ${CONFIGS[*]}"
n=${#CONFIGS[@]}
for ((r = 1; r <= ROUNDS; r++)); do
  for ((i = 0; i < n; i++)); do
    # Round r starts at configuration r-1 and goes backwards on even rounds.
    if ((r % 2)); then j=$(((i + r - 1) % n)); else j=$(((n - 1 - i + r - 1) % n)); fi
    one "$r" "${CONFIGS[$j]}"
  done
done
# SIGINT to exit while the ring overflows: the traced command is a dd bs=1 (two syscalls a
# byte), stopped 5 s after the tracer is ready.
for ((r = 1; r <= ${BENCH_FLOOD_ROUNDS:-$ROUNDS}; r++)); do
  dir=$OUT/flood.$r
  mkdir -p "$dir"
  "$RT" trace -q -o /tmp/flood.out -- dd if=/dev/zero of=/dev/null bs=1 count=1000000000 2>"$dir/err" &
  pid=$!
  wait_ready "$pid" "$dir/err" 'rdma-trace: tracing' || echo "[bench] flood round $r: the tracer did not start"
  sleep 5
  t0=$(now_ms)
  kill -INT "$pid"
  wait "$pid"
  stop=$(($(now_ms) - t0))
  pkill -x dd
  events=$(tail -1 /tmp/flood.out | sed -n 's/.*"exit_code":-\{0,1\}[0-9]*,"delivered":\([0-9]*\).*/\1/p')
  lost=$(tail -1 /tmp/flood.out | sed -n 's/.*"delivered":[0-9]*,"lost":\([0-9]*\).*/\1/p')
  # The tracer's own split of the stop ("1.9 s (switching off 0.1 s, draining the ring …)"),
  # printed when it took over a second.
  split=$(sed -n 's/^rdma-trace: stopping took \(.*\)$/\1/p' "$dir/err" | tail -1 | tr -d '"\\')
  printf '{"round":%d,"config":"flood","stop_ms":%d,"events":%d,"lost":%d,"split":"%s"}\n' "$r" "$stop" "${events:-0}" "${lost:-0}" "${split:-under 1 s}" >>"$RES"
  echo "[bench] flood round $r: SIGINT to exit ${stop} ms; ${events:-0} events, ${lost:-0} lost; $(grep 'stopping took' "$dir/err")"
  rm -f /tmp/flood.out
done
echo "[bench] done: $RES"
exit 0
