// k6 "the opening" against stocksvc (k6 v1.8.1): a product whose sale opens at a given
// moment, with a limit per customer, and a crowd that arrives before the opening and keeps
// buying through it. Issue #20.
//
// setup() takes the product the harness created (PRODUCT_ID, OPENS_AT_MS: the opening, from
// Postgres's clock) or, run alone, creates one through the admin API whose sale opens LEAD_S
// seconds from now by this machine's clock. Every phase is pinned to the opening, whenever k6
// happened to start:
//
//   refusals  [opening − 6 s, − 4 s): CLOSED_VUS closed-loop buyers, all refused sale-not-open
//   healthz   [opening − 3.8 s, − 1.8 s): as many closed-loop GET /healthz, through the same
//             balancer: what the fast refusal is compared with
//   crowd     [opening − 1.5 s, + CROWD_S): CROWD_VUS buyers of one unit, each serving its own
//             customers in turn (customer i belongs to VU i mod CROWD_VUS alone): a customer
//             orders until confirmed LIMIT times, refused customer-limit, or sold out; every
//             GREEDY-th customer sends BURST orders at once, to go past the limit
//
// With LINE=N (issue #33) the product is sold through a line admitting N buyers at once: each
// customer of the crowd joins it before the opening, waits with the long-poll (Prefer: wait,
// If-None-Match) and orders once, with its pass, when admitted; the refusals before the
// opening are then 409 not-admitted, and greedy bursts send the one pass several times.
//
// Requests carry `Authorization: Bearer <token>` from TOKENS_FILE (a JSON array: token i is
// customer c-i's, minted by the harness) when given, and customer_id in the body always.
//
// Invariants checked by k6 itself (thresholds fail the run): no 201 answered before the
// opening by this machine's clock (early_confirmations), no customer confirmed more than LIMIT
// units (over_limit: exact, since one VU serves each customer), no more units confirmed than
// STOCK (confirmed_units), every refusal before the opening a sale-not-open with Retry-After ≥
// 1, and teardown's audit of the product. The harness also checks them in Postgres.
//
// Environment: BASE_URL, ADMIN_TOKEN, PRODUCT_ID, OPENS_AT_MS, LEAD_S (12), STOCK (500),
// LIMIT (2), CUSTOMERS (3000), CROWD_VUS (150), CLOSED_VUS (64), CROWD_S (10), GREEDY (5),
// BURST (LIMIT + 2), LINE (0: no line), TOKENS_FILE, SUMMARY_JSON, SUMMARY_TXT.

import http from 'k6/http';
import { check, sleep } from 'k6';
import exec from 'k6/execution';
import { SharedArray } from 'k6/data';
import { Counter, Trend } from 'k6/metrics';

const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/$/, '');
const ADMIN_TOKEN = __ENV.ADMIN_TOKEN || '';
const STOCK = intEnv('STOCK', 500);
const LIMIT = intEnv('LIMIT', 2);
const CUSTOMERS = intEnv('CUSTOMERS', 3000);
const CROWD_VUS = intEnv('CROWD_VUS', 150);
const CLOSED_VUS = intEnv('CLOSED_VUS', 64);
const CROWD_S = intEnv('CROWD_S', 10);
const GREEDY = intEnv('GREEDY', 5);
const BURST = intEnv('BURST', LIMIT + 2);
const LEAD_S = intEnv('LEAD_S', 12);
const LINE = intEnv('LINE', 0);

// Phases, in ms from the opening.
const REFUSALS = [-6000, -4000];
const HEALTHZ = [-3800, -1800];
const CROWD = [-1500, CROWD_S * 1000];

const tokens = __ENV.TOKENS_FILE ? new SharedArray('tokens', () => JSON.parse(open(__ENV.TOKENS_FILE))) : null;
if (tokens && tokens.length < CUSTOMERS) throw new Error(`TOKENS_FILE holds ${tokens.length} tokens for ${CUSTOMERS} customers`);

function intEnv(name, def) {
  const v = __ENV[name];
  if (v === undefined || v === '') return def;
  const n = parseInt(v, 10);
  if (Number.isNaN(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got ${v}`);
  return n;
}

const maxDuration = `${LEAD_S + CROWD_S + 30}s`;
export const options = {
  scenarios: {
    refusals: { executor: 'per-vu-iterations', exec: 'refusals', vus: CLOSED_VUS, iterations: 1, maxDuration },
    healthz: { executor: 'per-vu-iterations', exec: 'healthz', vus: CLOSED_VUS, iterations: 1, maxDuration },
    crowd: { executor: 'per-vu-iterations', exec: 'crowd', vus: CROWD_VUS, iterations: 1, maxDuration },
  },
  thresholds: {
    checks: ['rate==1'],
    http_req_failed: ['rate<0.001'],
    early_confirmations: ['count==0'],
    over_limit: ['count==0'],
    confirmed_units: [`count<=${STOCK}`],
    invariant_violations: ['count==0'],
    late_phase_start: ['count==0'],
    // Listed so that they appear in the summary even when zero.
    refusal_answers: ['count>=0'],
    healthz_answers: ['count>=0'],
    not_open: ['count>=0'],
    limit_refusals: ['count>=0'],
    sold_out: ['count>=0'],
    busy: ['count>=0'],
    late_not_open: ['count>=0'],
    line_joins: ['count>=0'],
    line_admissions: ['count>=0'],
  },
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max', 'count'],
  setupTimeout: '60s',
  teardownTimeout: '60s',
};

const refusalAnswers = new Counter('refusal_answers');
const healthzAnswers = new Counter('healthz_answers');
const notOpen = new Counter('not_open');
const lateNotOpen = new Counter('late_not_open');
const limitRefusals = new Counter('limit_refusals');
const soldOut = new Counter('sold_out');
const busy = new Counter('busy');
const confirmedUnits = new Counter('confirmed_units');
const earlyConfirmations = new Counter('early_confirmations');
const overLimit = new Counter('over_limit');
const violations = new Counter('invariant_violations');
const latePhaseStart = new Counter('late_phase_start');
const lineJoins = new Counter('line_joins');
const lineAdmissions = new Counter('line_admissions');
const firstConfirmed = new Trend('first_confirmed_after_opening', true);
const latency = {
  refusal: new Trend('latency_refusal', true),
  healthz: new Trend('latency_healthz', true),
  confirmed: new Trend('latency_confirmed', true),
};

http.setResponseCallback(http.expectedStatuses(201, 409, 429));
const json = { 'Content-Type': 'application/json' };

export function setup() {
  const ready = http.get(`${BASE_URL}/readyz`, { responseCallback: http.expectedStatuses(200) });
  if (ready.status !== 200) throw new Error(`${BASE_URL}/readyz answered ${ready.status}: ${ready.body}`);
  if (__ENV.PRODUCT_ID && __ENV.OPENS_AT_MS) {
    return { product: parseInt(__ENV.PRODUCT_ID, 10), opensAt: parseInt(__ENV.OPENS_AT_MS, 10) };
  }
  const opensAt = Date.now() + LEAD_S * 1000;
  const sku = `k6-opening-${Date.now()}-${crypto.randomUUID().slice(0, 8)}`;
  const res = http.post(`${BASE_URL}/v1/products`,
    JSON.stringify({ sku, name: 'k6 opening', stock: STOCK, sale_starts_at: new Date(opensAt).toISOString(), max_per_customer: LIMIT,
      line: LINE > 0 ? { admit: LINE, admission_for: 60 } : null }),
    { headers: { ...json, Authorization: `Bearer ${ADMIN_TOKEN}` }, responseCallback: http.expectedStatuses(201) });
  if (res.status !== 201) throw new Error(`create the product: status ${res.status}: ${res.body}`);
  return { product: res.json('id'), opensAt: Date.parse(res.json('sale_starts_at')) };
}

// waitFor sleeps until the phase starts (ms from the opening); a phase k6 reached late is
// counted, since its rate would then be measured over less than its length.
function waitFor(data, phase) {
  const start = data.opensAt + phase[0];
  const ahead = start - Date.now();
  if (ahead > 0) sleep(ahead / 1000);
  else if (ahead < -100) latePhaseStart.add(1, { scenario: exec.scenario.name });
  return data.opensAt + phase[1];
}

function orderRequest(data, customer, pass) {
  const headers = { ...json };
  if (pass) headers['Line-Pass'] = pass;
  else if (tokens) headers.Authorization = `Bearer ${tokens[customer]}`;
  return {
    method: 'POST',
    url: `${BASE_URL}/v1/orders`,
    body: JSON.stringify({ customer_id: `c-${customer}`, items: [{ product_id: data.product, quantity: 1 }] }),
    params: { headers, tags: { name: 'POST /v1/orders' } },
  };
}

const code = (r) => (r.status === 409 ? r.json('code') : '');

// refusals: closed-loop orders before the opening, every one refused at once.
export function refusals(data) {
  const end = waitFor(data, REFUSALS);
  let customer = exec.vu.idInTest % CUSTOMERS;
  while (Date.now() < end) {
    const q = orderRequest(data, customer);
    const res = http.post(q.url, q.body, q.params);
    refusalAnswers.add(1);
    latency.refusal.add(res.timings.duration);
    tally(data, res, null);
    if (LINE > 0) {
      check(res, { 'before the opening, without a pass: 409 not-admitted': (r) => r.status === 409 && code(r) === 'not-admitted' });
    } else {
      check(res, {
        'before the opening: 409 sale-not-open': (r) => r.status === 409 && code(r) === 'sale-not-open',
        'sale-not-open says when: Retry-After ≥ 1 and sale_starts_at': (r) =>
          parseInt(r.headers['Retry-After'], 10) >= 1 && Date.parse(r.json('sale_starts_at')) === data.opensAt,
      });
    }
    customer = (customer + CLOSED_VUS) % CUSTOMERS;
  }
}

// healthz: closed-loop GET /healthz through the same balancer, just after the refusals.
export function healthz(data) {
  const end = waitFor(data, HEALTHZ);
  while (Date.now() < end) {
    const res = http.get(`${BASE_URL}/healthz`, { responseCallback: http.expectedStatuses(200), tags: { name: 'GET /healthz' } });
    healthzAnswers.add(1);
    latency.healthz.add(res.timings.duration);
  }
}

// tally counts an order's answer; state is the customer's, in the crowd.
function tally(data, res, state) {
  const c = code(res);
  const sentAt = Date.now() - res.timings.duration;
  if (res.status === 201) {
    confirmedUnits.add(1);
    latency.confirmed.add(res.timings.duration);
    const after = Date.now() - data.opensAt;
    if (after < 0) earlyConfirmations.add(1);
    else firstConfirmed.add(after);
    if (state) {
      state.bought++;
      if (state.bought > LIMIT) overLimit.add(1);
    }
  } else if (c === 'sale-not-open') {
    notOpen.add(1);
    // Sent well after the opening and still refused: a replica's clock or view lagged.
    if (sentAt > data.opensAt + 100) lateNotOpen.add(1);
  } else if (c === 'customer-limit') {
    limitRefusals.add(1);
    if (state) {
      state.limited = true;
      // The refusal must say the customer had reached the limit.
      if (!check(res, { 'customer-limit says bought + requested > max_per_customer': (r) => r.json('bought') + r.json('requested') > r.json('max_per_customer') })) {
        violations.add(1, { invariant: 'customer-limit-answer' });
      }
    }
  } else if (c === 'sold-out') {
    soldOut.add(1);
    if (state) state.soldOut = true;
  } else if (res.status === 429) {
    busy.add(1);
  }
  check(res, {
    'order answered 201, 409 sale-not-open/customer-limit/sold-out (with a line: not-admitted/admission-used), or 429': (r) =>
      r.status === 201 || r.status === 429 || ['sale-not-open', 'customer-limit', 'sold-out'].includes(c) ||
      LINE > 0 && ['not-admitted', 'admission-used'].includes(c),
  });
}

// inLine has customer join the line and wait with the long-poll until admitted (its pass),
// sold out or the end (null either way).
function inLine(data, customer, end) {
  const line = `${BASE_URL}/v1/products/${data.product}/line`;
  const headers = tokens ? { Authorization: `Bearer ${tokens[customer]}` } : { ...json };
  const body = tokens ? null : JSON.stringify({ customer_id: `c-${customer}` });
  const joined = http.post(line, body, { headers, tags: { name: 'POST /v1/products/{id}/line' }, responseCallback: http.expectedStatuses(200, 201, 409, 429) });
  if (joined.status !== 200 && joined.status !== 201) return null;
  lineJoins.add(1);
  const ticket = joined.json('ticket');
  let etag = joined.headers['Etag'];
  let status = joined.json('status');
  let pass = joined.json('pass');
  while (Date.now() < end && status !== 'admitted' && status !== 'sold_out' && status !== 'sale_ended') {
    const res = http.get(`${line}/ticket`, {
      headers: { 'Line-Ticket': ticket, 'If-None-Match': etag, Prefer: 'wait=10' },
      tags: { name: 'GET /v1/products/{id}/line/ticket' }, responseCallback: http.expectedStatuses(200, 304, 429), timeout: '20s',
    });
    if (res.status === 429) sleep(parseInt(res.headers['Retry-After'] || '1', 10));
    if (res.status !== 200) continue;
    etag = res.headers['Etag'];
    status = res.json('status');
    pass = res.json('pass');
  }
  if (status !== 'admitted') return null;
  lineAdmissions.add(1);
  return pass;
}

// crowd: each VU serves its customers in turn, from before the opening until the end.
export function crowd(data) {
  const end = waitFor(data, CROWD);
  const vu = exec.vu.idInTest;
  // Only this VU ever orders for customer, so that its count of their 201s is exact.
  let customer = vu % CROWD_VUS;
  while (Date.now() < end && customer < CUSTOMERS) {
    const state = { bought: 0, limited: false, soldOut: false };
    const greedy = GREEDY > 0 && customer % GREEDY === 0;
    let pass = null;
    if (LINE > 0) {
      pass = inLine(data, customer, end);
      if (!pass) {
        customer += CROWD_VUS;
        continue;
      }
    }
    while (Date.now() < end && state.bought < LIMIT && !state.limited && !state.soldOut) {
      if (greedy) {
        const q = orderRequest(data, customer, pass);
        for (const res of http.batch(Array(BURST).fill([q.method, q.url, q.body, q.params]))) tally(data, res, state);
      } else {
        const q = orderRequest(data, customer, pass);
        tally(data, http.post(q.url, q.body, q.params), state);
      }
      // With a line, one admission is one order: the customer is done.
      if (pass) break;
      // A buyer refused before the opening tries again at once: the crowd does not wait.
    }
    if (state.soldOut) {
      // Sold out: the crowd keeps asking (answered from the view) until the end, a little
      // slower, as people refresh.
      sleep(0.05);
    }
    customer += CROWD_VUS;
  }
}

// teardown audits the product: received − sold = stock, never negative, never more sold than
// the stock.
export function teardown(data) {
  const res = http.get(`${BASE_URL}/v1/products/${data.product}/audit`, {
    headers: { Authorization: `Bearer ${ADMIN_TOKEN}` },
    responseCallback: http.expectedStatuses(200),
  });
  if (res.status !== 200) {
    violations.add(1, { invariant: 'audit-readable' });
    return;
  }
  const a = res.json();
  const ok = check(a, {
    'audit consistent (received - sold == stock)': (x) => x.consistent === true && x.received - x.sold === x.stock,
    'stock never negative, nothing sold beyond it': (x) => x.stock >= 0 && x.sold <= STOCK,
  });
  if (!ok) violations.add(1, { invariant: 'audit' });
}

export function handleSummary(data) {
  const text = readable(data);
  return {
    stdout: text,
    [__ENV.SUMMARY_JSON || 'opening-summary.json']: JSON.stringify(data, null, 2),
    [__ENV.SUMMARY_TXT || 'opening-summary.txt']: text,
  };
}

function readable(data) {
  const m = data.metrics;
  const count = (name) => (m[name] ? m[name].values.count || 0 : 0);
  const ms = (name, stat) => (m[name] && m[name].values[stat] !== undefined ? `${m[name].values[stat].toFixed(1)}ms` : '-');
  const phase = (p) => (p[1] - p[0]) / 1000;
  const refusalRate = count('refusal_answers') / phase(REFUSALS);
  const healthzRate = count('healthz_answers') / phase(HEALTHZ);
  const lines = [];
  lines.push('', `stocksvc, the opening — ${BASE_URL}: stock ${STOCK}, limit ${LIMIT} a customer, ${CUSTOMERS} customers, ${CROWD_VUS} in the crowd at once`);
  lines.push(`  refusals before the opening  ${count('refusal_answers')} in ${phase(REFUSALS)}s (${refusalRate.toFixed(0)}/s), p50 ${ms('latency_refusal', 'med')}, p99 ${ms('latency_refusal', 'p(99)')}`);
  lines.push(`  GET /healthz                 ${count('healthz_answers')} in ${phase(HEALTHZ)}s (${healthzRate.toFixed(0)}/s), p50 ${ms('latency_healthz', 'med')}, p99 ${ms('latency_healthz', 'p(99)')}`);
  lines.push(`  refusal rate / healthz rate  ${healthzRate > 0 ? (refusalRate / healthzRate).toFixed(2) : '-'}`);
  lines.push(`  first 201 after the opening  ${ms('first_confirmed_after_opening', 'min')} (this machine's clock)`);
  lines.push(`  units confirmed              ${count('confirmed_units')} of ${STOCK}`);
  lines.push(`  answers                      sale-not-open ${count('not_open')} (${count('late_not_open')} sent after the opening), customer-limit ${count('limit_refusals')}, sold-out ${count('sold_out')}, busy ${count('busy')}`);
  lines.push(`  invariants                   early 201s ${count('early_confirmations')}, customers over the limit ${count('over_limit')}, violations ${count('invariant_violations')}`);
  const failed = Object.entries(m).filter(([, v]) => v.thresholds && Object.values(v.thresholds).some((t) => !t.ok)).map(([k]) => k);
  lines.push(`  thresholds                   ${failed.length === 0 ? 'all passed' : 'FAILED: ' + failed.join(', ')}`, '');
  return lines.join('\n');
}
