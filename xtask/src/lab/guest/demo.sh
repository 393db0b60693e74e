#!/bin/bash
# The demo: rdma-trace streams events while verbs workloads that nobody here wrote run over
# rxe0 (server first, client after a second, each under a timeout).
TRACER=$RDMA_TRACE_BIN
ERR=/tmp/rdma-trace.stderr
[ -x "$TRACER" ] || { echo "[demo] $TRACER is missing"; exit 2; }

echo "[demo] starting: $TRACER trace"
"$TRACER" trace 2>"$ERR" &
tp=$!
attached=0
for ((i = 0; i < 180; i++)); do # up to 90 s: attaching is slow under TCG
  if grep -q 'rdma-trace: tracing' "$ERR"; then attached=1; break; fi
  kill -0 "$tp" 2>/dev/null || break
  sleep 0.5
done
mapfile -t shown <"$ERR"
printf '%s\n' "${shown[@]}"
if [ "$attached" = 0 ]; then
  echo "[demo] rdma-trace did not report attaching; stopping"
  kill -TERM "$tp" 2>/dev/null
  wait "$tp"
  exit 1
fi

failures=0
pair() { # title, server command, client command
  echo "[demo] ----- $1"
  timeout 60 $2 >/tmp/server.log 2>&1 &
  local sp=$!
  sleep 1
  timeout 60 $3 >/tmp/client.log 2>&1
  local crc=$?
  wait "$sp"
  local src=$?
  echo "[demo] $1: client exit $crc, server exit $src; client says: $(tail -n 2 /tmp/client.log | tr '\n' ' ')"
  [ "$crc" = 0 ] && [ "$src" = 0 ] || failures=$((failures + 1))
}
pair "ibv_rc_pingpong -e (completion events)" \
  "ibv_rc_pingpong -e -d rxe0 -g 1 -n 100" "ibv_rc_pingpong -e -d rxe0 -g 1 -n 100 10.0.0.1"
pair "rping (rdma_cm)" "rping -s -a 10.0.0.1 -C 10" "rping -c -a 10.0.0.1 -C 10"
pair "ib_write_bw" "ib_write_bw -F -d rxe0 -x 1 -n 1000" "ib_write_bw -F -d rxe0 -x 1 -n 1000 10.0.0.1"

sleep 1
echo "[demo] stopping rdma-trace (SIGINT)"
kill -INT "$tp"
for ((i = 0; i < 40; i++)); do
  kill -0 "$tp" 2>/dev/null || break
  sleep 0.5
done
kill -0 "$tp" 2>/dev/null && { echo "[demo] rdma-trace ignored SIGINT for 20 s; SIGTERM"; kill -TERM "$tp"; }
wait "$tp"
trc=$?
tail -n +$((${#shown[@]} + 1)) "$ERR"
echo "[demo] rdma-trace exited with $trc; $failures workload(s) failed"

# Part 2: the companion workload under the tracer, joined into its story: each announced
# step with the kernel events it caused and the values both sides saw.
W=${TRACER%/*}/rdma-trace-workload
story_rc=0
if [ -x "$W" ]; then
  echo "[demo] ----- the story of a verbs program: $TRACER trace --story -- rdma-trace-workload"
  "$TRACER" trace -q --story --steps /tmp/steps.jsonl -- \
    "$W" --announce /tmp/steps.jsonl --mr-sizes 4K,64K,1M --iterations 4 2>/tmp/story.stderr
  story_rc=$?
  grep -E '^rdma-trace: (tracing|stopped|[0-9]+ events)' /tmp/story.stderr
  echo "[demo] story run exited with $story_rc"
else
  echo "[demo] $W is missing: skipping the story part"
fi
[ "$failures" = 0 ] && { [ "$trc" = 0 ] || [ "$trc" = 130 ]; } && [ "$story_rc" = 0 ]
