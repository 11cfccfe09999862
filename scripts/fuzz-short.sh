#!/usr/bin/env bash
# Builds every cargo-fuzz target in fuzz/ and runs each for a fixed time
# budget; exits non-zero if any target crashed (or failed to build).
#
# usage: scripts/fuzz-short.sh [SECONDS] [TARGET...]
#   SECONDS  per target, default 30 (or $FUZZ_SECONDS)
#   TARGET   default: every target `cargo fuzz list` names
#
# Toolchain: cargo-fuzz passes -Z flags (AddressSanitizer, SanitizerCoverage)
# to rustc, so it needs nightly. This uses `cargo +nightly` when rustup has a
# nightly toolchain, and otherwise the default (stable) toolchain with
# RUSTC_BOOTSTRAP=1, which unlocks the same flags; both work here. Set
# FUZZ_TOOLCHAIN=nightly|bootstrap to choose.
#
# The committed seeds in fuzz/corpus/<target>/ are only read: new inputs
# libFuzzer finds go to a scratch directory, so a run leaves the work tree as
# it was, except for crash reproducers in fuzz/artifacts/<target>/ (ignored by
# git). A crash prints its input file; copy it to fuzz/regressions/<target>/
# once fixed, and the stable test `cargo test -p ndverbs-wire --test
# fuzz_corpus` replays it from then on.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz_dir="$root/fuzz"
seconds="${1:-${FUZZ_SECONDS:-30}}"
shift || true
case "$seconds" in
    '' | *[!0-9]*) echo "fuzz-short: SECONDS must be a number, got '$seconds'" >&2; exit 2 ;;
esac

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-short: installing cargo-fuzz"
    cargo install cargo-fuzz --locked || exit 1
fi

toolchain="${FUZZ_TOOLCHAIN:-}"
if [ -z "$toolchain" ]; then
    if command -v rustup >/dev/null 2>&1 && rustup run nightly rustc --version >/dev/null 2>&1; then
        toolchain=nightly
    else
        toolchain=bootstrap
    fi
fi
case "$toolchain" in
    nightly) cargo_fuzz=(cargo +nightly fuzz); rustc_version="$(rustc +nightly --version)" ;;
    bootstrap) cargo_fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz); rustc_version="$(rustc --version)" ;;
    *) echo "fuzz-short: FUZZ_TOOLCHAIN must be nightly or bootstrap" >&2; exit 2 ;;
esac
echo "fuzz-short: toolchain: $toolchain ($rustc_version)"

cd "$root" || exit 1
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <("${cargo_fuzz[@]}" list --fuzz-dir "$fuzz_dir")
fi
if [ "${#targets[@]}" -eq 0 ]; then
    echo "fuzz-short: no fuzz targets found in $fuzz_dir" >&2
    exit 1
fi

"${cargo_fuzz[@]}" build --fuzz-dir "$fuzz_dir" || { echo "fuzz-short: build failed" >&2; exit 1; }

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
failed=()
for target in "${targets[@]}"; do
    echo "=== $target: ${seconds}s"
    mkdir -p "$scratch/$target" "$fuzz_dir/corpus/$target"
    log="$scratch/$target.log"
    # -timeout: an input taking over 10 s is a hang; -rss_limit_mb: the
    # machines have 24 GiB, and no check here needs more than a few hundred MB.
    "${cargo_fuzz[@]}" run --fuzz-dir "$fuzz_dir" "$target" \
        "$scratch/$target" "$fuzz_dir/corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
        -print_final_stats=1 >"$log" 2>&1
    status=$?
    grep -E '^Done [0-9]+ runs|^stat::number_of_executed_units|^stat::peak_rss_mb' "$log" | sort -u
    if [ "$status" -ne 0 ]; then
        # The panic message and where libFuzzer saved the input.
        grep -E -A2 "panicked at|^==[0-9]+==ERROR|Test unit written to|^SUMMARY" "$log" | grep -v '^--$'
        echo "=== $target: FAILED (exit $status); full log follows"
        tail -n 60 "$log"
        failed+=("$target")
    else
        echo "=== $target: ok"
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz-short: ${#failed[@]} target(s) crashed: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz-short: ${#targets[@]} target(s), no crash in ${seconds}s each"
