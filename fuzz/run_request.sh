#!/usr/bin/env bash
# Bounded fuzz run of the server's request path (request_fuzz: body -> nesting bound -> parse ->
# validation -> chat render -> tokens), seeded from fuzz/request_corpus/ (real requests: hax's,
# the OpenAI SDK's, the test suite's). Usage: fuzz/run_request.sh BUILD_DIR SECONDS
# Exits non-zero on a crash, leak, timeout or sanitizer report; the input is left in
# BUILD_DIR/fuzz/request_artifacts/. The final stats line gives the executions per second.
# The tokenizer: $GEM_FUZZ_VOCAB, by default the vocabulary gem ships (data/gemma4-vocab.gguf).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/fuzz_lib.sh"
fuzz_usage fuzz/run_request.sh "$@"
build=$1
seconds=$2
fuzzer=$build/fuzz/request_fuzz
fuzz_need fuzz/run_request.sh "$fuzzer"
export GEM_FUZZ_VOCAB=${GEM_FUZZ_VOCAB:-$here/../data/gemma4-vocab.gguf}
if [[ ! -f $GEM_FUZZ_VOCAB ]]; then
  echo "fuzz/run_request.sh: $GEM_FUZZ_VOCAB not found; set GEM_FUZZ_VOCAB to a Gemma 4 GGUF" >&2
  exit 2
fi
work=$build/fuzz/request_work  # grows across runs: what the fuzzer found interesting
mkdir -p "$work"
fuzz_run fuzz/run_request.sh "$fuzzer" "$seconds" "$here/request.dict" 65536 \
  "$build/fuzz/request_artifacts" "$build/fuzz/request_fuzz.log" "$work" "$here/request_corpus"
