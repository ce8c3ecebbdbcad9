#!/usr/bin/env bash
# Bounded fuzz run of the GGUF reader: writes the seed corpus, then runs gguf_fuzz for SECONDS.
# Usage: fuzz/run.sh BUILD_DIR SECONDS   (BUILD_DIR configured with -DGEM_FUZZ=ON and clang)
# Exits non-zero when the fuzzer finds a crash, leak, timeout or sanitizer report; the input
# that caused it is left in BUILD_DIR/fuzz/artifacts/.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$1
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
fuzzer=$build/fuzz/gguf_fuzz
writer=$build/fuzz/gguf_corpus_writer
for bin in "$fuzzer" "$writer"; do
  if [[ ! -x $bin ]]; then
    echo "fuzz/run.sh: $bin not found; build with -DGEM_FUZZ=ON first" >&2
    exit 2
  fi
done

seeds=$build/fuzz/seeds
work=$build/fuzz/corpus        # grows across runs: what the fuzzer found interesting
artifacts=$build/fuzz/artifacts
rm -rf "$seeds" "$artifacts"
mkdir -p "$seeds" "$work" "$artifacts"
"$writer" "$seeds"

echo "fuzz/run.sh: running gguf_fuzz for ${seconds} s"
set +e
"$fuzzer" "$work" "$seeds" \
  -dict="$here/gguf.dict" \
  -max_total_time="$seconds" \
  -max_len=8192 \
  -timeout=10 \
  -rss_limit_mb=2048 \
  -artifact_prefix="$artifacts/" \
  -print_final_stats=1
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
  echo "fuzz/run.sh: gguf_fuzz failed (exit $rc); reproducer(s):" >&2
  ls -l "$artifacts" >&2
  exit 1
fi
echo "fuzz/run.sh: no crash in ${seconds} s"
