#!/usr/bin/env bash
# gem serve --no-webui: no chat page at / (a JSON 404), the API still answers. Run through
# `gem agent ... --no-webui -- bash webui_off_test.sh` (OPENAI_BASE_URL points at the server).
set -euo pipefail
BASE="${OPENAI_BASE_URL:?run me through gem agent}"
ROOT="${BASE%/v1}"
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
code=$(curl -s -o "$tmp/body" -D "$tmp/h" -w '%{http_code}' "$ROOT/")
[ "$code" = 404 ] || fail "GET / with --no-webui: HTTP $code"
grep -qi '^content-type: application/json' "$tmp/h" || fail "404 is not JSON: $(cat "$tmp/h")"
grep -q '"not_found_error"' "$tmp/body" || fail "404 body: $(cat "$tmp/body")"
code=$(curl -s -o /dev/null -w '%{http_code}' "$BASE/models")
[ "$code" = 200 ] || fail "/v1/models: HTTP $code"
echo "ok: --no-webui"
