#!/usr/bin/env bash
# CI's trixie leg (issue 40), called by scripts/test.sh: the suite a third time, against
# the .deb installed in a Debian 13 (trixie) root, on trixie's own python3 libraries,
# with the test tools from PyPI in a --system-site-packages venv inside the root.
# Usage: bash scripts/trixie-leg.sh DEB [PYTEST ARGS...]      (as root)
#
# The root comes from tests/support/cleanroot.py (the one root builder): cached once per
# machine, with every package of scripts/setup.sh. The leg runs on an overlay of it, in
# a mount namespace of its own, so the cached root never changes and every mount made
# here goes when the leg ends. The root shares the machine's network (PyPI for the test
# tools; the tests' own servers are on loopback and in their own network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
deb=$(realpath "$1")
shift
if [ "$(id -u)" -ne 0 ]; then
  echo "trixie-leg: needs root (a chroot, mounts)" >&2
  exit 2
fi

echo "== trixie root: build or reuse (tests/support/cleanroot.py)"
start=$SECONDS
lower=$(/usr/bin/python3 -m tests.support.cleanroot build trixie --machine)
echo "   $lower ($((SECONDS - start))s)"

leg=$(mktemp -d /tmp/typhapki-trixie-leg.XXXXXX)
trap 'rm -rf "$leg"' EXIT
mkdir -p "$leg/upper" "$leg/work" "$leg/root" "$leg/tree"
# The files git knows or would add, as scripts/build-deb.sh copies them, and the .deb.
git ls-files -z --cached --others --exclude-standard | sort -zu |
  while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done |
  tar --null -T - -cf - | tar -xf - -C "$leg/tree"
cp "$deb" "$leg/tree/typhapki.deb"

# shellcheck disable=SC2016 # expanded by the inner bash
unshare --mount --fork -- bash -c '
set -euo pipefail
lower=$1 leg=$2
shift 2
r=$leg/root
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$leg/upper,workdir=$leg/work" "$r"
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount --rbind /sys "$r/sys"
mount -t tmpfs tmpfs "$r/run"
mount -t tmpfs tmpfs "$r/tmp"
mkdir -p "$r/run/netns" "$r/run/lock" "$r/src"
mount --bind "$leg/tree" "$r/src"
cp /etc/resolv.conf "$r/etc/resolv.conf"
# pip in the root trusts what the machine'"'"'s pip trusts (PIP_CERT, else its CA bundle):
# a machine behind a TLS-inspecting proxy has that proxy'"'"'s CA there, the root not.
cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$r/etc/ssl/machine-ca.crt"
exec chroot "$r" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root \
  CI="${CI:-}" PIP_CERT=/etc/ssl/machine-ca.crt \
  bash /src/scripts/trixie-leg-inside.sh "$@"
' bash "$lower" "$leg" "$@"
