// k6 flash sale against stocksvc (k6 v1.8.1: `go install go.k6.io/k6@v1.8.1`).
//
// setup() creates a fresh hot product with STOCK units, a second product for carts and a race
// product with RACE_STOCK units, all with unique SKUs, through the admin API. Scenarios:
//
//   rush    ramping-arrival-rate up to RATE orders/s on the hot product and back down
//   carts   carts holding the hot product and the second one (all or nothing)
//   retries orders sent twice with the same Idempotency-Key: the second answer must repeat
//           the first
//   race    shared-iterations: RACE_STOCK×10 buyers of one unit each (retrying while busy);
//           exactly RACE_STOCK units must sell
//
// Status 201, 409 and 429 are expected answers, so http_req_failed counts real failures only.
// teardown() audits every product (an admin route: with ADMIN_TOKEN) and counts invariant
// violations; thresholds fail the run on any failed check, any violation, or 0.1% failed
// requests. handleSummary writes a JSON and a readable text summary.
//
// Customers: against a service in token mode (its default), every order carries
// `Authorization: Bearer <token>`, whose subject is its customer: VU n sends token n-1 (mod
// their number) of TOKENS_FILE (a JSON array of tokens, as the harness mints them: k6 cannot
// sign ES256 itself), or every VU the one CUSTOMER_TOKEN. With neither, the service is in body
// mode and VU n names customer vu-n in each order's body.
//
// Environment: BASE_URL, ADMIN_TOKEN, STOCK, RATE, DURATION, VUS, RACE_STOCK, SCENARIOS
// (comma-separated subset, default all), TOKENS_FILE, CUSTOMER_TOKEN, SUMMARY_JSON,
// SUMMARY_TXT, FAILED_RATE_MAX (the http_req_failed threshold, default 0.001), ORDER_LOG=1 (log
// every confirmed order as "ORDER <id> <role>=<quantity>,..." so that a harness can reconcile
// them with the database).

import http from 'k6/http';
import { check, sleep } from 'k6';
import exec from 'k6/execution';
import { SharedArray } from 'k6/data';
import { Counter, Trend } from 'k6/metrics';

const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/$/, '');
const ADMIN_TOKEN = __ENV.ADMIN_TOKEN || '';
const STOCK = intEnv('STOCK', 500);
const RATE = intEnv('RATE', 200);
const DURATION = __ENV.DURATION || '30s';
const VUS = intEnv('VUS', 100);
const RACE_STOCK = intEnv('RACE_STOCK', 20);
const SCENARIOS = (__ENV.SCENARIOS || 'rush,carts,retries,race').split(',').map((s) => s.trim()).filter(Boolean);
const MAX_QUANTITY = 3;
const FAILED_RATE_MAX = parseFloat(__ENV.FAILED_RATE_MAX || '0.001');
const CHECKS_RATE_MIN = parseFloat(__ENV.CHECKS_RATE_MIN || '1');
const ORDER_LOG = __ENV.ORDER_LOG === '1';
const tokens = __ENV.TOKENS_FILE ? new SharedArray('tokens', () => JSON.parse(open(__ENV.TOKENS_FILE))) : null;
if (tokens && tokens.length === 0) throw new Error(`TOKENS_FILE ${__ENV.TOKENS_FILE} holds no token`);
const CUSTOMER_TOKEN = __ENV.CUSTOMER_TOKEN || '';

function intEnv(name, def) {
  const v = __ENV[name];
  if (v === undefined || v === '') return def;
  const n = parseInt(v, 10);
  if (Number.isNaN(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got ${v}`);
  return n;
}

function seconds(d) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(d);
  if (!m) throw new Error(`DURATION must look like 30s, 2m or 500ms, got ${d}`);
  const f = { ms: 0.001, s: 1, m: 60, h: 3600 }[m[2]];
  return parseFloat(m[1]) * f;
}

const total = seconds(DURATION);
const ramp = `${Math.max(1, Math.round(total * 0.2))}s`;
const hold = `${Math.max(1, Math.round(total * 0.6))}s`;
const minor = (share) => Math.max(1, Math.round(RATE * share));

const allScenarios = {
  rush: {
    executor: 'ramping-arrival-rate',
    exec: 'rush',
    startRate: 0,
    timeUnit: '1s',
    preAllocatedVUs: VUS,
    maxVUs: VUS * 2,
    stages: [
      { target: RATE, duration: ramp },
      { target: RATE, duration: hold },
      { target: 0, duration: ramp },
    ],
  },
  carts: {
    executor: 'constant-arrival-rate',
    exec: 'cart',
    rate: minor(0.1),
    timeUnit: '1s',
    duration: DURATION,
    preAllocatedVUs: Math.max(2, Math.round(VUS / 10)),
    maxVUs: Math.max(4, Math.round(VUS / 5)),
  },
  retries: {
    executor: 'constant-arrival-rate',
    exec: 'retry',
    rate: minor(0.05),
    timeUnit: '1s',
    duration: DURATION,
    preAllocatedVUs: Math.max(2, Math.round(VUS / 10)),
    maxVUs: Math.max(4, Math.round(VUS / 5)),
  },
  race: {
    executor: 'shared-iterations',
    exec: 'race',
    vus: Math.max(1, Math.min(VUS, RACE_STOCK * 10, 50)),
    iterations: RACE_STOCK * 10,
    maxDuration: DURATION,
  },
};

const scenarios = {};
for (const name of SCENARIOS) {
  if (!allScenarios[name]) throw new Error(`unknown scenario ${name}; want a subset of ${Object.keys(allScenarios)}`);
  scenarios[name] = allScenarios[name];
}

export const options = {
  scenarios,
  thresholds: {
    checks: [CHECKS_RATE_MIN >= 1 ? 'rate==1' : `rate>=${CHECKS_RATE_MIN}`],
    http_req_failed: [`rate<${FAILED_RATE_MAX}`],
    invariant_violations: ['count==0'],
    // Listed so that they appear in the summary even when zero.
    confirmed_units_hot: ['count>=0'],
    confirmed_units_second: ['count>=0'],
    confirmed_units_race: ['count>=0'],
    confirmed_orders: ['count>=0'],
    sold_out: ['count>=0'],
    busy: ['count>=0'],
    dropped_iterations: ['count>=0'],
  },
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max', 'count'],
  setupTimeout: '60s',
  teardownTimeout: '60s',
};

const confirmedOrders = new Counter('confirmed_orders');
const confirmedUnits = {
  hot: new Counter('confirmed_units_hot'),
  second: new Counter('confirmed_units_second'),
  race: new Counter('confirmed_units_race'),
};
const soldOut = new Counter('sold_out');
const busy = new Counter('busy');
const violations = new Counter('invariant_violations');
const latency = {
  201: new Trend('order_latency_confirmed', true),
  409: new Trend('order_latency_sold_out', true),
  429: new Trend('order_latency_busy', true),
};

http.setResponseCallback(http.expectedStatuses(201, 409, 429));
const okOnly = { responseCallback: http.expectedStatuses(200) };
const json = { 'Content-Type': 'application/json' };

function createProduct(role, stock) {
  const sku = `k6-${role}-${Date.now()}-${crypto.randomUUID().slice(0, 8)}`;
  const res = http.post(`${BASE_URL}/v1/products`, JSON.stringify({ sku, name: `k6 ${role}`, stock }), {
    headers: { ...json, Authorization: `Bearer ${ADMIN_TOKEN}` },
    responseCallback: http.expectedStatuses(201),
  });
  if (res.status !== 201) {
    throw new Error(`create ${role} product: status ${res.status}: ${res.body}`);
  }
  return res.json('id');
}

export function setup() {
  const ready = http.get(`${BASE_URL}/readyz`, okOnly);
  if (ready.status !== 200) throw new Error(`${BASE_URL}/readyz answered ${ready.status}: ${ready.body}`);
  return {
    hot: createProduct('hot', STOCK),
    second: createProduct('second', STOCK),
    race: createProduct('race', RACE_STOCK),
    startedAt: Date.now(),
  };
}

// order posts one order and records what it means. items: [{product_id, quantity, role}].
function order(items, key) {
  const headers = { ...json };
  if (key) headers['Idempotency-Key'] = key;
  const payload = { items: items.map(({ product_id, quantity }) => ({ product_id, quantity })) };
  const token = tokens ? tokens[(exec.vu.idInTest - 1) % tokens.length] : CUSTOMER_TOKEN;
  if (token) headers.Authorization = `Bearer ${token}`;
  else payload.customer_id = `vu-${exec.vu.idInTest}`;
  const body = JSON.stringify(payload);
  const res = http.post(`${BASE_URL}/v1/orders`, body, { headers, tags: { name: 'POST /v1/orders' } });
  const t = latency[res.status];
  if (t) t.add(res.timings.duration, { scenario: exec.scenario.name });
  check(res, {
    'order answered 201, 409 or 429': (r) => r.status === 201 || r.status === 409 || r.status === 429,
    'error answers are problem+json': (r) => r.status === 201 || String(r.headers['Content-Type']).startsWith('application/problem+json'),
  });
  return res;
}

function tally(res, items) {
  if (res.status === 201 && res.headers['Idempotent-Replayed'] !== 'true') {
    confirmedOrders.add(1);
    for (const it of items) confirmedUnits[it.role].add(it.quantity);
    if (ORDER_LOG) console.log(`ORDER ${res.json('id')} ${items.map((it) => `${it.role}=${it.quantity}`).join(',')}`);
  } else if (res.status === 409 && res.json('code') === 'sold-out') {
    soldOut.add(1);
  } else if (res.status === 429) {
    busy.add(1);
  }
}

const quantity = () => 1 + Math.floor(Math.random() * MAX_QUANTITY);

export function rush(data) {
  const items = [{ product_id: data.hot, quantity: quantity(), role: 'hot' }];
  tally(order(items), items);
}

export function cart(data) {
  const items = [
    { product_id: data.second, quantity: 1, role: 'second' },
    { product_id: data.hot, quantity: 1, role: 'hot' },
  ];
  tally(order(items), items);
}

// retry sends an order, then the very same request again, as a client does after a timeout.
// A 201 must come back identical and say it is a replay. A sold-out must come back identical:
// replayed when the purchase path stored it, or decided again, the same way, when it was
// answered from the product's view, which stores nothing (nothing restocks during the sale).
// A 429 is not stored.
export function retry(data) {
  const items = [{ product_id: data.hot, quantity: quantity(), role: 'hot' }];
  const key = crypto.randomUUID();
  const first = order(items, key);
  tally(first, items);
  const second = order(items, key);
  tally(second, items);
  if (first.status === 201) {
    const same = check(second, {
      'a retried key repeats the stored answer': (r) => r.status === first.status && r.body === first.body,
      'a replay says so': (r) => r.headers['Idempotent-Replayed'] === 'true',
    });
    if (!same) violations.add(1, { invariant: 'idempotent-replay' });
  } else if (first.status === 409 && first.json('code') === 'sold-out') {
    const same = check(second, {
      'a retried sold-out key is refused the same way': (r) => r.status === first.status && r.body === first.body,
    });
    if (!same) violations.add(1, { invariant: 'idempotent-replay' });
  }
}

// race buys one unit of the race product, retrying while the service is busy, so that every
// buyer ends with a definite answer: bought, or sold out.
export function race(data) {
  const items = [{ product_id: data.race, quantity: 1, role: 'race' }];
  for (let attempt = 0; attempt < 100; attempt++) {
    const res = order(items);
    tally(res, items);
    if (res.status !== 429) return;
    sleep(0.01 + Math.random() * 0.04);
  }
}

// audit recounts a product's stock. The route is an admin one (issue #18): it sends the admin
// token, which a service that still serves it publicly ignores.
function audit(id) {
  const res = http.get(`${BASE_URL}/v1/products/${id}/audit`, { ...okOnly, headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } });
  if (res.status !== 200) {
    violations.add(1, { invariant: 'audit-readable' });
    return null;
  }
  return res.json();
}

export function teardown(data) {
  for (const role of ['hot', 'second', 'race']) {
    const a = audit(data[role]);
    if (!a) continue;
    const ok = check(a, {
      [`${role}: audit consistent (received - sold == stock)`]: (x) => x.consistent === true && x.received - x.sold === x.stock,
      [`${role}: stock never negative`]: (x) => x.stock >= 0,
    });
    if (!ok) violations.add(1, { invariant: `audit-${role}` });
  }
  if (SCENARIOS.includes('race')) {
    const a = audit(data.race);
    if (a && !check(a, { 'race: exactly RACE_STOCK units sold': (x) => x.sold === RACE_STOCK && x.stock === 0 })) {
      violations.add(1, { invariant: 'exact-race' });
    }
  }
}

export function handleSummary(data) {
  const text = readable(data);
  return {
    stdout: text,
    [__ENV.SUMMARY_JSON || 'summary.json']: JSON.stringify(data, null, 2),
    [__ENV.SUMMARY_TXT || 'summary.txt']: text,
  };
}

function readable(data) {
  const m = data.metrics;
  const count = (name) => (m[name] ? m[name].values.count || 0 : 0);
  const rate = (name) => (m[name] ? m[name].values.rate : 0);
  const ms = (name, stat) => (m[name] && m[name].values[stat] !== undefined ? `${m[name].values[stat].toFixed(1)}ms` : '-');
  const secs = data.state.testRunDurationMs / 1000;
  const lines = [];
  lines.push('', `stocksvc flash sale — ${BASE_URL}, ${secs.toFixed(1)}s, scenarios ${SCENARIOS.join(', ')}`);
  lines.push(`  stock: hot ${STOCK}, race ${RACE_STOCK}; peak rate ${RATE}/s`);
  lines.push(`  confirmed orders   ${count('confirmed_orders')} (${(count('confirmed_orders') / secs).toFixed(1)}/s)`);
  lines.push(`  units sold         hot ${count('confirmed_units_hot')}, second ${count('confirmed_units_second')}, race ${count('confirmed_units_race')}`);
  lines.push(`  sold-out answers   ${count('sold_out')}    busy (429) ${count('busy')}`);
  lines.push(`  requests           ${count('http_reqs')}, failed ${(100 * rate('http_req_failed')).toFixed(3)}%, dropped iterations ${count('dropped_iterations')}`);
  lines.push('  latency            p50 / p95 / p99');
  for (const [label, name] of [['confirmed', 'order_latency_confirmed'], ['sold out', 'order_latency_sold_out'], ['busy', 'order_latency_busy']]) {
    lines.push(`    ${label.padEnd(16)} ${ms(name, 'med')} / ${ms(name, 'p(95)')} / ${ms(name, 'p(99)')}  (${count(name)} answers)`);
  }
  lines.push(`  checks passed      ${(100 * rate('checks')).toFixed(2)}%`);
  lines.push(`  invariant violations ${count('invariant_violations')}`);
  const failed = Object.entries(m).filter(([, v]) => v.thresholds && Object.values(v.thresholds).some((t) => !t.ok)).map(([k]) => k);
  lines.push(`  thresholds         ${failed.length === 0 ? 'all passed' : 'FAILED: ' + failed.join(', ')}`, '');
  return lines.join('\n');
}
