#!/usr/bin/env bash
# Every combination of the optional layers builds: fault injection (`faults`)
# and packet capture (`capture`) of ndverbs-engine, forwarded by
# ndverbs-verbs and ndverbs-nd (default: both on). Checking ndverbs-nd with a
# combination checks verbs and engine with it too. Then the engine's
# feature test runs without either, where asking for them must fail cleanly.
#   scripts/features.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for features in "" "faults" "capture" "faults,capture"; do
    echo "features.sh: ndverbs-nd --no-default-features --features '$features'"
    cargo clippy -p ndverbs-nd --lib --no-default-features --features "$features" --quiet -- -D warnings
done
cargo test -p ndverbs-engine --no-default-features --test features --quiet
