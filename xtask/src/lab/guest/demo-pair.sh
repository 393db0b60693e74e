# The two-host TUI demo's guest side, run in both guests of a pair (LAB_HOST 1 or 2): the
# daemon serves the host through this guest's virtio port and measures the peer's clock
# (its metrics port answers the peer's), the companion loops here, and the perftest and
# rping pairs repeat across the wire (host 1 serves, host 2 connects), until the host powers
# the guests off.
TRACER=$RDMA_TRACE_BIN
W=${TRACER%/*}/rdma-trace-workload
echo "[demo] host $LAB_HOST: the host's port: $PORT"
"$TRACER" daemon --virtio-port "$PORT" --metrics 0.0.0.0:9464 --clock-peer "$LAB_PEER:9464" 2>/tmp/daemon.stderr &
for ((i = 0; i < 360; i++)); do
  grep -q 'the clock of' /tmp/daemon.stderr && break
  sleep 0.5
done
cat /tmp/daemon.stderr
"$W" --loop --mr-sizes 4K,64K --iterations 4 --hold-ms 3000 --announce /tmp/steps.jsonl >/dev/null 2>&1 &
if [ "$LAB_HOST" = 1 ]; then
  while :; do
    timeout 90 ib_send_bw -F -e -d rxe0 -x 1 -n 300 >/dev/null 2>&1
    timeout 60 rping -s -a 10.0.0.1 -C 20 >/dev/null 2>&1
    sleep 1
  done
else
  while :; do
    sleep 2
    timeout 90 ib_send_bw -F -e -d rxe0 -x 1 -n 300 10.0.0.1 >/dev/null 2>&1
    sleep 2
    timeout 60 rping -c -a 10.0.0.1 -C 20 >/dev/null 2>&1
  done
fi
