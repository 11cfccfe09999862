#!/usr/bin/env bash
# Measures Open MPI over ndverbs (pml cm, mtl ofi, libfabric's verbs;ofi_rxm
# through the C ABI libraries) against `ndv perf` on the same link and
# against Open MPI's own TCP transport (pml ob1, btl tcp), in the same run:
# two network namespaces joined by a veth pair, one rank in each, rounds
# interleaved, medians printed. Needs root, a release build (cargo build
# --release -p ndv) and scripts/setup.sh's packages (openmpi, libfabric).
#
#   scripts/mpi-bench.sh [ROUNDS] [MTU]      defaults: 5 rounds, veth MTU 1500
#
# Each round runs ndv perf send_lat (8-byte SENDs, 20000 round trips,
# t_typical) and write_bw (1 MiB WRITEs, 1000 of them), then the MPI checker
# (crates/ndv/tests/mpi/mpicheck.c: 2000 8-byte round trips, the median half
# round trip; 42 windows of 32 1-MiB messages, the median window's
# bandwidth) over ndverbs and over TCP, the order of the MPI pair flipping
# every round; then Open MPI over UCX (pml ucx, rc_verbs) on ndverbs and, if
# MPICH is installed, MPICH over the same. The tables give the medians and
# the median of the per-round ratios with their spread.
set -euo pipefail
rounds=${1:-5}
mtu=${2:-1500}
here=$(cd "$(dirname "$0")/.." && pwd)
ndv=${NDV:-$here/target/release/ndv}
[ -x "$ndv" ] || { echo "mpi-bench: no $ndv (cargo build --release -p ndv)" >&2; exit 1; }
command -v mpicc >/dev/null || { echo "mpi-bench: Open MPI missing (scripts/setup.sh)" >&2; exit 1; }
"$ndv" run --env >/dev/null   # links the libraries once, before timing anything

. "$here/scripts/veth-pair.sh"
tmp=$(mktemp -d)
cleanup() {
    veth_pair_down
    rm -rf "$tmp"
}
trap cleanup EXIT
veth_pair_up ndvmpi "$mtu" 10.98.0

mpicc -O2 -o "$tmp/mpicheck" "$here/crates/ndv/tests/mpi/mpicheck.c"
# Open MPI's rsh agent: the remote rank's orted runs in namespace B.
cat > "$tmp/agent" <<EOF
#!/bin/sh
shift
exec ip netns exec $b sh -c "\$*"
EOF
chmod +x "$tmp/agent"
printf '10.98.0.1 slots=1\n10.98.0.2 slots=1\n' > "$tmp/hosts"
# Over UCX (rc_verbs, with ud_verbs for its wire-up) on our device: each
# rank under `ndv run --ucx`, which the launcher agent adds in the rank's
# namespace (`ip netns exec` mounts a sysfs of its own). Open MPI with pml
# ucx, and MPICH (Debian's is built on UCX) when installed.
cat > "$tmp/ucx-agent" <<EOF
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
case \$1 in 10.98.0.1) ns=$a ;; *) ns=$b ;; esac
shift
exec ip netns exec \$ns env -u LD_LIBRARY_PATH $ndv run --ucx -- sh -c "\$*"
EOF
chmod +x "$tmp/ucx-agent"
mpich=
if command -v mpicc.mpich >/dev/null && command -v mpirun.mpich >/dev/null; then
    mpich=1
    # (MPICH's MPI_STATUSES_IGNORE trips a gcc warning: not ours.)
    mpicc.mpich -O2 -o "$tmp/mpicheck.mpich" "$here/crates/ndv/tests/mpi/mpicheck.c" 2>/dev/null
fi

# perf TEST ARGS: the client's result row.
perf() {
    local t=$1; shift
    ip netns exec "$a" "$ndv" perf "$t" "$@" >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 200); do
        ip netns exec "$a" ss -ltnH | grep -q ":18515 " && break
        sleep 0.05
    done
    ip netns exec "$b" "$ndv" perf "$t" "$@" 10.98.0.1 2>/dev/null | awk '/^ *[0-9]+ +[0-9]+ / { print; exit }'
    wait "$pid" || true
}

common=(--hostfile "$tmp/hosts" -np 2 --bind-to none --mca plm_rsh_agent "$tmp/agent"
        --mca oob_tcp_if_include 10.98.0.0/24 --mca osc pt2pt)
mpi_ndv() {
    ip netns exec "$a" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        FI_PROVIDER="verbs;ofi_rxm" "$ndv" run -- mpirun "${common[@]}" \
        --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "verbs;ofi_rxm" \
        --mca btl self "$tmp/mpicheck" 2000 2>&1
}
mpi_tcp() {
    ip netns exec "$a" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun "${common[@]}" --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include 10.98.0.0/24 "$tmp/mpicheck" 2000 2>&1
}
mpi_ompi_ucx() {
    ip netns exec "$a" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=ndv0:1 "$ndv" run --ucx -- mpirun \
        --hostfile "$tmp/hosts" -np 2 --bind-to none --mca plm_rsh_agent "$tmp/ucx-agent" \
        --mca oob_tcp_if_include 10.98.0.0/24 --mca osc pt2pt --mca pml ucx \
        -x UCX_TLS -x UCX_NET_DEVICES "$tmp/mpicheck" 2000 2>&1
}
mpi_mpich() {
    ip netns exec "$a" env UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=ndv0:1 "$ndv" run --ucx -- \
        mpirun.mpich -hosts 10.98.0.1:1,10.98.0.2:1 -np 2 -iface veth0 -launcher ssh \
        -launcher-exec "$tmp/ucx-agent" "$tmp/mpicheck.mpich" 2000 2>&1
}
# The median latency (µs) and the median window's bandwidth (MB/s) of
# mpicheck's output on stdin; fails on a run that did not check out.
mpi_vals() {
    awk '/^latency 8 B:/ { l = $7 } /^bandwidth 1048576 B:/ { b = $8 } /^mpicheck ok/ { ok = 1 }
         END { if (!ok || l == "" || b == "") exit 1; print l, b }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -a p_lat p_bw n_lat n_bw t_lat t_bw o_lat o_bw u_lat u_bw
# The host's state: how long a cache line takes from one CPU to another
# (`ndv bench --handoff`, ns; on a VM it can change 5× within a second,
# and the two-process figures with it: BENCHMARKS.md). Each round prints
# it before the ndverbs/TCP pair and after it.
handoff() { "$ndv" bench --handoff 2>/dev/null || echo "?"; }
for r in $(seq "$rounds"); do
    p_lat+=("$(perf send_lat -s 8 -n 20000 | awk '{ print $5 }')")
    p_bw+=("$(perf write_bw -s 1048576 -n 1000 | awk '{ print $4 }')")
    h0=$(handoff)
    if [ $((r % 2)) = 1 ]; then
        read -r nl nb < <(mpi_ndv | mpi_vals)
        read -r tl tb < <(mpi_tcp | mpi_vals)
    else
        read -r tl tb < <(mpi_tcp | mpi_vals)
        read -r nl nb < <(mpi_ndv | mpi_vals)
    fi
    h1=$(handoff)
    n_lat+=("$nl") n_bw+=("$nb") t_lat+=("$tl") t_bw+=("$tb")
    echo "round $r: ndv perf send_lat ${p_lat[-1]} us write_bw ${p_bw[-1]} MB/s; MPI ndverbs $nl us $nb MB/s; MPI TCP $tl us $tb MB/s; cross-CPU handoff $h0 -> $h1 ns" >&2
    read -r ol ob < <(mpi_ompi_ucx | mpi_vals)
    o_lat+=("$ol") o_bw+=("$ob")
    echo "round $r: Open MPI over UCX rc_verbs on ndverbs $ol us $ob MB/s" >&2
    if [ -n "$mpich" ]; then
        read -r ul ub < <(mpi_mpich | mpi_vals)
        u_lat+=("$ul") u_bw+=("$ub")
        echo "round $r: MPICH over UCX rc_verbs on ndverbs $ul us $ub MB/s" >&2
    fi
done
m() { printf '%s\n' "$@" | median; }
ratios() { local -n x=$1 y=$2; for i in "${!x[@]}"; do awk -v a="${x[$i]}" -v b="${y[$i]}" 'BEGIN { print a / b }'; done; }
spread() { sort -g | awk '{ v[NR] = $1 } END { printf "%.2f–%.2f", v[1], v[NR] }'; }
row() { local r; r=$(ratios "$1" "$2"); printf '%.2f× (%s)' "$(echo "$r" | median)" "$(echo "$r" | spread)"; }
echo "| (veth MTU $mtu, $rounds rounds, medians) | MPI over ndverbs | ndv perf | MPI over TCP | MPI ndverbs / ndv perf | MPI ndverbs / MPI TCP |"
echo "|---|---|---|---|---|---|"
echo "| 8 B half round trip, µs | $(m "${n_lat[@]}") | $(m "${p_lat[@]}") (send_lat) | $(m "${t_lat[@]}") | $(row n_lat p_lat) | $(row n_lat t_lat) |"
echo "| 1 MiB bandwidth, MB/s | $(m "${n_bw[@]}") | $(m "${p_bw[@]}") (write_bw) | $(m "${t_bw[@]}") | $(row n_bw p_bw) | $(row n_bw t_bw) |"
echo
echo "| over UCX rc_verbs on ndverbs | value | / ndv perf | / Open MPI over TCP |"
echo "|---|---|---|---|"
echo "| Open MPI (pml ucx) 8 B half round trip, µs | $(m "${o_lat[@]}") | $(row o_lat p_lat) | $(row o_lat t_lat) |"
echo "| Open MPI (pml ucx) 1 MiB bandwidth, MB/s | $(m "${o_bw[@]}") | $(row o_bw p_bw) | $(row o_bw t_bw) |"
if [ -n "$mpich" ]; then
    echo "| MPICH 8 B half round trip, µs | $(m "${u_lat[@]}") | $(row u_lat p_lat) | $(row u_lat t_lat) |"
    echo "| MPICH 1 MiB bandwidth, MB/s | $(m "${u_bw[@]}") | $(row u_bw p_bw) | $(row u_bw t_bw) |"
fi
