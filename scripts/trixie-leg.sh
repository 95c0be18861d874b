#!/usr/bin/env bash
# CI's trixie leg (issue 40), called by scripts/test.sh: the suite a third time, against
# the .deb installed in a Debian 13 (trixie) root, on trixie's own python3 libraries,
# with the test tools from PyPI in a --system-site-packages venv inside the root.
# Usage: bash scripts/trixie-leg.sh DEB [PYTEST ARGS...]      (as root)
#
# The root comes from tests/support/cleanroot.py (the one root builder): cached once per
# machine, with every package of scripts/setup.sh. The leg runs on an overlay of it, in
# a mount namespace of its own, so the cached root never changes and every mount made
# here goes when the leg ends. The root shares the network namespace it is started in:
# scripts/test.sh starts it in the leg's own, with the machine's network through NAT
# (PyPI for the test tools; the tests' own servers are on the leg's loopback and in
# their own network namespaces).
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
# The root trusts what the machine trusts (PIP_CERT, else its CA bundle), for every
# client, pip in a test'"'"'s own venv included: a machine behind a TLS-inspecting proxy
# has that proxy'"'"'s CA there, the root not.
cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$r/etc/ssl/certs/ca-certificates.crt"
# pivot_root, not a plain chroot: a chrooted process may not make a user namespace
# (EPERM), and docs/nftables.md checks a fragment with `unshare --user` as a user would.
mkdir -p "$r/.leg-old-root"
cd "$r"
pivot_root . .leg-old-root
exec chroot . env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root \
  CI="${CI:-}" PIP_CERT=/etc/ssl/certs/ca-certificates.crt bash -c '"'"'umount --lazy /.leg-old-root && rmdir /.leg-old-root &&
  exec bash /src/scripts/trixie-leg-inside.sh "$@"'"'"' bash "$@"
' bash "$lower" "$leg" "$@"
