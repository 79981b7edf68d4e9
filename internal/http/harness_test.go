package stockhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/async/asyncpg"
	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/line/linepg"
	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/demo"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
	"github.com/stocksvc/stocksvc/internal/view"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const adminToken = "test-admin-token"

// cluster is what replicas share: one database and one Redis key prefix.
type cluster struct {
	databaseURL string
	redisURL    string
	prefix      string
}

// needsServers marks an integration test: under go test -short, which runs only the tests that
// need no server (their Server is over fakes: fakes_test.go), it skips.
func needsServers(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs Postgres and Redis (-short runs the server-free tests only)")
	}
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	needsServers(t)
	c := &cluster{databaseURL: testenv.DatabaseURL(t), redisURL: testenv.RedisURL(t), prefix: testenv.KeyPrefix(t)}
	t.Cleanup(func() {
		opts, err := redis.ParseURL(c.redisURL)
		if err != nil {
			t.Errorf("parse redis url: %v", err)
			return
		}
		rdb := redis.NewClient(opts)
		defer rdb.Close()
		testenv.DeleteKeys(t, rdb, c.prefix)
	})
	return c
}

// instanceOptions tune one replica. Zero values take the service defaults, with the admin
// routes on.
type instanceOptions struct {
	adminToken  string // "-" turns admin off
	defense     *stock.Defense
	lockTTL     time.Duration
	lockWait    time.Duration
	maxQuantity int64
	noCache     bool // no view cache: reads and refusals go to Postgres
	ready       func(context.Context) error
	// databaseURL and redisURL, when set, replace the cluster's servers for this replica only:
	// point one at deadEndpoint to give the replica a dependency that does not answer.
	databaseURL string
	redisURL    string
	// async starts the replica's queue workers, which decide orders sent with Prefer:
	// respond-async; without it such orders are accepted and stay pending (instance.startQueue
	// starts the workers later).
	async bool
	// redlock, when set, puts the product locks on a Redlock over these nodes, as
	// STOCKSVC_REDIS_MODE=redlock does; the views stay on the cluster's Redis.
	redlock []*testenv.RedisServer
	// customers, when its mode is set, says who the customers are; else body mode, the
	// customer_id each request sends.
	customers stockhttp.CustomerAuth
	// lineStore, when set, replaces the replica's line store (linepg over its pool).
	lineStore line.Store
}

// instance is one replica: its own pools, service and HTTP server, as a separate process would
// have.
type instance struct {
	URL      string
	API      *stockhttp.Server
	Lines    *line.Service
	Registry *prometheus.Registry
	Pool     *pgxpool.Pool
	Redis    *redis.Client
	Queue    *async.Queue
	started  bool
}

// startQueue starts the replica's queue workers; they stop when the test ends.
func (in *instance) startQueue(t testing.TB) {
	t.Helper()
	if err := in.Queue.Start(context.Background()); err != nil {
		t.Fatalf("start queue: %v", err)
	}
	in.started = true
}

func (c *cluster) start(t testing.TB, o instanceOptions) *instance {
	t.Helper()
	ctx := context.Background()
	databaseURL, redisURL := c.databaseURL, c.redisURL
	if o.databaseURL != "" {
		databaseURL = o.databaseURL
	}
	if o.redisURL != "" {
		redisURL = o.redisURL
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		t.Fatalf("connect postgres: %v", err)
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatalf("parse redis url: %v", err)
	}
	rdb := redis.NewClient(opts)

	defense := stock.DefaultDefense()
	if o.defense != nil {
		defense = *o.defense
	}
	token := adminToken
	switch o.adminToken {
	case "":
	case "-":
		token = ""
	default:
		token = o.adminToken
	}
	reg := prometheus.NewRegistry()
	locks := lock.New(rdb, lock.WithNamespace(c.prefix))
	store := stockpg.New(pool)
	if defense != stock.DefaultDefense() {
		store = stockpg.NewDemo(pool, defense)
	}
	var views stock.Views
	if !o.noCache {
		views = view.New(rdb, locks, store, view.Config{}, view.NewMetrics(reg))
	}
	var locker stock.Locker = stocklock.NewRedis(locks, stocklock.Config{TTL: o.lockTTL, Wait: o.lockWait})
	if o.redlock != nil {
		locker = stocklock.NewRedlock(testenv.Redlock(t, o.redlock), c.prefix, stocklock.Config{TTL: o.lockTTL, Wait: o.lockWait})
	}
	locker, views = demo.Parts(defense, locker, views)
	svc := stock.NewService(
		store,
		locker,
		stock.Config{MaxQuantity: o.maxQuantity, QueueWait: o.lockWait, Views: views},
		stock.NewMetrics(reg),
	)
	ready := o.ready
	if ready == nil {
		ready = func(ctx context.Context) error {
			if err := pool.Ping(ctx); err != nil {
				return err
			}
			return rdb.Ping(ctx).Err()
		}
	}
	orders, err := asyncpg.New(pool)
	if err != nil {
		t.Fatalf("new async store: %v", err)
	}
	queue := async.New(orders, store, svc, async.Config{Registerer: reg, Sweep: 200 * time.Millisecond})
	svc.UseHoldScheduler(queue)
	customers := stockhttp.CustomerAuth{Mode: identity.ModeBody}
	if o.customers.Mode != "" {
		customers = o.customers
	}
	// The line's keys are read from Postgres at start: a replica given a Postgres that does not
	// answer has no line (cmd/stocksvc waits for Postgres before it starts one).
	var lines *line.Service
	var lineRoutes stockhttp.Lines
	if o.databaseURL == "" {
		lineStore := o.lineStore
		if lineStore == nil {
			lineStore = linepg.New(pool)
		}
		lines, err = line.New(ctx, lineStore, store, svc,
			line.Config{MaxQuantity: o.maxQuantity, Poll: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
			line.NewMetrics(reg))
		if err != nil {
			t.Fatalf("new line service: %v", err)
		}
		lines.Start()
		lineRoutes = lines
	}
	api := stockhttp.New(stockhttp.Config{
		Service:    svc,
		Queue:      queue,
		Lines:      lineRoutes,
		AdminToken: token,
		Customers:  customers,
		Ready:      ready,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: reg,
		Gatherer:   reg,
	})
	srv := httptest.NewServer(api)
	in := &instance{URL: srv.URL, API: api, Lines: lines, Registry: reg, Pool: pool, Redis: rdb, Queue: queue}
	t.Cleanup(func() {
		srv.Close()
		if lines != nil {
			lines.Stop()
		}
		if in.started {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := queue.Stop(ctx); err != nil {
				t.Errorf("stop queue: %v", err)
			}
		}
		svc.Close()
		_ = locks.Close()
		_ = rdb.Close()
		pool.Close()
	})
	if o.async {
		in.startQueue(t)
	}
	return in
}

// newInstance starts a single replica on a cluster of its own.
func newInstance(t testing.TB, o instanceOptions) *instance {
	t.Helper()
	return newCluster(t).start(t, o)
}

// response is a finished HTTP exchange.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map for field checks.
func (r response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response body is not a JSON object: %v\n%s", err, r.Body)
	}
	return m
}

// Decode decodes the body into v.
func (r response) Decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode response: %v\n%s", err, r.Body)
	}
}

// request describes one call. Body is sent raw when it is a string or []byte, and as JSON
// otherwise; JSON bodies get Content-Type: application/json unless Header sets one.
type request struct {
	Method string
	URL    string
	Body   any
	Header map[string]string
	// Invalid marks a request that breaks api/openapi.yaml on purpose (bad JSON, a wrong
	// content type, a missing token, a rule broken): it is sent as is, and only its response
	// is held to the document.
	Invalid bool
}

// send performs req and reads the whole response, and holds both to api/openapi.yaml (see
// contract.check). It may run in any goroutine: failures are returned, not reported; a
// response that breaks the document is returned with the error.
func send(ctx context.Context, client *http.Client, req request) (response, error) {
	c, err := loadContract()
	if err != nil {
		return response{}, err
	}
	var body io.Reader
	var sent []byte
	contentType := ""
	switch b := req.Body.(type) {
	case nil:
	case string:
		sent = []byte(b)
	case []byte:
		sent = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return response{}, err
		}
		sent = raw
		contentType = "application/json"
	}
	if req.Body != nil {
		body = bytes.NewReader(sent)
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, req.URL, body)
	if err != nil {
		return response{}, err
	}
	if contentType != "" {
		hr.Header.Set("Content-Type", contentType)
	}
	for k, v := range req.Header {
		hr.Header.Set(k, v)
	}
	res, err := client.Do(hr)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	got := response{Status: res.StatusCode, Header: res.Header, Body: raw}
	return got, c.check(ctx, req, sent, hr.Header, got)
}

// call is send for the test goroutine: any transport failure fails the test.
func call(t testing.TB, req request) response {
	t.Helper()
	res, err := send(context.Background(), http.DefaultClient, req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return res
}

func adminHeader() map[string]string {
	return map[string]string{"Authorization": "Bearer " + adminToken}
}

// createProduct creates a product through the admin API and returns its id.
func createProduct(t testing.TB, baseURL, sku string, stockUnits int64) int64 {
	t.Helper()
	res := call(t, request{Method: http.MethodPost, URL: baseURL + "/v1/products", Header: adminHeader(),
		Body: map[string]any{"sku": sku, "name": "Product " + sku, "stock": stockUnits}})
	if res.Status != http.StatusCreated {
		t.Fatalf("create product %s: status %d: %s", sku, res.Status, res.Body)
	}
	var p struct {
		ID int64 `json:"id"`
	}
	res.Decode(t, &p)
	return p.ID
}

// audit reads a product's audit.
type auditBody struct {
	ProductID  int64 `json:"product_id"`
	Stock      int64 `json:"stock"`
	Received   int64 `json:"received"`
	Sold       int64 `json:"sold"`
	Held       int64 `json:"held"`
	Consistent bool  `json:"consistent"`
}

func audit(t testing.TB, baseURL string, id int64) auditBody {
	t.Helper()
	res := call(t, request{Method: http.MethodGet, URL: baseURL + "/v1/products/" + itoa(id) + "/audit", Header: adminHeader()})
	if res.Status != http.StatusOK {
		t.Fatalf("audit %d: status %d: %s", id, res.Status, res.Body)
	}
	var a auditBody
	res.Decode(t, &a)
	return a
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
