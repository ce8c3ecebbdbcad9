#!/usr/bin/env bash
# Bounded fuzz run of the server's request path (request_fuzz: body -> nesting bound -> parse ->
# validation -> chat render -> tokens), seeded from fuzz/request_corpus/ (real requests: hax's,
# the OpenAI SDK's, the test suite's). Usage: fuzz/run_request.sh BUILD_DIR SECONDS
# Exits non-zero on a crash, leak, timeout or sanitizer report; the input is left in
# BUILD_DIR/fuzz/request_artifacts/. The final stats line gives the executions per second.
# The tokenizer: $GEM_FUZZ_VOCAB, by default the vocabulary gem ships (data/gemma4-vocab.gguf).
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$1
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
fuzzer=$build/fuzz/request_fuzz
if [[ ! -x $fuzzer ]]; then
  echo "fuzz/run_request.sh: $fuzzer not found; build with -DGEM_FUZZ=ON first" >&2
  exit 2
fi
export GEM_FUZZ_VOCAB=${GEM_FUZZ_VOCAB:-$here/../data/gemma4-vocab.gguf}
if [[ ! -f $GEM_FUZZ_VOCAB ]]; then
  echo "fuzz/run_request.sh: $GEM_FUZZ_VOCAB not found; set GEM_FUZZ_VOCAB to a Gemma 4 GGUF" >&2
  exit 2
fi
work=$build/fuzz/request_work  # grows across runs: what the fuzzer found interesting
artifacts=$build/fuzz/request_artifacts
rm -rf "$artifacts"
mkdir -p "$work" "$artifacts"

echo "fuzz/run_request.sh: running request_fuzz for ${seconds} s"
set +e
"$fuzzer" "$work" "$here/request_corpus" \
  -dict="$here/request.dict" \
  -max_total_time="$seconds" \
  -max_len=65536 \
  -timeout=10 \
  -rss_limit_mb=2048 \
  -artifact_prefix="$artifacts/" \
  -print_final_stats=1 2>&1 | tee "$build/fuzz/request_fuzz.log" | grep -v '^#[0-9]*.*\(NEW\|REDUCE\|pulse\)'
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]]; then
  echo "fuzz/run_request.sh: request_fuzz failed (exit $rc); reproducer(s):" >&2
  ls -l "$artifacts" >&2
  exit 1
fi
echo "fuzz/run_request.sh: no crash in ${seconds} s"
