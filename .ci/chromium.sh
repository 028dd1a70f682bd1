#!/usr/bin/env bash
# Debian's headless Chromium and its WebDriver for the browser tests (Playwright's own download cannot work here).
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
command -v chromium >/dev/null && command -v chromedriver >/dev/null
