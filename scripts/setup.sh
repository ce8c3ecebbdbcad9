#!/usr/bin/env bash
# Installs what gem's build and tests need on Debian 12, from Debian's packages and npm only.
# Idempotent: installs only what is missing. Run as root (or with sudo available).
set -euo pipefail
cd "$(dirname "$0")/.."

DEBS=(build-essential cmake ninja-build pkg-config git python3 python3-jinja2 python3-numpy
      libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcpp-httplib-dev libcli11-dev
      clang libclang-rt-14-dev curl ca-certificates
      chromium)  # Debian's Chromium for the chat page's browser test (tests/e2e/webui_test.mjs)

missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js 18+ and npm for the OpenAI SDK client tests (the machine may already carry Node 20).
if ! command -v node >/dev/null 2>&1; then missing+=(nodejs); fi
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The OpenAI Node SDK (version 6 runs on Node 20) for the server's client tests, playwright-core
# (a driver only: it never downloads a browser; the test uses /usr/bin/chromium), and Ajv (the
# JSON Schema validator that checks response_format replies).
if [ -f tests/e2e/package.json ] && { [ ! -d tests/e2e/node_modules/openai ] ||
                                     [ ! -d tests/e2e/node_modules/playwright-core ] ||
                                     [ ! -d tests/e2e/node_modules/ajv ]; }; then
  echo "setup: npm install (tests/e2e)"
  (cd tests/e2e && npm install --no-audit --no-fund --silent)
fi
echo "setup: ok"
