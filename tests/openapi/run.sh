#!/usr/bin/env bash
# Conformance of the HTTP API to docs/openapi.yaml, by requests generated from the document
# (schemathesis, property-based): one node from target/debug/weir on ports this script
# owns, a fixed seed and a bounded number of examples per operation. Fails on a 5xx, a
# status code or a response body the document does not declare, a response of another
# content type, a request the document forbids that the server accepts, or an operation
# whose documented-valid requests the server mostly refuses ("schema validation mismatch").
#
# Usage: tests/openapi/run.sh [SCHEMATHESIS ARGS...] (after `cargo build -p weir` and the
# venv `.ci/run` makes: target/py-venv with schemathesis). Env: WEIR_BIN, ST (the
# schemathesis executable), OPENAPI_EXAMPLES (per operation, default 40), OPENAPI_SEED.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${WEIR_BIN:-$root/target/debug/weir}"
st="${ST:-$root/target/py-venv/bin/schemathesis}"
dir="$(mktemp -d /tmp/weir-openapi.XXXXXX)"
node=""
cleanup() {
    if [ -n "$node" ]; then kill "$node" 2>/dev/null || true; wait "$node" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT

# Three free loopback ports, held by this script's node from its start.
read -r client peer http < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
sed -e "s|^data_dir = .*|data_dir = \"$dir/data\"|" \
    -e "s|^client_addr = .*|client_addr = \"127.0.0.1:$client\"|" \
    -e "s|^peer_addr = .*|peer_addr = \"127.0.0.1:$peer\"|" \
    -e "s|^http_listen = .*|http_listen = \"127.0.0.1:$http\"|" \
    "$root/config/single.toml" > "$dir/node.toml"
"$bin" serve --config "$dir/node.toml" > "$dir/node.log" 2>&1 &
node=$!
for _ in $(seq 1 100); do
    if curl -sf "http://127.0.0.1:$http/readyz" > /dev/null; then break; fi
    sleep 0.1
done
curl -sf "http://127.0.0.1:$http/readyz" > /dev/null || { cat "$dir/node.log"; exit 1; }

# Test data: the limit every first generated request names (tenant "0", limit "0"), keyed
# and with room for any take, so requests that name it reach the server's decisions and
# not only its 404. (A request of several parts may name this limit twice, which the
# server refuses and a JSON schema cannot forbid; without the limit, those refusals and
# the 404s would be all a take ever answered.)
curl -sf -X PUT "http://127.0.0.1:$http/v1/tenants/0/limits/0" \
    -d '{"per_second": 1000000000, "burst": 1000000000, "keyed": true, "keys_max": 1000000}' > /dev/null

status=0
# The event streams are left to events.py: a generated request for a session's waits up to
# 10 s for a session that never appears, or streams until the session expires, and one for
# the cluster's (`/v1/events`) never ends (schemathesis waited out its request timeout on
# it, 75 s a request). events.py reads live streams of both and checks their events against
# the document.
"$(dirname "$st")/python" "$root/tests/openapi/events.py" "http://127.0.0.1:$http" || status=$?
"$st" run "$root/docs/openapi.yaml" \
    --url "http://127.0.0.1:$http" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,negative_data_rejection \
    --phases examples,coverage,fuzzing \
    --seed "${OPENAPI_SEED:-20261203}" \
    --max-examples "${OPENAPI_EXAMPLES:-25}" \
    --exclude-path /v1/sessions/{session}/events \
    --exclude-path /v1/events \
    --request-timeout 70 \
    --workers "${OPENAPI_WORKERS:-1}" \
    --suppress-health-check all \
    --no-color \
    "$@" | tee "$dir/schemathesis.log" || status=1
# Requests the document calls valid that the server refuses: a generated client's valid
# call would fail. Schemathesis reports them as a warning; here they fail the run.
if grep -q "Schema validation mismatch" "$dir/schemathesis.log"; then
    echo "docs/openapi.yaml admits requests the server refuses (schema validation mismatch above)"
    status=1
fi
if grep -q panicked "$dir/node.log"; then
    echo "the node panicked:"; grep -A5 panicked "$dir/node.log"; status=1
fi
exit "$status"
