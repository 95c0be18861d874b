#!/usr/bin/env bash
# The main job on the bundled sample, end to end on this machine:
#   a cluster CA, one node's Typha and Felix sets, the Puppet `unless` check, the gated
#   Typha ferm rule (strict and relaxed) with real DNS, parsed by real ferm, and the
#   Kubernetes objects. DNS for the sample's names comes from dnsmasq on a loopback port.
# Usage: bash scripts/demo.sh [WORKDIR]   (cluster: TYPHAPKI_DEMO_CLUSTER, default staging-eqiad)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TYPHAPKI_VENV:-.venv}
WORK=${1:-$(mktemp -d /tmp/typhapki-demo.XXXXXX)}
CLUSTER=${TYPHAPKI_DEMO_CLUSTER:-staging-eqiad}
mkdir -p "$WORK"
echo "setting up (log: $WORK/setup.log)..."
bash scripts/setup.sh "$VENV" >"$WORK/setup.log" 2>&1 || { cat "$WORK/setup.log"; exit 1; }
export PATH="$PWD/$VENV/bin:$PATH"
# The demo's own state (ferm.json, the signer-CA cache), never the machine's
# /var/lib/typhapki: a demo run must not show up in a real node's facts or metrics.
export TYPHAPKI_STATE_DIR="$WORK/state"

port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dnsmasq --no-daemon --conf-file=/dev/null --port="$port" --listen-address=127.0.0.1 \
  --bind-interfaces --no-resolv --no-hosts --addn-hosts=hiera_sample/dns/hosts \
  --local=/wmnet/ --user=root --group=root --pid-file= 2>"$WORK/dnsmasq.log" &
dns_pid=$!
trap 'kill $dns_pid 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  python3 - "$port" <<'PY' && break || sleep 0.1
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(0.2)
s.sendto(bytes.fromhex("12340100000100000000000003777777076578616d706c6500000f0001"), ("127.0.0.1", int(sys.argv[1])))
s.recv(512)
PY
done

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
step "cluster CA ($WORK/ca)"
typhapki ca init --ca-dir "$WORK/ca" --force
step "issue this node's Typha and Felix sets from hiera cluster $CLUSTER"
typhapki issue --ca-dir "$WORK/ca" --out "$WORK/out" --hiera hiera_sample --cluster "$CLUSTER"
step "issue again: idempotent"
typhapki issue --ca-dir "$WORK/ca" --out "$WORK/out" --hiera hiera_sample --cluster "$CLUSTER"
step "check (Puppet's unless)"
typhapki check --out "$WORK/out" --ca-dir "$WORK/ca" --hiera hiera_sample --cluster "$CLUSTER"
typhapki inspect "$WORK/out/calico-typha-certs/typha.crt" "$WORK/out/calico-node-certs/calico-node.crt"
step "gated ferm rule, strict (every node resolved through dnsmasq on 127.0.0.1:$port)"
typhapki ferm --hiera hiera_sample --cluster "$CLUSTER" --mode strict --style plain \
  --nameserver "127.0.0.1:$port" --output "$WORK/10_calico-typha"
cat "$WORK/10_calico-typha"
step "real ferm parses it (ferm --noexec --lines)"
# Whole outputs into files, then their first lines: `cmd | head` fails the script under
# pipefail whenever head exits before cmd has written everything (SIGPIPE, exit 141).
ferm --noexec --lines "$WORK/10_calico-typha" 2>/dev/null |
  grep -E 'dport 5473|^\*|COMMIT' >"$WORK/ferm.shown"
sed -n 1,20p "$WORK/ferm.shown"
step "relaxed rule (mutual TLS on): subnets, no per-host list"
typhapki ferm --hiera hiera_sample --cluster "$CLUSTER" --mode relaxed --style plain \
  --nameserver "127.0.0.1:$port"
step "Kubernetes objects (hardway), keys elided here"
typhapki manifests --out "$WORK/out" --format hardway |
  grep -vE '^\s+(typha|calico-node)\.key:' >"$WORK/manifests.shown"
sed -n 1,30p "$WORK/manifests.shown"
step "Facter fact"
typhapki facts --out "$WORK/out" >"$WORK/facts.json"
sed -n 1,30p "$WORK/facts.json"
printf '\ndemo done: files under %s\n' "$WORK"
