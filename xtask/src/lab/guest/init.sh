#!/bin/bash
# PID 1 of the rdma-trace lab guest. The initramfs is the whole Debian root, so there is no
# switch_root: mount the kernel's filesystems, mount the host share, run the entry script
# named on the kernel command line (`lab.entry=`), then power off.
# Baked into the image: keep it small and stable; per-run logic lives in the share.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /run /tmp /mnt/host /root
mount -t devpts -o gid=5,mode=620 devpts /dev/pts
# devtmpfs has no fd links; shells and tools expect them.
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ulimit -l unlimited
hostname rdma-lab
ip link set lo up

read -r cmdline </proc/cmdline
entry=
for w in $cmdline; do
  case $w in lab.entry=*) entry=${w#lab.entry=} ;; esac
done
read -r up _ </proc/uptime
echo "[lab-init] userspace up at ${up}s"

# virtio_pci is a module on some kernels (6.1), built in on others; nothing here loads it but us.
if modprobe -a virtio_pci 9pnet_virtio 9p &&
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 host0 /mnt/host; then
  if [ -n "$entry" ] && [ -f "$entry" ]; then
    /bin/bash "$entry"
  else
    echo "[lab-init] no entry script (lab.entry=$entry) in the share"
  fi
else
  echo "[lab-init] could not mount the host share (9p tag host0)"
fi
read -r up _ </proc/uptime
echo "[lab-init] powering off at ${up}s"
sync
echo o >/proc/sysrq-trigger
sleep 30
