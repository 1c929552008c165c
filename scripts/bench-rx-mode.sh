#!/usr/bin/env bash
# rawq bench: the latency each receive mode adds (docs/performance.md "Receive modes: latency added"; the API: docs/backends.md "Event-driven receive"). fwd reflects
# a flow (macswap, AF_XDP on a veth pair between two throwaway namespaces) with --rx-mode poll,
# interrupt and adaptive; pktgen --txrx --latency on the other end sends at a low and a high
# rate and reports the round trip's p50 and p99 (kernel XDP-hook receive stamps, software send
# stamps: what pktgen --latency measures on a veth). The difference between the modes at one
# rate is what sleeping and waking adds. On a shared machine the figures swing with the load
# (printed in the header).
#
# Usage (as root): bash scripts/bench-rx-mode.sh [--seconds 3] [--rates 1kpps,50kpps]
# FWD=/path/to/fwd and PKTGEN=/path/to/pktgen use those binaries instead of building them.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=3 RATES=1kpps,50kpps
usage() {
  echo "usage: $0 [--seconds S] [--rates R1,R2,...]" >&2
  exit 2
}
while (($#)); do
  case "$1" in
    --seconds) SECS=${2:?}; shift 2 ;;
    --rates) RATES=${2:?}; shift 2 ;;
    *) usage ;;
  esac
done
[[ $SECS =~ ^[1-9][0-9]*$ ]] || usage
[[ $(id -u) == 0 ]] || { echo "bench: needs root (namespaces)" >&2; exit 1; }
if [[ -z ${FWD:-} || -z ${PKTGEN:-} ]]; then
  echo "bench: building fwd and pktgen (release)…" >&2
  cargo build --release --quiet --bin rawq-fwd --bin rawq-pktgen
fi
FWD=${FWD:-$PWD/target/release/rawq-fwd}
PKTGEN=${PKTGEN:-$PWD/target/release/rawq-pktgen}
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPU(s), $(uname -r); load average $(cut -d' ' -f1-3 /proc/loadavg)"

TAG=$$
NSA=rawq-brxm-$TAG-a NSB=rawq-brxm-$TAG-b
VA=rqbr${TAG}a VB=rqbr${TAG}b
VA=${VA:0:15} VB=${VB:0:15}
OUT=$(mktemp -d)
cleanup() {
  local p
  for p in $(jobs -p); do kill -INT "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip netns del "$NSA" 2>/dev/null || true
  ip netns del "$NSB" 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$NSA"
ip netns add "$NSB"
ip link add "$VA" netns "$NSA" type veth peer name "$VB" netns "$NSB"
ip -n "$NSA" addr add 10.203.252.1/24 dev "$VA"
ip -n "$NSB" addr add 10.203.252.2/24 dev "$VB"
ip -n "$NSA" link set "$VA" up
ip -n "$NSB" link set "$VB" up
MAC_B=$(ip -n "$NSB" -j link show "$VB" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["address"])')

printf '%-10s %-9s %12s %12s %12s  %s\n' mode rate p50 p99 max "sent/back"
for mode in poll interrupt adaptive; do
  for rate in ${RATES//,/ }; do
    ip netns exec "$NSB" "$FWD" -d "$VB" --mode macswap --rx-mode "$mode" --ring 4096 \
      -t $((SECS + 3)) --quiet --rule 'udp dst-port 9000 -> queue 0' >/dev/null 2>"$OUT/fwd.err" &
    F=$!
    for _ in $(seq 100); do
      ip -n "$NSB" link show "$VB" | grep -q xdp && break
      sleep 0.1
    done
    ip netns exec "$NSA" "$PKTGEN" -b xdp -d "$VA" --dst-mac "$MAC_B" --src-ip 10.203.252.1 \
      --dst-ip 10.203.252.2 -r "$rate" -t "$SECS" --txrx --latency --ring 4096 \
      --rule 'udp dst-port 9000 -> queue 0' --json --quiet >"$OUT/pg.json" 2>"$OUT/pg.err" ||
      { echo "bench: pktgen failed:" >&2; cat "$OUT/pg.err" >&2; exit 1; }
    kill -INT "$F" 2>/dev/null || true
    wait "$F" || true
    python3 - "$mode" "$rate" "$OUT/pg.json" <<'PY'
import json, sys
mode, rate, path = sys.argv[1:]
v = json.load(open(path))
l = v.get("latency") or {}
f = lambda k: "%.1f us" % (l[k] / 1e3) if l.get(k) is not None else "-"
print("%-10s %-9s %12s %12s %12s  %d/%d" % (mode, rate, f("p50_ns"), f("p99_ns"), f("max_ns"),
      v["packets"], v["rx_packets"]))
PY
  done
done
