# The TUI demo's guest side: the daemon serves the host through the virtio port while the
# companion workload loops and a perftest pair repeats, until the host powers the guest off.
TRACER=$RDMA_TRACE_BIN
W=${TRACER%/*}/rdma-trace-workload
echo "[demo] the host's port: $PORT"
"$TRACER" daemon --virtio-port "$PORT" 2>/tmp/daemon.stderr &
for ((i = 0; i < 360; i++)); do
  grep -q 'serving the host' /tmp/daemon.stderr && break
  sleep 0.5
done
cat /tmp/daemon.stderr
"$W" --loop --mr-sizes 4K,64K,1M --iterations 8 --hold-ms 2000 --announce /tmp/steps.jsonl >/dev/null 2>&1 &
while :; do
  timeout 60 ib_send_bw -F -e -d rxe0 -x 1 -n 500 >/dev/null 2>&1 &
  sleep 1
  timeout 60 ib_send_bw -F -e -d rxe0 -x 1 -n 500 10.0.0.1 >/dev/null 2>&1
  wait
  sleep 3
done
