package stockhttp_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
)

// Contract rows: GET /healthz, GET /readyz, GET /metrics, GET /problems/{code}, unknown routes,
// wrong methods, and X-Request-ID on every response.

func TestHealthz(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{ready: func(context.Context) error { return errors.New("not ready") }})
	var got map[string]string
	// Liveness does not depend on readiness.
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/healthz"}), http.StatusOK, &got)
	if got["status"] != "ok" {
		t.Errorf("body = %v, want status ok", got)
	}
}

// TestReadyz: a replica is ready when Postgres and Redis answer its check, and not when one is
// down. How the answer is given — and kept from naming what failed — is TestReadyzAnswers'.
func TestReadyz(t *testing.T) {
	t.Parallel()
	needsServers(t) // its cases start replicas of their own
	tests := []struct {
		name      string
		opts      func(t *testing.T) instanceOptions
		wantReady bool
	}{
		{name: "postgres and redis answer", opts: func(*testing.T) instanceOptions { return instanceOptions{} }, wantReady: true},
		{name: "redis down", opts: func(t *testing.T) instanceOptions {
			return instanceOptions{redisURL: "redis://" + deadEndpoint(t) + "/0"}
		}},
		{name: "postgres down", opts: func(t *testing.T) instanceOptions {
			return instanceOptions{databaseURL: "postgres://postgres@" + deadEndpoint(t) + "/postgres?sslmode=disable&connect_timeout=2"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wantReadyz(t, newInstance(t, tt.opts(t)).URL, tt.wantReady, "")
		})
	}
}

// TestReadyzAnswers: /readyz answers what the readiness check says, within a second, and 503
// from the moment the server drains; a 503 never names what failed.
func TestReadyzAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		ready      func(context.Context) error
		drain      bool
		wantReady  bool
		wantDetail string
	}{
		{name: "check passes", ready: func(context.Context) error { return nil }, wantReady: true},
		{name: "failing check", ready: func(context.Context) error { return errors.New("redis is down") }, wantDetail: "not answering"},
		{name: "check that never answers", ready: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}},
		{name: "draining", drain: true, wantDetail: "shutting down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := newFakeInstance(t, fakeOptions{ready: tt.ready})
			if tt.drain {
				in.API.StartDraining()
			}
			wantReadyz(t, in.URL, tt.wantReady, tt.wantDetail)
		})
	}
}

// wantReadyz checks the replica's /readyz: 200 ready, or a 503 problem whose detail contains
// wantDetail and exposes no cause.
func wantReadyz(t *testing.T, baseURL string, wantReady bool, wantDetail string) {
	t.Helper()
	res := call(t, request{Method: http.MethodGet, URL: baseURL + "/readyz"})
	if wantReady {
		var got map[string]string
		wantJSON(t, res, http.StatusOK, &got)
		if got["status"] != "ready" {
			t.Errorf("body = %v, want status ready", got)
		}
		return
	}
	p := wantProblem(t, res, "unavailable", "/readyz")
	if !strings.Contains(p.Detail, wantDetail) {
		t.Errorf("detail = %q, want it to contain %q", p.Detail, wantDetail)
	}
	// The cause stays in the log: this endpoint needs no credentials.
	for _, secret := range []string{"redis is down", "127.0.0.1", "user="} {
		if strings.Contains(p.Detail, secret) {
			t.Errorf("detail = %q exposes %q", p.Detail, secret)
		}
	}
}

// TestDrainingKeepsServing: draining only turns readiness off; liveness and the requests that
// still arrive are served.
func TestDrainingKeepsServing(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "drain", 3)
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/readyz"}), http.StatusOK, nil)

	in.API.StartDraining()
	wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/readyz"}), "unavailable", "/readyz")
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/healthz"}), http.StatusOK, nil)
	wantJSON(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 1}), nil), http.StatusCreated, nil)
	// Draining is for good.
	wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/readyz"}), "unavailable", "/readyz")
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "metered", 3)
	wantJSON(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 1}), nil), http.StatusCreated, nil)
	wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/nope"}), "not-found", "/nope")

	res := call(t, request{Method: http.MethodGet, URL: in.URL + "/metrics", Header: adminHeader()})
	if res.Status != http.StatusOK {
		t.Fatalf("status = %d, want 200: %s", res.Status, res.Body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type = %q, want Prometheus text (text/plain)", ct)
	}
	if res.Header.Get("X-Request-ID") == "" {
		t.Errorf("X-Request-ID header is missing")
	}
	lines := strings.Split(string(res.Body), "\n")
	tests := []struct {
		name   string
		metric string
		labels []string
		value  string // "" for any
	}{
		{name: "defense catches", metric: "stocksvc_defense_catches_total", labels: []string{`layer="fence"`}, value: "0"},
		{name: "created order", metric: "stocksvc_http_requests_total", labels: []string{`method="POST"`, `route="/v1/orders"`, `code="201"`}, value: "1"},
		{name: "created product", metric: "stocksvc_http_requests_total", labels: []string{`method="POST"`, `route="/v1/products"`, `code="201"`}, value: "1"},
		{name: "unmatched route", metric: "stocksvc_http_requests_total", labels: []string{`method="GET"`, `route="unmatched"`, `code="404"`}, value: "1"},
		{name: "latency", metric: "stocksvc_http_request_duration_seconds_count", labels: []string{`route="/v1/orders"`}, value: "1"},
		{name: "orders", metric: "stocksvc_orders_total", labels: []string{`outcome="confirmed"`}, value: "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			i := slices.IndexFunc(lines, func(l string) bool {
				if !strings.HasPrefix(l, tt.metric+"{") {
					return false
				}
				for _, lbl := range tt.labels {
					if !strings.Contains(l, lbl) {
						return false
					}
				}
				return true
			})
			if i < 0 {
				t.Fatalf("no %s sample with %v in:\n%s", tt.metric, tt.labels, res.Body)
			}
			if tt.value != "" && !strings.HasSuffix(lines[i], " "+tt.value) {
				t.Errorf("sample %q, want value %s", lines[i], tt.value)
			}
		})
	}
}

func TestProblemTypes(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	for code, status := range contractStatus {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			var got struct {
				Code        string `json:"code"`
				Status      int    `json:"status"`
				Title       string `json:"title"`
				Description string `json:"description"`
			}
			wantJSON(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/problems/" + code}), http.StatusOK, &got)
			if got.Code != code || got.Status != status || got.Title == "" || got.Description == "" {
				t.Errorf("/problems/%s = %+v, want code %s, status %d, a title and a description", code, got, code, status)
			}
		})
	}
	t.Run("unknown code", func(t *testing.T) {
		t.Parallel()
		wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/problems/no-such-code"}), "not-found", "/problems/no-such-code")
	})
}

// TestProblemTitlesMatchTheirDocs: the type member of a problem resolves to its documentation,
// which names the same title and status.
func TestProblemTitlesMatchTheirDocs(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: newOrder("", orderItem{1, 1}), Invalid: true})
	p := wantProblem(t, res, "invalid-request", "/v1/orders")
	var doc struct {
		Status int    `json:"status"`
		Title  string `json:"title"`
	}
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: in.URL + p.Type}), http.StatusOK, &doc)
	if doc.Status != p.Status || doc.Title != p.Title {
		t.Errorf("%s documents status %d, title %q; the problem has %d, %q", p.Type, doc.Status, doc.Title, p.Status, p.Title)
	}
}

func TestUnknownRoute(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	tests := []struct {
		method string
		path   string
	}{
		{http.MethodGet, "/"},
		{http.MethodGet, "/nope"},
		{http.MethodGet, "/v1"},
		{http.MethodGet, "/v1/nope"},
		{http.MethodPost, "/v1/nope"},
		{http.MethodGet, "/v2/products/1"},
		{http.MethodGet, "/v1/products/1/nope"},
		{http.MethodGet, "/v1/orders/" + uuid.NewString() + "/items"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			res := call(t, request{Method: tt.method, URL: in.URL + tt.path})
			wantProblem(t, res, "not-found", tt.path)
			if allow := res.Header.Values("Allow"); len(allow) != 0 {
				t.Errorf("Allow = %v on a 404, want none", allow)
			}
		})
	}
}

func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "methods", 1)
	product := "/v1/products/" + itoa(id)
	order := "/v1/orders/" + uuid.NewString()

	tests := []struct {
		method    string
		path      string
		wantAllow []string
	}{
		{http.MethodDelete, product, []string{http.MethodGet, http.MethodHead}},
		{http.MethodPut, product, []string{http.MethodGet, http.MethodHead}},
		{http.MethodPost, product, []string{http.MethodGet, http.MethodHead}},
		{http.MethodDelete, "/v1/products", []string{http.MethodGet, http.MethodHead, http.MethodPost}},
		{http.MethodGet, product + "/sale", []string{http.MethodPatch}},
		{http.MethodGet, product + "/sale/end", []string{http.MethodPost}},
		{http.MethodGet, product + "/restock", []string{http.MethodPost}},
		{http.MethodPost, product + "/audit", []string{http.MethodGet, http.MethodHead}},
		{http.MethodPut, "/v1/orders", []string{http.MethodGet, http.MethodHead, http.MethodPost}},
		{http.MethodDelete, "/v1/orders", []string{http.MethodGet, http.MethodHead, http.MethodPost}},
		{http.MethodDelete, order, []string{http.MethodGet, http.MethodHead}},
		{http.MethodPost, "/healthz", []string{http.MethodGet, http.MethodHead}},
		{http.MethodPost, "/readyz", []string{http.MethodGet, http.MethodHead}},
		{http.MethodPost, "/metrics", []string{http.MethodGet, http.MethodHead}},
		{http.MethodPost, "/problems/sold-out", []string{http.MethodGet, http.MethodHead}},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.method+" "+tt.path, func(t *testing.T) {
				t.Parallel()
				res := call(t, request{Method: tt.method, URL: in.URL + tt.path, Header: adminHeader()})
				wantProblem(t, res, "method-not-allowed", tt.path)
				// One field line, as most clients read only the first.
				values := res.Header.Values("Allow")
				if len(values) != 1 {
					t.Fatalf("Allow sent as %d field lines %q, want one", len(values), values)
				}
				var allow []string
				for _, m := range strings.Split(values[0], ",") {
					allow = append(allow, strings.TrimSpace(m))
				}
				slices.Sort(allow)
				if diff := cmp.Diff(allow, tt.wantAllow); diff != "" {
					t.Errorf("Allow mismatch (-got +want):\n%s", diff)
				}
			})
		}
	})
	wantUntouched(t, in.URL, id, 1)
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	tests := []struct {
		name     string
		incoming string // "" sends none
		wantEcho bool
	}{
		{name: "none"},
		{name: "sane", incoming: "req-42_abc.DEF:9", wantEcho: true},
		{name: "128 characters", incoming: repeat("r", 128), wantEcho: true},
		{name: "129 characters", incoming: repeat("r", 129)},
		{name: "inner space", incoming: "two words"},
		{name: "non-ASCII", incoming: "caf\u00e9"},
	}
	routes := []struct {
		name    string
		method  string
		path    string
		invalid bool // breaks api/openapi.yaml on purpose
	}{
		{name: "success", method: http.MethodGet, path: "/healthz"},
		{name: "problem", method: http.MethodGet, path: "/v1/products/0", invalid: true},
		{name: "router 404", method: http.MethodGet, path: "/nope"},
		{name: "router 405", method: http.MethodDelete, path: "/healthz"},
		{name: "metrics", method: http.MethodGet, path: "/metrics"},
	}
	for _, rt := range routes {
		for _, tt := range tests {
			t.Run(rt.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				var header map[string]string
				if tt.incoming != "" {
					header = map[string]string{"X-Request-ID": tt.incoming}
				}
				res := call(t, request{Method: rt.method, URL: in.URL + rt.path, Header: header, Invalid: rt.invalid})
				got := res.Header.Get("X-Request-ID")
				switch {
				case tt.wantEcho && got != tt.incoming:
					t.Errorf("X-Request-ID = %q, want the incoming %q echoed", got, tt.incoming)
				case !tt.wantEcho && (got == "" || got == tt.incoming):
					t.Errorf("X-Request-ID = %q, want a generated id", got)
				}
			})
		}
	}

	// Generated ids differ from request to request.
	first := call(t, request{Method: http.MethodGet, URL: in.URL + "/healthz"}).Header.Get("X-Request-ID")
	second := call(t, request{Method: http.MethodGet, URL: in.URL + "/healthz"}).Header.Get("X-Request-ID")
	if first == second {
		t.Errorf("two requests got the same generated id %q", first)
	}
}

func TestHeadOnGetRoutes(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "head", 1)
	for _, path := range []string{"/healthz", "/v1/products/" + itoa(id), "/v1/products/" + itoa(id) + "/audit"} {
		res := call(t, request{Method: http.MethodHead, URL: in.URL + path, Header: adminHeader()})
		if res.Status != http.StatusOK || len(res.Body) != 0 {
			t.Errorf("HEAD %s: status %d, %d body bytes; want 200 and no body", path, res.Status, len(res.Body))
		}
	}
}
