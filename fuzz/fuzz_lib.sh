# Shared by fuzz/run.sh and fuzz/run_request.sh (sourced): the argument check and one bounded
# libFuzzer run that exits non-zero, listing the reproducers, on a crash, leak, timeout or
# sanitizer report.

# fuzz_usage SCRIPT ARGS...: exactly BUILD_DIR SECONDS.
fuzz_usage() {
  local script=$1
  shift
  if [[ $# -ne 2 ]]; then
    echo "usage: $script BUILD_DIR SECONDS" >&2
    exit 2
  fi
}

# fuzz_need SCRIPT BINARY...: each built (configure with -DGEM_FUZZ=ON and clang).
fuzz_need() {
  local script=$1
  shift
  for bin in "$@"; do
    if [[ ! -x $bin ]]; then
      echo "$script: $bin not found; build with -DGEM_FUZZ=ON first" >&2
      exit 2
    fi
  done
}

# fuzz_run SCRIPT FUZZER SECONDS DICT MAX_LEN ARTIFACTS LOG CORPUS_DIR...: the run, its output in
# LOG (the progress lines left out of the terminal), the final stats line with the executions
# per second.
fuzz_run() {
  local script=$1 fuzzer=$2 seconds=$3 dict=$4 max_len=$5 artifacts=$6 log=$7
  shift 7
  rm -rf "$artifacts"
  mkdir -p "$artifacts"
  echo "$script: running $(basename "$fuzzer") for ${seconds} s"
  set +e
  "$fuzzer" "$@" \
    -dict="$dict" \
    -max_total_time="$seconds" \
    -max_len="$max_len" \
    -timeout=10 \
    -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/" \
    -print_final_stats=1 2>&1 | tee "$log" | grep -v '^#[0-9]*.*\(NEW\|REDUCE\|pulse\)'
  local rc=${PIPESTATUS[0]}
  set -e
  if [[ $rc -ne 0 ]]; then
    echo "$script: $(basename "$fuzzer") failed (exit $rc); reproducer(s):" >&2
    ls -l "$artifacts" >&2
    exit 1
  fi
  echo "$script: no crash in ${seconds} s"
}
