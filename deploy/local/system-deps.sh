#!/usr/bin/env bash
# The system packages the project's commands need on Debian, installed when missing (as
# root) or named with the command that installs them. `make demo`/`make install` need the
# base set; `make test` adds the browser (the dashboard's end-to-end tests drive Debian's
# chromium through chromedriver). Usage: system-deps.sh [--browser]
set -euo pipefail
need=()
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need+=(maven)
command -v redis-server >/dev/null || need+=(redis-server)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# the native fold (native/) is Rust: cargo from rustup, else Debian's; it links with cc,
# and its AES-GCM (ring) compiles a little C and assembly with it
command -v cargo >/dev/null || [ -x "$HOME/.cargo/bin/cargo" ] || need+=(cargo)
command -v cc >/dev/null || need+=(gcc)
if [ "${1:-}" = "--browser" ]; then
  command -v chromium >/dev/null || need+=(chromium)
  command -v chromedriver >/dev/null || need+=(chromium-driver)
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing system packages: ${need[*]}; install them with: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "installing system packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q "${need[@]}"
