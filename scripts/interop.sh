#!/usr/bin/env bash
# Boots (up) or stops (down) the shared Linux Soft-RoCE guest used by the
# interop tests, once per test run. The harness lives in ../shared/interop
# (override with NDV_INTEROP_DIR). Without root, /dev/net/tun or the harness,
# `up` prints SKIPPED and succeeds, unless CI=true, where it fails.
#   scripts/interop.sh up | down | status
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${NDV_INTEROP_DIR:-$here/../shared/interop}
skip() {
    if [ "${CI:-}" = true ]; then echo "interop: $1 (required under CI=true)" >&2; exit 1; fi
    echo "SKIPPED: interop guest not started — $1"; exit 0
}
case "${1:-}" in
up)
    [ -x "$dir/run-guest.sh" ] || skip "no harness at $dir"
    [ "$(id -u)" = 0 ] || skip "not root"
    [ -c /dev/net/tun ] || skip "no /dev/net/tun"
    if "$dir/run-guest.sh" status >/dev/null 2>&1 && "$dir/run-guest.sh" guest true >/dev/null 2>&1; then
        echo "interop: guest already running"; exit 0
    fi
    out=${NDV_OUT:-/var/tmp/ndv-interop}
    if [ ! -f "$out/vmlinuz" ] || [ ! -f "$out/initramfs.gz" ]; then
        echo "interop: building the guest image (downloads Debian packages once)"
        "$dir/build-guest.sh" >/tmp/ndv-build-guest.log 2>&1 || { tail -20 /tmp/ndv-build-guest.log; exit 1; }
    fi
    "$dir/teardown.sh" >/dev/null 2>&1 || true
    "$dir/run-guest.sh" start >/tmp/ndv-guest-start.log 2>&1 || { tail -20 /tmp/ndv-guest-start.log; exit 1; }
    echo "interop: guest up"
    ;;
down)
    [ -x "$dir/teardown.sh" ] && "$dir/teardown.sh" >/dev/null 2>&1 || true
    ;;
status)
    "$dir/run-guest.sh" status
    ;;
*)
    echo "usage: $0 up|down|status" >&2; exit 2
    ;;
esac
