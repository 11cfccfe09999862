#!/usr/bin/env bash
# Measures Debian's perftest through the C ABI libraries (ndv run ib_*)
# against ndv's own perftest (ndv perf) on the same link in the same run:
# two network namespaces joined by a veth pair, rounds interleaved, medians
# printed. Needs root and a release build (cargo build --release -p ndv).
#
#   scripts/cabi-bench.sh [ROUNDS] [MTU]      defaults: 5 rounds, veth MTU 9000
#
# Each round runs ndv perf write_bw and ib_write_bw (64 KiB WRITEs, 40000 of
# them), then ndv perf send_lat and ib_send_lat (2-byte SENDs, 20000 round
# trips), the order of each pair flipping every round; server in namespace A,
# client in B, all with the path MTU the link allows (rxe's rule: the largest
# IB MTU within the link MTU - 80). The table gives the medians and the
# median of the per-round ratios (each round's two runs seconds apart) with
# their spread.
set -euo pipefail
rounds=${1:-5}
mtu=${2:-9000}
here=$(cd "$(dirname "$0")/.." && pwd)
ndv=${NDV:-$here/target/release/ndv}
[ -x "$ndv" ] || { echo "cabi-bench: no $ndv (cargo build --release -p ndv)" >&2; exit 1; }
command -v ib_write_bw >/dev/null || { echo "cabi-bench: perftest missing (scripts/setup.sh)" >&2; exit 1; }
"$ndv" run --env >/dev/null   # links the libraries once, before timing anything

. "$here/scripts/veth-pair.sh"
trap veth_pair_down EXIT
veth_pair_up ndvbench "$mtu" 10.98.0

# run NAME SERVER-COMMAND CLIENT-COMMAND: the client's output on stdout.
run() {
    local port=$1; shift
    local server=$1 client=$2
    ip netns exec "$a" bash -c "$server" >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 200); do
        ip netns exec "$a" ss -ltnH | grep -q ":$port " && break
        sleep 0.05
    done
    ip netns exec "$b" bash -c "$client" 2>/dev/null
    wait "$pid" || true
}

# The result row's column COL (1-based) of perftest output on stdin.
col() { awk -v c="$1" '/^ *[0-9]+ +[0-9]+ / { print $c; exit }'; }

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

ibmtu=256
for m in 512 1024 2048 4096; do [ $((mtu - 80)) -ge $m ] && ibmtu=$m; done
dev="-d ndv0 -x 0 -m $ibmtu"
opt="-x 0 -m $ibmtu"
declare -a ndv_bw ib_bw ndv_lat ib_lat
bw() { run "$1" "$2 -p $1 -n 40000" "$2 -p $1 -n 40000 10.98.0.1" | col 4; }
lat() { run "$1" "$2 -p $1 -n 20000" "$2 -p $1 -n 20000 10.98.0.1" | col 5; }
for r in $(seq "$rounds"); do
    # The order flips every round, so drift in the machine's speed falls on
    # both sides alike.
    if [ $((r % 2)) = 1 ]; then
        ndv_bw+=("$(bw 18521 "$ndv perf write_bw $opt")")
        ib_bw+=("$(bw 18522 "$ndv run ib_write_bw $dev")")
        ndv_lat+=("$(lat 18523 "$ndv perf send_lat $opt")")
        ib_lat+=("$(lat 18524 "$ndv run ib_send_lat $dev")")
    else
        ib_bw+=("$(bw 18522 "$ndv run ib_write_bw $dev")")
        ndv_bw+=("$(bw 18521 "$ndv perf write_bw $opt")")
        ib_lat+=("$(lat 18524 "$ndv run ib_send_lat $dev")")
        ndv_lat+=("$(lat 18523 "$ndv perf send_lat $opt")")
    fi
    echo "round $r: write_bw MB/s ndv ${ndv_bw[-1]} ib ${ib_bw[-1]}; send_lat t_typical us ndv ${ndv_lat[-1]} ib ${ib_lat[-1]}" >&2
done
m() { printf '%s\n' "$@" | median; }
# Per-round ratios: perftest via the libraries over ndv perf (bandwidth), ndv
# perf over perftest via the libraries (latency: as speed).
ratios() { local -n x=$1 y=$2; for i in "${!x[@]}"; do awk -v a="${x[$i]}" -v b="${y[$i]}" 'BEGIN { print a / b }'; done; }
spread() { sort -g | awk '{ v[NR] = $1 } END { printf "%.2f–%.2f", v[1], v[NR] }'; }
bw_r=$(ratios ib_bw ndv_bw) lat_r=$(ratios ndv_lat ib_lat)
nb=$(m "${ndv_bw[@]}") ib=$(m "${ib_bw[@]}") nl=$(m "${ndv_lat[@]}") il=$(m "${ib_lat[@]}")
echo "| test (veth MTU $mtu, path MTU $ibmtu, $rounds rounds, medians) | ndv perf | perftest via ndv run | ratio (median of rounds, spread) |"
echo "|---|---|---|---|"
echo "| write_bw 64 KiB, MB/s | $nb | $ib | $(echo "$bw_r" | median | xargs printf '%.2f')× ($(echo "$bw_r" | spread)) |"
echo "| send_lat 2 B t_typical, µs (ratio as speed) | $nl | $il | $(echo "$lat_r" | median | xargs printf '%.2f')× ($(echo "$lat_r" | spread)) |"
