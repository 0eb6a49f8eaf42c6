#!/usr/bin/env bash
# Runs every coverage-guided fuzz target (fuzz/fuzz_targets) for SECONDS
# each (default 180) and reports executions, coverage and findings.
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# Not part of CI (docs/bad-input.md, hostile messages); run it before
# changing a decoder, and keep the seed corpus in fuzz/corpus.
#
#   scripts/fuzz.sh            # every target, 180 s each
#   scripts/fuzz.sh 60 csv     # one target, 60 s
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-180}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(decode_debezium decode_json csv config predicate)
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-/work/fuzz-target}"
# No sanitizer: the crate forbids unsafe code; the search is for panics,
# aborts and stack overflows, which libFuzzer catches on its own.
cargo +nightly fuzz build -O -s none >/dev/null 2>&1 \
  || { echo "fuzz build failed:"; cargo +nightly fuzz build -O -s none; exit 1; }
status=0
printf '%-16s %12s %8s %9s\n' target executions coverage findings
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  work="$(mktemp -d)"
  cp -r "corpus/$t/." "$work/" 2>/dev/null || true
  log="$(mktemp)"
  # -rss_limit_mb bounds memory per input; -timeout flags inputs slower than 10 s.
  cargo +nightly fuzz run -O -s none "$t" "$work" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    >"$log" 2>&1 || status=1
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')"
  cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')"
  found="$(find "artifacts/$t" -type f | wc -l)"
  printf '%-16s %12s %8s %9s\n' "$t" "$execs" "$cov" "$found"
  [ "$found" -eq 0 ] || { status=1; tail -30 "$log"; }
  rm -rf "$work" "$log"
done
exit $status
