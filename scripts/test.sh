#!/usr/bin/env bash
# The whole test suite: what a newcomer runs and what CI runs (.ci/run).
#   scripts/test.sh
# Installs missing test dependencies (scripts/setup.sh), checks formatting and
# lints, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# One Linux Soft-RoCE guest for the whole run (interop tests skip loudly
# without it, and fail under CI=true).
scripts/interop.sh up
trap 'scripts/interop.sh down' EXIT
cargo test --workspace
# 1 GiB each of WRITE, READ and SEND through 10 % loss plus duplication,
# reordering, delay and corruption, in release mode (debug is too slow for it).
NDV_LOSSY_MIB=${NDV_LOSSY_MIB:-1024} cargo test --release -p ndverbs-engine --test lossy -- --nocapture
# The parsers under libFuzzer for a short fixed budget per target.
scripts/fuzz-short.sh "${FUZZ_SECONDS:-20}"
