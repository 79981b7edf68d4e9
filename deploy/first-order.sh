#!/usr/bin/env bash
# A first order, from the README: waits for the service to be ready, creates a product through
# the admin port, and buys one unit of it on the public port, printing both answers.
#
#   STOCKSVC_ADMIN_TOKEN=... deploy/first-order.sh
#
# Against the Compose stack with the admin port published (deploy/docker-compose.admin.yml):
# the public API on 127.0.0.1:${STOCKSVC_HTTP_PORT:-8080}, the admin one on
# 127.0.0.1:${STOCKSVC_ADMIN_PORT:-9090}. For a replica run from source, set the two ports to
# its listeners. The order names its customer in the body, as the README's examples run the
# service (STOCKSVC_CUSTOMER_AUTH=body).
set -euo pipefail
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

product=$(curl -sS --fail-with-body -H "Authorization: Bearer $STOCKSVC_ADMIN_TOKEN" \
  -H 'Content-Type: application/json' \
  -d '{"sku":"FIRST-'"$(date +%s)"'","name":"A first product","stock":3}' "$admin/v1/products")
echo "product created: $product"
id=$(sed -E 's/.*"id":([0-9]+).*/\1/' <<<"$product")
order=$(curl -sS --fail-with-body -H 'Content-Type: application/json' \
  -d '{"customer_id":"alice","items":[{"product_id":'"$id"',"quantity":1}]}' "$public/v1/orders")
echo "order placed:    $order"
