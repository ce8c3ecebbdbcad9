#!/usr/bin/env bash
# make demo: serve the demo model (or, before `gem serve` exists, describe it).
set -euo pipefail
GEM="$1"; MODEL="$2"; PORT="${3:-8080}"
if "$GEM" serve --help >/dev/null 2>&1; then
  echo "demo: serving $MODEL on http://127.0.0.1:$PORT (Ctrl-C stops it). Try:"
  echo "  curl -s http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' \\"
  echo "    -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":32}'"
  exec "$GEM" serve -m "$MODEL" --port "$PORT" --alias gem-demo
else
  exec "$GEM" inspect "$MODEL"
fi
