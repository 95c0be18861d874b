#!/usr/bin/env bash
# Install everything typhapki, its demo and its tests need on a fresh Debian machine:
# the system components the tests drive for real, then a virtualenv with the package.
# Idempotent: a second run only checks. Usage: bash scripts/setup.sh [VENV_DIR]
# TYPHAPKI_NEWEST=1 (scripts/test.sh) also upgrades every Python dependency to its newest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-${TYPHAPKI_VENV:-.venv}}

SYSTEM_PACKAGES=(
  openssl curl ca-certificates iproute2 iptables ferm netbase nftables dnsmasq-base
  # the suite's own PID namespace needs an init that reaps (scripts/test.sh)
  util-linux tini
  puppet-agent facter git golang-go
  # central issuance, monitoring, the Puppet module, the Debian package
  golang-cfssl prometheus prometheus-node-exporter systemd
  # the fleet view (issue 23): PuppetDB on its own PostgreSQL cluster, the server's terminus
  puppetdb puppet-terminus-puppetdb postgresql
  # the PKI front of docs/issuance.md (mod_ssl, mod_proxy_http): tests/support/pkifront.py
  apache2
  # a node's clock moved past its renewal moment (tests/pki/signers/test_pkifront.py)
  faketime
  puppetserver puppet-lint puppet-strings puppet-module-puppetlabs-stdlib
  ruby-rspec-puppet ruby-puppetlabs-spec-helper ruby-rspec-puppet-facts
  # clean Debian roots from Debian's archive, for a fresh node (tests/support/cleanroot.py)
  debootstrap
  # build-essential: dpkg-buildpackage checks for it (README's `bash scripts/build-deb.sh`)
  build-essential dpkg-dev debhelper dh-python pybuild-plugin-pyproject python3-all python3-hatchling
  lintian bash-completion man-db
  # the module's metadata.json, as the Forge checks it (tests/puppet/test_module.py)
  metadata-json-lint
  # kubectl 1.20 (kustomize 2.0.3): the oldest kubectl the kustomization must build with
  kubernetes-client
  python3-typer python3-cryptography python3-dnspython python3-jinja2 python3-yaml
  python3-prometheus-client python3-venv
)
missing=()
for pkg in "${SYSTEM_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=900 update -qq
  # A machine image may carry another package's /usr/bin/kubectl (Google's "kubectl"),
  # which Debian's kubernetes-client also ships: divert that one aside, or dpkg refuses
  # to overwrite it and the whole install fails.
  owner=$(dpkg-query -S /usr/bin/kubectl 2>/dev/null | cut -d: -f1 || true)
  if [[ " ${missing[*]} " == *" kubernetes-client "* ]] && [ -n "$owner" ] &&
    [ "$owner" != kubernetes-client ] && [ -z "$(dpkg-divert --list /usr/bin/kubectl)" ]; then
    $SUDO dpkg-divert --package kubernetes-client --rename \
      --divert "/usr/bin/kubectl.$owner" --add /usr/bin/kubectl >/dev/null
  fi
  $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
if [ "${TYPHAPKI_NEWEST:-}" = 1 ]; then
  # CI's newest leg: every dependency at its newest release (no caps in pyproject.toml).
  "$VENV/bin/python" -m pip install -q --upgrade --upgrade-strategy eager -e ".[test]"
else
  "$VENV/bin/python" -m pip install -q -e ".[test]"
fi
echo "setup: system packages and $VENV ready"
