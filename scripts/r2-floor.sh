#!/usr/bin/env bash
# R2's system-call floor (issue 15): how much of `ndv perf send_lat`'s gap
# to a plain UDP ping-pong is the system calls ndverbs makes, and how much
# is what it does between them. Two network namespaces joined by veth (MTU
# 1500, as `ndv bench`'s R rows); per round, interleaved, the median half
# round trip of scripts/r2-floor.c with its system calls changed one step
# at a time toward ndverbs' (recvmsg with a control-message buffer, UDP_GRO
# on the socket, the answer and its riding ACK as one two-segment GSO run,
# sendmmsg), then `ndv perf send_lat -s 8` t_typical. Needs root, gcc and a
# release build (cargo build --release -p ndv).
#
#   scripts/r2-floor.sh [ROUNDS] [ITERS]      defaults: 5 rounds, 30000 round trips
set -euo pipefail
rounds=${1:-5}
iters=${2:-30000}
here=$(cd "$(dirname "$0")/.." && pwd)
ndv=${NDV:-$here/target/release/ndv}
[ -x "$ndv" ] || { echo "r2-floor: no $ndv (cargo build --release -p ndv)" >&2; exit 1; }
command -v gcc >/dev/null || { echo "r2-floor: needs gcc (scripts/setup.sh)" >&2; exit 1; }
. "$here/scripts/veth-pair.sh"
tmp=$(mktemp -d)
cleanup() {
    veth_pair_down
    rm -rf "$tmp"
}
trap cleanup EXIT
gcc -O2 -Wall -o "$tmp/r2-floor" "$here/scripts/r2-floor.c"
veth_pair_up ndvfloor 1500 10.95.0

floor() { # steps -> median half round trip (µs)
    ip netns exec "$a" "$tmp/r2-floor" "$1" server 10.95.0.1 10.95.0.2 1 &
    local srv=$!
    sleep 0.2
    # (UDP may drop; a lost datagram ends the run here rather than hanging it)
    timeout 120 ip netns exec "$b" "$tmp/r2-floor" "$1" client 10.95.0.2 10.95.0.1 "$iters"
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
}
send_lat() { # -> t_typical (µs)
    ip netns exec "$a" "$ndv" perf send_lat -s 8 -n "$iters" -p 19998 >/dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    timeout 120 ip netns exec "$b" "$ndv" perf send_lat -s 8 -n "$iters" -p 19998 10.95.0.1 2>/dev/null |
        awk '$1 == 8 { print $5 }'
    wait "$srv" || true
}

steps=(p r rg rgs rgsm)
names=("plain: sendto, recv"
    "+ recvmsg with a control buffer"
    "+ UDP_GRO on the sockets"
    "+ the answer and its ACK as one GSO run (sendmsg)"
    "+ sendmmsg: ndverbs' system calls")
for ((r = 1; r <= rounds; r++)); do
    for s in "${steps[@]}"; do
        echo "$s $(floor "$s")" >> "$tmp/res"
    done
    echo "ndv $(send_lat)" >> "$tmp/res"
    echo "round $r/$rounds done" >&2
done
python3 - "$tmp/res" "${names[@]}" <<'PYEOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    rows.setdefault(k, []).append(float(v))
names = dict(zip(["p", "r", "rg", "rgs", "rgsm"], sys.argv[2:]))
names["ndv"] = "ndv perf send_lat -s 8 (t_typical)"
base = statistics.median(rows["p"])
print("| half round trip, veth MTU 1500 | median µs | min–max | over plain |")
print("|---|---|---|---|")
for k in ["p", "r", "rg", "rgs", "rgsm", "ndv"]:
    v = rows.get(k, [])
    if not v:
        continue
    m = statistics.median(v)
    print(f"| {names[k]} | {m:.2f} | {min(v):.2f}–{max(v):.2f} | {m - base:+.2f} |")
PYEOF
