package stockhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/ratelimit"
	"github.com/stocksvc/stocksvc/internal/ratelimit/ratelimitredis"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// The rate limits (docs/api.md, "Rate limits"), on a Server over fakes; the admin failures
// across two replicas on the test Redis.

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Now()} }

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// countingVerifier counts the tokens checked: every Verify is a check the memory did not spare.
type countingVerifier struct {
	stockhttp.Verifier
	checks atomic.Int32
}

func (v *countingVerifier) Verify(ctx context.Context, token string) (string, error) {
	v.checks.Add(1)
	return v.Verifier.Verify(ctx, token)
}

// wantLimited checks a 429 rate-limited answer with a Retry-After.
func wantLimited(t testing.TB, res response, path string) {
	t.Helper()
	wantProblem(t, res, "rate-limited", path)
	wantRetryAfter(t, res)
}

// TestCustomerLimit: a verified customer past its budget is answered 429 rate-limited with
// Retry-After, before the order is placed; another customer is not; the budget comes back.
func TestCustomerLimit(t *testing.T) {
	t.Parallel()
	tk := newTokens(t)
	clock := newTestClock()
	in := newFakeInstance(t, fakeOptions{customers: tk.auth, limits: stockhttp.Limits{
		Customer: ratelimit.Limit{Events: 1, Per: time.Second, Burst: 2}, Now: clock.now}})
	id := createProduct(t, in.URL, "customer-limit", 100)
	alice, bob := tk.header(t, "alice"), tk.header(t, "bob")
	for i := range 2 {
		if res := postOrder(t, in.URL, items(id), alice); res.Status != http.StatusCreated {
			t.Fatalf("order %d of the burst: %d %s", i+1, res.Status, res.Body)
		}
	}
	res := postOrder(t, in.URL, items(id), alice)
	wantLimited(t, res, "/v1/orders")
	wantHeader(t, res, "Retry-After", "1")
	// Every customer route counts: the reads and the holds' decisions too.
	wantLimited(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders", Header: alice}), "/v1/orders")
	if res := postOrder(t, in.URL, items(id), bob); res.Status != http.StatusCreated {
		t.Fatalf("another customer: %d %s", res.Status, res.Body)
	}
	if got := audit(t, in.URL, id); got.Sold != 3 {
		t.Fatalf("%d units sold, want 3: a refused order sells nothing", got.Sold)
	}
	clock.advance(time.Second)
	if res := postOrder(t, in.URL, items(id), alice); res.Status != http.StatusCreated {
		t.Fatalf("a second later: %d %s, want the budget back", res.Status, res.Body)
	}
	if res := postOrder(t, in.URL, items(id), alice); res.Status != http.StatusTooManyRequests {
		t.Fatalf("again at once: %d, want 429", res.Status)
	}
	if got := testenv.Metric(t, in.Registry, "stocksvc_rate_limit_decisions_total", "limit", "customer", "decision", "limited"); got != 3 {
		t.Errorf("%v limited, want 3", got)
	}
}

// TestAddressLimitSparesKnownTokens: refused credentials spend their client address's budget;
// once it is spent, a token not known good from that address is answered 429 without being
// checked — but a buyer whose token was verified before, behind the same address, is not
// throttled, and another address is apart. The budget comes back.
func TestAddressLimitSparesKnownTokens(t *testing.T) {
	t.Parallel()
	tk := newTokens(t)
	v := &countingVerifier{Verifier: tk.auth.Verifier}
	clock := newTestClock()
	in := newFakeInstance(t, fakeOptions{
		customers: stockhttp.CustomerAuth{Mode: identity.ModeToken, Verifier: v},
		limits: stockhttp.Limits{Address: ratelimit.Limit{Events: 1, Per: time.Minute, Burst: 2}, Now: clock.now,
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	id := createProduct(t, in.URL, "address-limit", 100)
	from := func(addr string, h map[string]string) map[string]string {
		out := map[string]string{"X-Forwarded-For": addr}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	const nat, elsewhere = "127.0.2.10", "127.51.100.20"
	alice := from(nat, tk.header(t, "alice"))
	if res := postOrder(t, in.URL, items(id), alice); res.Status != http.StatusCreated {
		t.Fatalf("alice's first order: %d %s", res.Status, res.Body)
	}
	bad := from(nat, map[string]string{"Authorization": "Bearer not.a.token"})
	for range 2 {
		wantProblem(t, postOrder(t, in.URL, items(id), bad), "unauthenticated", "/v1/orders")
	}
	checked := v.checks.Load()
	wantLimited(t, postOrder(t, in.URL, items(id), bad), "/v1/orders")
	// A buyer new behind the same address waits too: its token is not known good.
	wantLimited(t, postOrder(t, in.URL, items(id), from(nat, tk.header(t, "carol"))), "/v1/orders")
	if got := v.checks.Load() - checked; got != 0 {
		t.Fatalf("%d credentials checked while the address was over its budget, want none", got)
	}
	// alice's token was verified before: the NAT's failures do not touch her.
	if res := postOrder(t, in.URL, items(id), alice); res.Status != http.StatusCreated {
		t.Fatalf("alice, known good, behind the same address: %d %s", res.Status, res.Body)
	}
	// Another address has a budget of its own.
	if res := postOrder(t, in.URL, items(id), from(elsewhere, tk.header(t, "dave"))); res.Status != http.StatusCreated {
		t.Fatalf("another address: %d %s", res.Status, res.Body)
	}
	clock.advance(time.Minute)
	if res := postOrder(t, in.URL, items(id), from(nat, tk.header(t, "carol"))); res.Status != http.StatusCreated {
		t.Fatalf("a new buyer after the budget came back: %d %s", res.Status, res.Body)
	}
	wantProblem(t, postOrder(t, in.URL, items(id), bad), "unauthenticated", "/v1/orders")
	wantLimited(t, postOrder(t, in.URL, items(id), bad), "/v1/orders")
}

// TestForwardedForFromUntrustedPeers: without trusted proxies, X-Forwarded-For is the
// client's own words and names no one: every request counts under its peer.
func TestForwardedForFromUntrustedPeers(t *testing.T) {
	t.Parallel()
	tk := newTokens(t)
	in := newFakeInstance(t, fakeOptions{customers: tk.auth, limits: stockhttp.Limits{
		Address: ratelimit.Limit{Events: 1, Per: time.Hour, Burst: 1}}})
	bad := func(addr string) map[string]string {
		return map[string]string{"Authorization": "Bearer not.a.token", "X-Forwarded-For": addr}
	}
	wantProblem(t, postOrder(t, in.URL, items(1), bad("127.0.2.1")), "unauthenticated", "/v1/orders")
	wantLimited(t, postOrder(t, in.URL, items(1), bad("127.0.2.2")), "/v1/orders")
}

func TestClientAddress(t *testing.T) {
	t.Parallel()
	trusted := stockhttp.Limits{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.16.0.0/12"), netip.MustParsePrefix("::1/128")}}
	for _, tc := range []struct {
		name   string
		limits stockhttp.Limits
		peer   string
		xff    []string
		want   string
	}{
		{"no proxies trusted", stockhttp.Limits{}, "127.0.2.1:5000", []string{"127.51.100.1"}, "127.0.2.1"},
		{"an untrusted peer's header", trusted, "127.0.2.1:5000", []string{"127.51.100.1"}, "127.0.2.1"},
		{"a trusted proxy's client", trusted, "127.16.0.2:5000", []string{"127.51.100.1"}, "127.51.100.1"},
		{"the last untrusted hop", trusted, "127.16.0.2:5000", []string{"127.203.0.9, 127.51.100.1, 127.16.0.3"}, "127.51.100.1"},
		{"headers joined in order", trusted, "127.16.0.2:5000", []string{"127.203.0.9", "127.51.100.1"}, "127.51.100.1"},
		{"a garbled hop stops at the proxy", trusted, "127.16.0.2:5000", []string{"127.51.100.1, nonsense"}, "127.16.0.2"},
		{"no header: the proxy", trusted, "127.16.0.2:5000", nil, "127.16.0.2"},
		{"every hop trusted: the first", trusted, "127.16.0.2:5000", []string{"127.17.1.1, 127.16.0.3"}, "127.17.1.1"},
		{"a hop with a port", trusted, "127.16.0.2:5000", []string{"127.51.100.1:4711"}, "127.51.100.1"},
		{"IPv6 by its /64", stockhttp.Limits{}, "[::1]:5000", nil, "::/64"},
		{"IPv4 in IPv6", stockhttp.Limits{}, "[::ffff:127.0.2.1]:5000", nil, "127.0.2.1"},
		{"an IPv6 client of a trusted proxy", trusted, "127.16.0.2:5000", []string{"::1"}, "::/64"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/v1/orders", nil)
		r.RemoteAddr = tc.peer
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := stockhttp.ClientAddress(tc.limits, r); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestAdminFailuresAcrossReplicas: two replicas on one Redis share each address's budget of
// wrong admin tokens. Once it is spent, on either, no admin token from the address is
// compared — the right one included — while another address still gets in; the budget
// comes back.
func TestAdminFailuresAcrossReplicas(t *testing.T) {
	t.Parallel()
	needsServers(t)
	rdb, prefix := testenv.Redis(t)
	limit := ratelimit.Limit{Events: 3, Per: 3 * time.Second, Burst: 3}
	replica := func() *fakeInstance {
		return newFakeInstance(t, fakeOptions{limits: stockhttp.Limits{
			AdminFailures: limit, Shared: ratelimitredis.New(rdb, prefix+"admin-failures:", limit),
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	}
	a, b := replica(), replica()
	product := func(in *fakeInstance, addr, token string) response {
		return call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products",
			Header: map[string]string{"Authorization": "Bearer " + token, "X-Forwarded-For": addr},
			Body:   map[string]any{"sku": "admin-" + time.Now().Format("150405.000000000"), "name": "x", "stock": 1}})
	}
	const attacker, operator = "127.0.2.66", "127.51.100.7"
	for i, in := range []*fakeInstance{a, b, a} {
		res := product(in, attacker, "guess")
		wantProblem(t, res, "unauthorized", "/v1/products")
		if i == 0 {
			wantHeader(t, res, "WWW-Authenticate", `Bearer realm="stocksvc admin"`)
		}
	}
	wantLimited(t, product(b, attacker, "guess"), "/v1/products")
	wantLimited(t, product(b, attacker, adminToken), "/v1/products")
	wantLimited(t, product(a, attacker, adminToken), "/v1/products")
	if res := product(b, operator, adminToken); res.Status != http.StatusCreated {
		t.Fatalf("the right token from another address: %d %s", res.Status, res.Body)
	}
	// No credential at all is no guess: answered 401 whatever the budget.
	wantProblem(t, call(t, request{Method: http.MethodPost, URL: a.URL + "/v1/products", Invalid: true,
		Header: map[string]string{"X-Forwarded-For": attacker}, Body: map[string]any{"sku": "s", "name": "x", "stock": 1}}), "unauthorized", "/v1/products")
	testenv.Poll(t, 10*time.Second, "the attacker's address gets a guess back", func() bool {
		return product(a, attacker, adminToken).Status == http.StatusCreated
	})
}

// TestAdminReadsCountOnlyRefusedTokens: where the admin token opens the order reads, a
// customer's token is compared with it first; that is no wrong guess unless the token is no
// customer's either.
func TestAdminReadsCountOnlyRefusedTokens(t *testing.T) {
	t.Parallel()
	tk := newTokens(t)
	in := newFakeInstance(t, fakeOptions{customers: tk.auth, limits: stockhttp.Limits{
		AdminFailures: ratelimit.Limit{Events: 1, Per: time.Hour, Burst: 1}}})
	list := func(h map[string]string) response {
		return call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders?customer_id=alice", Header: h})
	}
	for range 3 {
		if res := list(tk.header(t, "alice")); res.Status != http.StatusOK {
			t.Fatalf("a first read with a new token: %d %s", res.Status, res.Body)
		}
	}
	if res := list(adminHeader()); res.Status != http.StatusOK {
		t.Fatalf("the admin after three customers: %d %s", res.Status, res.Body)
	}
	wantProblem(t, list(map[string]string{"Authorization": "Bearer guess"}), "unauthenticated", "/v1/orders")
	wantLimited(t, list(adminHeader()), "/v1/orders")
	if res := list(tk.header(t, "alice")); res.Status != http.StatusTooManyRequests {
		t.Fatalf("a new customer from the locked-out address: %d, want 429 (its token is compared with the admin token first)", res.Status)
	}
}
