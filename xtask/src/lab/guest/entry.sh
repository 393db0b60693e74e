#!/bin/bash
# Per-run entry of the lab guest, started by /init from the host share (so changing it never
# rebuilds the image). Loads the RDMA stack, creates rxe0 on dummy0 (one guest) or on the
# virtio NIC wired to the other guest (a pair: LAB_HOST 1 or 2, 10.0.0.LAB_HOST), then gives
# a shell on the console or runs the script the host asked for and records its exit code in
# the share.
RUN=${0%/*}
# shellcheck source=/dev/null
. "$RUN/env"
export LAB_RUN=$RUN
# The share holds each architecture's binaries in a directory of its own.
case $(uname -m) in
aarch64) LAB_BIN=/mnt/host/bin-aarch64 ;;
*) LAB_BIN=/mnt/host/bin ;;
esac
export LAB_BIN
export RDMA_TRACE_BIN=$LAB_BIN/rdma-trace
export RDMA_TRACE_LAB=1
export RDMA_TRACE_LAB_SERIES=$LAB_SERIES
export RDMA_TRACE_LAB_OUT=$LAB_OUT
export LAB_HOST LAB_PEER LAB_SYNC
mkdir -p "$LAB_OUT"

# The netdev soft-RoCE runs on: dummy0 alone, or the NIC with the wire's MAC in a pair.
lab_netdev() {
  if [ -z "$LAB_HOST" ]; then
    ip link add dummy0 type dummy || return 1
    ip addr add 10.0.0.1/24 dev dummy0 || return 1
    ip link set dummy0 up || return 1
    NETDEV=dummy0
    return 0
  fi
  modprobe virtio_net || return 1
  local i
  for ((i = 0; i < 50; i++)); do
    NETDEV=$(ip -o link | awk -v mac="$LAB_MAC" '$0 ~ mac { sub(":", "", $2); print $2; exit }')
    [ -n "$NETDEV" ] && break
    sleep 0.1
  done
  [ -n "$NETDEV" ] || { echo "[lab] no NIC with the wire's MAC $LAB_MAC"; return 1; }
  hostname "rdma-lab-$LAB_HOST"
  ip addr add "10.0.0.$LAB_HOST/24" dev "$NETDEV" || return 1
  ip link set "$NETDEV" up || return 1
  # The wire is up when the peer answers ARP (it boots at the same time: give it a while).
  # A datagram to the discard port makes the kernel ask; no ping in the image.
  for ((i = 0; i < 300; i++)); do
    echo >"/dev/udp/$LAB_PEER/9" 2>/dev/null
    sleep 1
    ip neigh show "$LAB_PEER" dev "$NETDEV" | grep -q lladdr && return 0
  done
  echo "[lab] the peer $LAB_PEER does not answer ARP over $NETDEV"
  return 1
}

rdma_setup() {
  modprobe -a ib_core ib_uverbs rdma_ucm rdma_rxe mlx5_ib dummy || return 1
  lab_netdev || return 1
  rdma link add rxe0 type rxe netdev "$NETDEV" || return 1
  local st= i
  for ((i = 0; i < 100; i++)); do
    read -r st </sys/class/infiniband/rxe0/ports/1/state
    [[ $st == *ACTIVE* ]] && break
    sleep 0.1
  done
  [[ $st == *ACTIVE* ]] || { echo "[lab] rxe0 port 1 is not ACTIVE: $st"; return 1; }
  # Unprivileged tests open the verbs devices too.
  chmod 666 /dev/infiniband/*
  local gid
  read -r gid </sys/class/infiniband/rxe0/ports/1/gids/1
  read -r up _ </proc/uptime
  echo "[lab] ${LAB_SERIES} $(uname -r) $(hostname): rxe0 on $NETDEV $(ip -o -4 addr show dev "$NETDEV" | awk '{print $4}'), port ${st}, gid[1]=${gid} (t=${up}s)"
}

setup_ok=1
rdma_setup || { setup_ok=0; echo "[lab] RDMA set-up FAILED"; }

if [ "$LAB_MODE" = shell ]; then
  [ -n "$LAB_ROWS" ] && stty rows "$LAB_ROWS" cols "$LAB_COLS" </dev/ttyS0
  export TERM=${LAB_TERM:-vt100}
  echo "[lab] shell on the console; the host share is /mnt/host; exit (Ctrl-D) powers the guest off, Ctrl-A x quits QEMU"
  echo "[lab] RDMA_TRACE_BIN=$RDMA_TRACE_BIN RDMA_TRACE_LAB_OUT=$RDMA_TRACE_LAB_OUT"
  cd /root || true
  setsid -c /bin/bash -l </dev/ttyS0 >/dev/ttyS0 2>&1
  exit 0
fi

if [ "$setup_ok" = 0 ]; then
  echo "[lab] not running $LAB_SCRIPT: the RDMA set-up failed"
  echo setup-failed >"$RUN/rc"
  exit 0
fi
# A script on 9p may not be executable or may be refused by tools: run a copy from /tmp.
cp "$LAB_SCRIPT" /tmp/lab-script && chmod 755 /tmp/lab-script
cd /tmp || true
/tmp/lab-script
rc=$?
echo "$rc" >"$RUN/rc"
sync
read -r up _ </proc/uptime
echo "[lab] script exit code $rc (t=${up}s)"
