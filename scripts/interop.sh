#!/usr/bin/env bash
# Boots (up) or stops (down) the Linux Soft-RoCE guest the interop tests
# share, once per test run, with the repository's harness (interop/). Without
# root or /dev/net/tun, `up` prints SKIPPED and succeeds, unless CI=true,
# where it fails.
#   scripts/interop.sh up | down | status
set -euo pipefail
guest=$(cd "$(dirname "$0")/.." && pwd)/interop/guest.sh
skip() {
    if [ "${CI:-}" = true ]; then echo "interop: $1 (required under CI=true)" >&2; exit 1; fi
    echo "SKIPPED: interop guest not started — $1"; exit 0
}
case "${1:-}" in
up)
    [ "$(id -u)" = 0 ] || skip "not root"
    [ -c /dev/net/tun ] || skip "no /dev/net/tun"
    "$guest" up
    ;;
down) "$guest" down ;;
status) "$guest" status ;;
*) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
