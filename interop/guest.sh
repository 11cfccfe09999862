#!/usr/bin/env bash
# Runs the interop guest: Linux with Soft-RoCE (rxe0) under qemu, linked by a
# tap device to a private network namespace in which our side runs.
#
#   interop/guest.sh up              build the image if missing or stale, boot
#                                    the guest, wait until it is ready
#   interop/guest.sh down            stop it, remove the namespace
#   interop/guest.sh status          exit 0 when it runs and answers
#   interop/guest.sh run CMD         run CMD (bash) in the guest; its output,
#                                    its exit status (NDV_JOB_TIMEOUT s, 300)
#   interop/guest.sh bg CMD          start CMD in the guest, print a job id
#   interop/guest.sh wait ID         wait for a job: its output and status
#   interop/guest.sh poll ID         a finished job's output and status, or
#                                    exit 3 while it runs
#   interop/guest.sh host CMD        run CMD (sh) in the namespace
#   interop/guest.sh capture FILE [FILTER…]   tcpdump on the link, in the
#                                    background, until `capture-stop`
#   interop/guest.sh capture-stop
#   interop/guest.sh log             the guest's serial console so far
#
# Needs root (namespace, tap) and /dev/net/tun. The guest is emulated (TCG,
# no KVM needed) and boots in about 7 s.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

run=$NDV_INTEROP_RUN
jobs=$run/share/jobs
serial=$run/serial.log
pidfile=$run/qemu.pid

qemu_pid() { # our qemu's pid, if it runs
    local pid
    pid=$(cat "$pidfile" 2>/dev/null) || return 0
    [ -n "$pid" ] && grep -qs -- "$serial" "/proc/$pid/cmdline" && echo "$pid"
    return 0
}

# The namespace holds only lo and our tap, so nothing in it reaches any
# other network: the guest and our side see only each other.
make_link() {
    [ -c /dev/net/tun ] || die "no /dev/net/tun"
    ip netns list | grep -qw "^$NDV_NETNS" || ip netns add "$NDV_NETNS"
    local other
    other=$(ip -n "$NDV_NETNS" -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' |
        grep -vx -e lo -e "$NDV_TAP" || true)
    [ -z "$other" ] || die "namespace $NDV_NETNS has other interfaces ($other); refusing"
    ip -n "$NDV_NETNS" link set lo up
    ip -n "$NDV_NETNS" link show "$NDV_TAP" >/dev/null 2>&1 ||
        ip -n "$NDV_NETNS" tuntap add dev "$NDV_TAP" mode tap
    ip -n "$NDV_NETNS" link set "$NDV_TAP" mtu "$NDV_MTU" up
    ip -n "$NDV_NETNS" addr replace "$NDV_HOST_IP/24" dev "$NDV_TAP"
}

up() {
    [ "$(id -u)" = 0 ] || die "needs root"
    if [ -n "$(qemu_pid)" ] && status >/dev/null 2>&1; then
        say "guest already running"; return 0
    fi
    down >/dev/null 2>&1 || true
    if [ "$(cat "$NDV_IMAGE/stamp" 2>/dev/null)" != "$(image_stamp)" ]; then
        say "building the guest image (first time: downloads ~90 MB of Debian packages, 1-2 min)"
        "$here/build-image.sh"
    fi
    need_host_tools
    make_link
    mkdir -p "$run"
    rm -rf "$run/share" "$serial" "$pidfile"
    mkdir -p "$jobs"
    local t0=$SECONDS
    ip netns exec "$NDV_NETNS" qemu-system-x86_64 \
        -name ndv-interop -machine pc -accel tcg -cpu max -m 512 -smp 1 \
        -nodefaults -no-user-config -display none -no-reboot \
        -kernel "$NDV_IMAGE/vmlinuz" -initrd "$NDV_IMAGE/initramfs.gz" \
        -append "console=ttyS0 panic=-1 quiet ndv.ip=$NDV_GUEST_IP/24 ndv.mtu=$NDV_MTU" \
        -serial "file:$serial" \
        -netdev "tap,id=net0,ifname=$NDV_TAP,script=no,downscript=no" \
        -device "virtio-net-pci,netdev=net0,mac=52:54:00:77:00:02" \
        -virtfs "local,path=$run/share,mount_tag=ndv,security_model=none,id=share" \
        -pidfile "$pidfile" -daemonize || die "qemu did not start"
    until grep -qa NDV-READY "$serial" 2>/dev/null; do
        [ -n "$(qemu_pid)" ] || { tail -30 "$serial" >&2; die "the guest stopped while booting"; }
        [ $((SECONDS - t0)) -lt 180 ] || { tail -30 "$serial" >&2; die "the guest is not ready after 180 s"; }
        sleep 0.2
    done
    say "guest up in $((SECONDS - t0)) s: $NDV_GUEST_IP (rxe0), our side $NDV_HOST_IP in netns $NDV_NETNS"
}

down() {
    capture_stop 2>/dev/null || true
    local pid
    pid=$(qemu_pid)
    if [ -n "$pid" ]; then
        : >"$jobs/POWEROFF" 2>/dev/null || true
        for _ in $(seq 50); do [ -n "$(qemu_pid)" ] || break; sleep 0.1; done
        [ -z "$(qemu_pid)" ] || kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do [ -n "$(qemu_pid)" ] || break; sleep 0.1; done
        # (An emulated guest on a loaded machine may not get to its
        # SIGTERM handler in time.)
        [ -z "$(qemu_pid)" ] || kill -9 "$pid" 2>/dev/null || true
        for _ in $(seq 50); do [ -n "$(qemu_pid)" ] || break; sleep 0.1; done
    fi
    if ip netns list 2>/dev/null | grep -qw "^$NDV_NETNS"; then
        # A process that is exiting holds the namespace a moment longer
        # than `qemu_pid` sees it: its command line goes with its memory,
        # before its namespaces go.
        for _ in $(seq 100); do
            [ -n "$(ip netns pids "$NDV_NETNS" 2>/dev/null)" ] || break
            sleep 0.1
        done
        local left
        left=$(ip netns pids "$NDV_NETNS" 2>/dev/null | tr '\n' ' ')
        if [ -n "$left" ]; then
            ps -o pid=,etime=,args= -p "$(echo $left | tr " " ,)" >&2 || true
            die "processes still in $NDV_NETNS: $left"
        fi
        ip netns del "$NDV_NETNS"
    fi
}

submit() { # bash script -> job id
    [ -n "$(qemu_pid)" ] || die "no guest running (interop/guest.sh up)"
    local id tmp
    id=$(date +%s%N)-$$
    tmp=$jobs/.$id
    mkdir "$tmp"
    printf '%s\n' "$1" >"$tmp/cmd"
    mv "$tmp" "$jobs/$id"
    echo "$id"
}

finished() { # id -> prints output, returns the job's status; 3 while it runs
    [ -d "$jobs/$1" ] || die "no job $1"
    [ -f "$jobs/$1/rc" ] || return 3
    cat "$jobs/$1/out"
    return "$(cat "$jobs/$1/rc")"
}

wait_job() {
    local t0=$SECONDS rc
    while :; do
        rc=0; finished "$1" || rc=$?
        [ $rc = 3 ] || return $rc
        [ -n "$(qemu_pid)" ] || { cat "$jobs/$1/out" 2>/dev/null; die "the guest stopped during job $1"; }
        if [ $((SECONDS - t0)) -ge "${NDV_JOB_TIMEOUT:-300}" ]; then
            cat "$jobs/$1/out" 2>/dev/null
            say "job $1 still running after ${NDV_JOB_TIMEOUT:-300} s"; return 124
        fi
        sleep 0.1
    done
}

status() {
    [ -n "$(qemu_pid)" ] || { echo "guest: not running"; return 1; }
    local out
    out=$(NDV_JOB_TIMEOUT=30 wait_job "$(submit 'cat /sys/class/infiniband/rxe0/ports/1/state')") ||
        { echo "guest: running but not answering"; return 1; }
    echo "guest: running (qemu pid $(qemu_pid)), rxe0 $out, $NDV_GUEST_IP; our side $NDV_HOST_IP in netns $NDV_NETNS"
}

capture() {
    local file=$1; shift
    capture_stop 2>/dev/null || true
    # -U and --immediate-mode: the last packets of an exchange reach the
    # file before the capture is stopped; -Z root: the file stays root's.
    ip netns exec "$NDV_NETNS" tcpdump -i "$NDV_TAP" -n -s 0 -U --immediate-mode -Z root \
        -w "$file" "$@" >"$run/tcpdump.log" 2>&1 &
    echo $! >"$run/tcpdump.pid"
    for _ in $(seq 100); do
        grep -qs 'listening on' "$run/tcpdump.log" && return 0
        kill -0 "$(cat "$run/tcpdump.pid")" 2>/dev/null || break
        sleep 0.05
    done
    cat "$run/tcpdump.log" >&2; die "tcpdump did not start"
}

capture_stop() {
    local pid
    pid=$(cat "$run/tcpdump.pid" 2>/dev/null) || return 0
    rm -f "$run/tcpdump.pid"
    kill -INT "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
}

usage() { sed -n '2,/^set -e/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
cmd=${1:-}; [ $# -gt 0 ] && shift
case "$cmd" in
up) up ;;
down) down ;;
status) status ;;
run) [ $# = 1 ] || usage; wait_job "$(submit "$1")" ;;
bg) [ $# = 1 ] || usage; submit "$1" ;;
wait) [ $# = 1 ] || usage; wait_job "$1" ;;
poll) [ $# = 1 ] || usage; finished "$1" ;;
host) [ $# = 1 ] || usage; exec ip netns exec "$NDV_NETNS" sh -c "$1" ;;
capture) [ $# -ge 1 ] || usage; capture "$@" ;;
capture-stop) capture_stop ;;
log) cat "$serial" ;;
*) usage ;;
esac
