#!/usr/bin/env bash
# A first order, from the README: waits for the service to be ready, creates a product through
# the admin port, and buys one unit of it on the public port as customer alice, with her
# customer token (token mode, the service's default), printing both answers.
#
#   STOCKSVC_ADMIN_TOKEN=... deploy/first-order.sh
#
# Against the Compose stack with the admin port published (deploy/docker-compose.admin.yml):
# the public API on 127.0.0.1:${STOCKSVC_HTTP_PORT:-8080}, the admin one on
# 127.0.0.1:${STOCKSVC_ADMIN_PORT:-9090}. alice's token is minted with the stack's development
# key by the image's own binary, `run --rm -T devkeys token -sub alice` (Compose v2, or
# docker-compose v1 where there is no v2; COMPOSE_PROJECT_NAME names the stack when it is not
# deploy/'s default). For a replica run from source, set the two ports to its listeners and
# CUSTOMER_TOKEN to a token it accepts (stocksvc token -sub alice). The order names alice in
# its body too, which token mode checks against the token, and body mode
# (STOCKSVC_CUSTOMER_AUTH=body) takes as the customer.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
public="http://127.0.0.1:${STOCKSVC_HTTP_PORT:-8080}"
admin="http://127.0.0.1:${STOCKSVC_ADMIN_PORT:-9090}"
: "${STOCKSVC_ADMIN_TOKEN:?set STOCKSVC_ADMIN_TOKEN to the token the service runs with}"

for i in $(seq 1 90); do
  curl -fsS "$public/readyz" >/dev/null 2>&1 && break
  if [ "$i" = 90 ]; then
    echo "first-order: $public/readyz did not answer 200 within 90 s" >&2
    exit 1
  fi
  sleep 1
done

if [ -z "${CUSTOMER_TOKEN:-}" ]; then
  compose=(docker-compose)
  docker compose version >/dev/null 2>&1 && compose=(docker compose)
  # The Compose file insists on both its secrets, even for a command that reads neither.
  CUSTOMER_TOKEN=$(POSTGRES_PASSWORD=${POSTGRES_PASSWORD:-not-read-here} \
    "${compose[@]}" -f "$here/docker-compose.yml" run --rm -T devkeys token -sub alice) || {
    echo "first-order: could not mint alice's token with the Compose stack's devkeys service;" \
      "for a replica run from source, set CUSTOMER_TOKEN (stocksvc token -sub alice)" >&2
    exit 1
  }
fi

product=$(curl -sS --fail-with-body -H "Authorization: Bearer $STOCKSVC_ADMIN_TOKEN" \
  -H 'Content-Type: application/json' \
  -d '{"sku":"FIRST-'"$(date +%s)"'","name":"A first product","stock":3}' "$admin/v1/products")
echo "product created: $product"
id=$(sed -E 's/.*"id":([0-9]+).*/\1/' <<<"$product")
order=$(curl -sS --fail-with-body -H "Authorization: Bearer $CUSTOMER_TOKEN" -H 'Content-Type: application/json' \
  -d '{"customer_id":"alice","items":[{"product_id":'"$id"',"quantity":1}]}' "$public/v1/orders")
echo "order placed:    $order"
