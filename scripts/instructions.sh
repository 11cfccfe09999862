#!/usr/bin/env bash
# Instructions per message of the engine's data path, under callgrind:
# crates/engine/tests/lockstep_pingpong.rs runs the same exchange ROUNDS
# times between two manual-progress NICs on the memory link, in lockstep on
# one thread, and ROUNDS rounds are compared against none (both sides, the
# memory link's own cost included). Deterministic, so a change's effect
# shows on a noisy machine where timings do not. Needs valgrind.
#
#   scripts/instructions.sh                 # small SENDs: per round trip
#   scripts/instructions.sh read            # 64 KiB READs: per response packet
#   scripts/instructions.sh write           # 64 KiB WRITEs: per request packet
#   scripts/instructions.sh icache          # small SENDs: misses of a 32-KiB
#                                           # instruction cache per round trip
#   scripts/instructions.sh empty           # a CQ poll that finds nothing (its step)
#   scripts/instructions.sh [read|write|icache|empty] OLD NEW  # two test binaries (paths printed below)
#
# `icache` simulates the first-level instruction cache of the machines
# here (32 KiB, 8-way, 64-byte lines) with cachegrind: the misses count the
# code a round trip runs through, which bounds the small-message path more
# than its instructions do (BENCHMARKS.md, R2).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind > /dev/null || { echo "instructions.sh: needs valgrind (apt install valgrind)" >&2; exit 2; }
test=lockstep_pingpong rounds=10000 per=1 unit="round trip" what=instructions
if [ "${1:-}" = read ]; then
    # 64 responses of 1 KiB per READ (path MTU 1024).
    test=lockstep_reads rounds=200 per=64 unit="READ response packet"
    shift
elif [ "${1:-}" = write ]; then
    # 64 packets of 1 KiB per WRITE (path MTU 1024).
    test=lockstep_writes rounds=200 per=64 unit="WRITE packet"
    shift
elif [ "${1:-}" = empty ]; then
    test=lockstep_empty_polls rounds=20000 unit="empty poll"
    shift
elif [ "${1:-}" = icache ]; then
    what="instruction-cache misses" rounds=5000
    shift
fi

count() { # binary rounds -> instructions (or instruction-cache misses)
    if [ "$what" = instructions ]; then
        ROUNDS=$2 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1" \
            --test-threads 1 "$test" 2>&1 | awk '/Collected/ { gsub(",", "", $NF); print $NF }'
    else
        ROUNDS=$2 valgrind --tool=cachegrind --cache-sim=yes --I1=32768,8,64 \
            --D1=32768,8,64 --LL=1048576,16,64 --cachegrind-out-file=/dev/null "$1" \
            --test-threads 1 "$test" 2>&1 | awk '/I1  misses/ { gsub(",", "", $4); print $4 }'
    fi
}

per_unit() { # binary
    local none many
    none=$(count "$1" 0)
    many=$(count "$1" "$rounds")
    echo $(( (many - none) / (rounds * per) ))
}

if [ $# -eq 0 ]; then
    bin=$(cargo test --release -p ndverbs-engine --test lockstep_pingpong --no-run 2>&1 |
        awk '/Executable/ { gsub(/[()]/, "", $NF); print $NF }')
    echo "$bin"
    set -- "$bin"
fi
for b in "$@"; do
    echo "$(per_unit "$b") $what per $unit  $b"
done
