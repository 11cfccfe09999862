#!/bin/sh
# /init of the interop guest (busybox sh, PID 1). It loads the modules,
# brings eth0 up, creates the Soft-RoCE device rxe0 on it, mounts the folder
# the host shares (virtio 9p, tag "ndv") and then runs the host's jobs:
#
#   the host writes  jobs/ID/cmd     (a bash script; moved there atomically)
#   the guest writes jobs/ID/out     (stdout and stderr, as it runs)
#                    jobs/ID/rc      (the exit status, written last, atomically)
#   the host writes  jobs/POWEROFF   to stop the guest
#
# The serial console shows the steps; "NDV-READY" tells the host jobs can run.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
for d in /dev/shm /tmp /run; do mount -t tmpfs tmpfs $d; done
hostname ndv-guest
log() { echo "[guest $(cut -d' ' -f1 /proc/uptime)] $*"; }

arg() { # the value of ndv.$1= on the kernel command line
    for w in $(cat /proc/cmdline); do
        case $w in "ndv.$1="*) echo "${w#*=}"; return ;; esac
    done
}

kver=$(uname -r)
while read -r m; do
    insmod "/lib/modules/$kver/$m" || log "insmod $m failed"
done </etc/ndv/modules

ip link set lo up
n=0
while [ ! -e /sys/class/net/eth0 ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
ip link set eth0 mtu "$(arg mtu)"
ip addr add "$(arg ip)" dev eth0
ip link set eth0 up
# The first packets after "up" are lost while the carrier settles.
n=0
while [ "$(cat /sys/class/net/eth0/operstate)" != up ] && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done

rdma link add rxe0 type rxe netdev eth0 || log "rdma link add rxe0 failed"
# rxe0 is ready for rdma_cm once its IPv4-mapped GID is in the table.
n=0
while ! grep -qs '0000:0000:0000:0000:0000:ffff' /sys/class/infiniband/rxe0/ports/1/gids/* && [ $n -lt 100 ]; do
    sleep 0.1; n=$((n + 1))
done

mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 ndv /mnt/host || log "no shared folder"
jobs=/mnt/host/jobs
mkdir -p $jobs
log "NDV-READY $(arg ip) rxe0 $(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)"

run_job() {
    dir=$1
    (cd /tmp && /bin/bash "$dir/cmd" >"$dir/out" 2>&1 </dev/null)
    echo $? >"$dir/rc.tmp" && mv "$dir/rc.tmp" "$dir/rc"
}
while [ ! -e $jobs/POWEROFF ]; do
    for dir in $jobs/*; do
        [ -f "$dir/cmd" ] && [ ! -e "$dir/started" ] || continue
        : >"$dir/started"
        run_job "$dir" &
    done
    sleep 0.1
done
log "power off"
sync
poweroff -f
