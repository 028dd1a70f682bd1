#!/usr/bin/env bash
# Makes sure PostgreSQL's server binaries exist for the `postgres` tests (scaffold.testing.PostgresServer).
# Finds `initdb` where PostgresServer looks (PATH, then /usr/lib/postgresql/*/bin); installs Debian's
# `postgresql` package only when there is none, so a second run is instant.
set -euo pipefail

have_initdb() {
  command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1 && return 0
  local bin
  for bin in /usr/lib/postgresql/*/bin; do
    [ -x "$bin/initdb" ] && [ -x "$bin/pg_ctl" ] && [ -x "$bin/postgres" ] && return 0
  done
  return 1
}

if have_initdb; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "PostgreSQL's server (initdb) is not installed and there is no apt-get; install PostgreSQL by hand" >&2
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
  else
    echo "PostgreSQL's server is not installed; need root or sudo to run: apt-get install postgresql" >&2
    exit 1
  fi
fi

echo "installing PostgreSQL (apt-get install postgresql)..." >&2
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null

if ! have_initdb; then
  echo "installed postgresql but still found no initdb on PATH or in /usr/lib/postgresql/*/bin" >&2
  exit 1
fi
