#!/usr/bin/env bash
# Install everything typhapki, its demo and its tests need on a fresh Debian machine:
# the system components the tests drive for real, then a virtualenv with the package.
# Idempotent: a second run only checks. Usage: bash scripts/setup.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-${TYPHAPKI_VENV:-.venv}}

SYSTEM_PACKAGES=(
  openssl curl ca-certificates iproute2 iptables ferm dnsmasq-base
  puppet-agent facter git golang-go
)
missing=()
for pkg in "${SYSTEM_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install -q -e ".[test]"
echo "setup: system packages and $VENV ready"
