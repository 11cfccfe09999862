#!/usr/bin/env bash
# Instructions per round trip of the engine's small-message path: the
# lockstep ping-pong of crates/engine/tests/lockstep_pingpong.rs under
# callgrind, 10,000 rounds against none (both sides, the memory link's own
# cost included). Deterministic, so a change's effect shows on a noisy
# machine where timings do not. Needs valgrind.
#
#   scripts/instructions.sh            # this tree
#   scripts/instructions.sh OLD NEW    # two test binaries (paths printed below)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind > /dev/null || { echo "instructions.sh: needs valgrind (apt install valgrind)" >&2; exit 2; }
rounds=10000

count() { # binary rounds -> instructions
    ROUNDS=$2 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1" \
        --test-threads 1 lockstep 2>&1 | awk '/Collected/ { gsub(",", "", $NF); print $NF }'
}

per_round() { # binary
    local none many
    none=$(count "$1" 0)
    many=$(count "$1" "$rounds")
    echo $(( (many - none) / rounds ))
}

if [ $# -eq 0 ]; then
    bin=$(cargo test --release -p ndverbs-engine --test lockstep_pingpong --no-run 2>&1 |
        awk '/Executable/ { gsub(/[()]/, "", $NF); print $NF }')
    echo "$bin"
    set -- "$bin"
fi
for b in "$@"; do
    echo "$(per_round "$b") instructions per round trip  $b"
done
