#!/usr/bin/env bash
# Bounded fuzz run of the GGUF reader: writes the seed corpus, then runs gguf_fuzz for SECONDS.
# Usage: fuzz/run.sh BUILD_DIR SECONDS   (BUILD_DIR configured with -DGEM_FUZZ=ON and clang)
# Exits non-zero when the fuzzer finds a crash, leak, timeout or sanitizer report; the input
# that caused it is left in BUILD_DIR/fuzz/artifacts/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/fuzz_lib.sh"
fuzz_usage fuzz/run.sh "$@"
build=$1
seconds=$2
fuzzer=$build/fuzz/gguf_fuzz
writer=$build/fuzz/gguf_corpus_writer
fuzz_need fuzz/run.sh "$fuzzer" "$writer"

seeds=$build/fuzz/seeds
work=$build/fuzz/corpus        # grows across runs: what the fuzzer found interesting
rm -rf "$seeds"
mkdir -p "$seeds" "$work"
"$writer" "$seeds"
fuzz_run fuzz/run.sh "$fuzzer" "$seconds" "$here/gguf.dict" 8192 "$build/fuzz/artifacts" \
  "$build/fuzz/gguf_fuzz.log" "$work" "$seeds"
