#!/usr/bin/env bash
# Parity run: one xds-democp feeds two relays — the binaries in OLD and NEW —
# and the same simulated fleets run against each while the same changes are
# made upstream. A change that was meant to change no behaviour must show the
# same cache, the same response, byte and held-removal counters and the same
# load-tool summaries. Prints both sides and a verdict; exits 1 on a difference.
#
#   scripts/parity.sh OLD_BIN_DIR NEW_BIN_DIR [CLIENTS] [CHANGES]
#
# Each directory holds xds-relay and xds-loadgen (make build's bin/); democp is
# taken from NEW. Ports 18100-18199 on 127.0.0.1.
set -uo pipefail
old=${1:?old bin dir}
new=${2:?new bin dir}
clients=${3:-500}
changes=${4:-20}
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null' EXIT
ulimit -n 20000 2>/dev/null || true

"$new/xds-democp" --listen 127.0.0.1:18100 --control 127.0.0.1:18101 --clusters 100 --log-level warn &
sleep 0.5
"$old/xds-relay" --listen 127.0.0.1:18110 --admin 127.0.0.1:18111 --upstream 127.0.0.1:18100 --log-level warn &
"$new/xds-relay" --listen 127.0.0.1:18120 --admin 127.0.0.1:18121 --upstream 127.0.0.1:18100 --log-level warn &
for a in 18111 18121; do
  for _ in $(seq 100); do curl -sf 127.0.0.1:$a/readyz >/dev/null && break; sleep 0.1; done
done

# Each fleet: Envoy-like (wildcard CDS/LDS, then EDS/RDS) and gRPC-like (by name), SotW and Delta.
fleets=("--mode envoy --protocol sotw" "--mode grpc --protocol sotw" "--mode envoy --protocol delta")
run_fleets() { # relay-port bin-dir side
  local i=0
  for f in "${fleets[@]}"; do
    # shellcheck disable=SC2086
    "$2/xds-loadgen" --target 127.0.0.1:$1 --clients "$clients" $f --node-prefix "f$i" \
      --duration 25s --json --log-level error >"$out/$3-$i.json" 2>/dev/null &
    i=$((i + 1))
  done
}
# Warm both caches first, one fleet shape after the other, so that no fleet
# client races the upstream's first answers.
for f in "${fleets[@]}"; do
  for side in 18110:old 18120:new; do
    port=${side%%:*} bin=$old; [ "${side##*:}" = new ] && bin=$new
    # shellcheck disable=SC2086
    "$bin/xds-loadgen" --target 127.0.0.1:$port --clients 1 $f --node-prefix warm --duration 1s --log-level error >/dev/null 2>&1
  done
done
run_fleets 18110 "$old" old
run_fleets 18120 "$new" new
sleep 8 # every client synced
for i in $(seq "$changes"); do
  t=cds; [ $((i % 2)) = 0 ] && t=eds
  curl -sf -X POST "127.0.0.1:18101/change?type=$t&count=1" >/dev/null
  sleep 0.5
done
wait $(jobs -p | tail -n 6) 2>/dev/null
sleep 1

for side in old:18111 new:18121; do
  name=${side%%:*} port=${side##*:}
  curl -sf 127.0.0.1:$port/debug/cache | python3 -c '
import json,sys
for e in sorted(json.load(sys.stdin), key=lambda e:(e.get("scope",""),e["type"],e["name"])):
    print(e.get("scope",""), e["type"].rsplit(".",1)[-1], e["name"], e["version"], e["bytes"], e["subscribers"])' >"$out/$name.cache"
  curl -sf 127.0.0.1:$port/metrics >"$out/$name.prom"
  grep -E '^xds_relay_(responses_total|response_bytes_total|removals_held_total|cache_resources|cache_bytes|nacks_total|acks_total)' \
    "$out/$name.prom" | sort >"$out/$name.metrics"
  for i in 0 1 2; do
    python3 -c '
import json,sys
s=json.load(open(sys.argv[1]))
keep=["mode","protocol","clients","synced","failed","connect_errors","stream_errors","responses","updates","nacks_sent","bytes_received","losses"]
print(sys.argv[2], " ".join(f"{k}={s.get(k)}" for k in keep))' "$out/$name-$i.json" "fleet$i"
  done >"$out/$name.summary"
done

rc=0
for f in cache metrics summary; do
  echo "== $f (old | new)"
  if diff "$out/old.$f" "$out/new.$f" >"$out/$f.diff"; then
    echo "identical ($(wc -l <"$out/new.$f") lines):"; sed 's/^/  /' "$out/new.$f" | head -8
  else
    rc=1; echo "DIFFERENT:"; cat "$out/$f.diff"
  fi
done
# How many responses the upstream sent depends on how the relay batched the
# fleets' subscription changes as they arrived, which timing decides: shown,
# not compared.
echo "== upstream responses (old | new; timing-dependent, not compared)"
paste <(grep '^xds_relay_upstream_responses_total' "$out/old.prom" | sort) \
  <(grep '^xds_relay_upstream_responses_total' "$out/new.prom" | sort | awk '{print $NF}') | sed 's/^/  /'
echo "== files in $out"
[ $rc = 0 ] && echo "parity: the two relays agree" || echo "parity: the two relays differ"
exit $rc
