#!/usr/bin/env bash
# The real-cluster tests end to end (make e2e-knative): builds what the cluster runs (cached
# outside the repository), starts the cluster in its own network namespace, deploys Sluice and
# runs test/e2e inside the namespace, then tears the cluster down. Needs root.
#   SLUICE_E2E_RUN      go test -run pattern (default: every test)
#   SLUICE_E2E_COUNT    runs of the suite on the one cluster (default 1)
#   SLUICE_E2E_KEEP=1   leave the cluster up afterwards (down.sh stops it)
#   SLUICE_E2E_ARTIFACTS  where the tests' charts go (default ~/.cache/sluice/e2e/last-run)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
state=${SLUICE_E2E_STATE:-/var/lib/sluice-e2e}
export SLUICE_E2E_STATE=$state
t0=$SECONDS
bash "$here/cluster/build.sh" >/dev/null
echo "e2e: built in $((SECONDS - t0))s" >&2
bash "$here/cluster/down.sh"
if [ "${SLUICE_E2E_KEEP:-}" != 1 ]; then
  trap 'bash "$here/cluster/down.sh"' EXIT
fi
t1=$SECONDS
bash "$here/cluster/up.sh"
echo "e2e: cluster up in $((SECONDS - t1))s" >&2
# Built here, where the Go module proxy is reachable; run in the namespace, which has no way out.
# The cold-start scenario runs the local actuator beside, with the integration suite's
# nats-server and versitygw (.bin/, as make test leaves them).
mkdir -p "$state/bin" "$root/.bin"
cache=${SLUICE_E2E_CACHE:-$HOME/.cache/sluice/e2e}
[ -x "$root/.bin/nats-server-v2.15.2" ] || cp "$cache/bin/nats-server-v2.15.2" "$root/.bin/"
(cd "$root" && go build -o "$state/bin/sluice" ./cmd/sluice && go test -c -o "$state/bin/e2e.test" ./test/e2e)
cd "$here"
ip netns exec sluice-e2e env SLUICE_BIN="$state/bin/sluice" \
  SLUICE_E2E_ARTIFACTS="${SLUICE_E2E_ARTIFACTS:-$HOME/.cache/sluice/e2e/last-run}" "$state/bin/e2e.test" \
  -test.v -test.timeout 60m -test.count "${SLUICE_E2E_COUNT:-1}" ${SLUICE_E2E_RUN:+-test.run "$SLUICE_E2E_RUN"}
echo "e2e: done in $((SECONDS - t0))s" >&2
