#!/usr/bin/env bash
# Build typhapki_<version>_all.deb with Debian's own tools, offline, in a copy of the
# tree (the checkout stays clean), then run lintian on it.
# Usage: bash scripts/build-deb.sh [OUTDIR]   (default dist/; prints the .deb's path)
set -euo pipefail
exec 3>&1 1>&2  # progress on stderr; stdout is the .deb's path only
cd "$(dirname "$0")/.."
OUTDIR=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
WORK=$(mktemp -d /tmp/typhapki-deb.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# The files git knows or would add (tracked, and new files not ignored): what a commit
# of the working tree would hold, without .venv, caches or earlier builds.
git ls-files -z --cached --others --exclude-standard | sort -zu |
  while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done |
  tar --null -T - -cf - | tar -xf - -C "$WORK" --one-top-level=src
cd "$WORK/src"
# Debian's own tools and interpreter only (a python3 earlier on PATH, e.g. pyenv, would
# build against other libraries). pybuild builds offline (--no-isolation).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
if ! (dpkg-buildpackage -us -uc -b >"$WORK/build.log" 2>&1); then
  tail -n 60 "$WORK/build.log" >&2
  echo "build-deb: dpkg-buildpackage failed (log above)" >&2
  exit 1
fi
deb=$(ls "$WORK"/typhapki_*_all.deb)
cp "$deb" "$OUTDIR/"
echo "== lintian"
# --fail-on error,warning: an unexplained warning fails the build (overrides in
# debian/typhapki.lintian-overrides say why each one is there).
# Tags on stdout; stderr (progress, the note about running as root) only on failure.
if ! lintian --fail-on error,warning --display-info --info "$WORK"/typhapki_*.changes \
  2>"$WORK/lintian.err"; then
  cat "$WORK/lintian.err" >&2
  echo "build-deb: lintian failed" >&2
  exit 1
fi
echo "$OUTDIR/$(basename "$deb")" >&3
