#!/bin/bash
# The start of both TUI demos' guest scripts (demo.rs puts it before each): PORT, the
# virtio-serial port QEMU named rdma-trace (no udev here: its /dev node is found through
# sysfs).
modprobe virtio_console
PORT=
for ((i = 0; i < 100; i++)); do
  for d in /sys/class/virtio-ports/*; do
    [ "$(cat "$d/name" 2>/dev/null)" = rdma-trace ] && PORT=/dev/${d##*/}
  done
  [ -n "$PORT" ] && [ -e "$PORT" ] && break
  sleep 0.2
done
[ -n "$PORT" ] && [ -e "$PORT" ] || { echo "[demo] no virtio-serial port named rdma-trace"; exit 2; }
