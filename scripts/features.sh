#!/usr/bin/env bash
# Every combination of the optional features builds: fault injection
# (`faults`) and packet capture (`capture`) of ndverbs-engine, forwarded by
# ndverbs-verbs and ndverbs-nd (default: both on), and `serde` (Serialize for
# the counters) of ndverbs-verbs, forwarded by ndverbs-nd. Checking
# ndverbs-nd with a combination checks verbs and engine with it too. Then the
# engine's feature test runs without faults or capture, where asking for
# them must fail cleanly, and the serde test with serde.
#   scripts/features.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for features in "" faults capture faults,capture serde faults,serde capture,serde faults,capture,serde; do
    echo "features.sh: ndverbs-nd --no-default-features --features '$features'"
    cargo clippy -p ndverbs-nd --lib --no-default-features --features "$features" --quiet -- -D warnings
done
cargo test -p ndverbs-engine --no-default-features --test features --quiet
cargo test -p ndverbs-verbs --features serde --test serde_stats --quiet
