package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// envOf turns a map into the getenv that run and loadConfig take.
func envOf(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// logSink collects run's JSON log lines while run is still writing them. Tests wait for a line
// with wait instead of sleeping.
type logSink struct {
	mu      sync.Mutex
	raw     []byte
	parsed  int // bytes of raw already split into lines
	records []map[string]any
	bad     []string // lines that were not JSON
	changed chan struct{}
}

func newLogSink() *logSink { return &logSink{changed: make(chan struct{})} }

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.raw = append(s.raw, p...)
	for {
		i := bytes.IndexByte(s.raw[s.parsed:], '\n')
		if i < 0 {
			break
		}
		line := s.raw[s.parsed : s.parsed+i]
		s.parsed += i + 1
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			s.bad = append(s.bad, string(line))
			continue
		}
		s.records = append(s.records, rec)
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return len(p), nil
}

// String returns everything written so far.
func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.raw)
}

// find returns the first record whose msg is msg.
func (s *logSink) find(msg string) (map[string]any, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.findLocked(msg)
}

func (s *logSink) findLocked(msg string) (map[string]any, bool) {
	for _, r := range s.records {
		if r["msg"] == msg {
			return r, true
		}
	}
	return nil, false
}

// count returns how many records have msg.
func (s *logSink) count(msg string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.records {
		if r["msg"] == msg {
			n++
		}
	}
	return n
}

// wait blocks until a record with msg has been written, ctx ends or abort is closed.
func (s *logSink) wait(ctx context.Context, abort <-chan struct{}, msg string) (map[string]any, error) {
	for {
		s.mu.Lock()
		r, ok := s.findLocked(msg)
		changed := s.changed // closed by the next write
		s.mu.Unlock()
		if ok {
			return r, nil
		}
		select {
		case <-changed:
		case <-abort:
			return nil, fmt.Errorf("no %q log line before run returned", msg)
		case <-ctx.Done():
			return nil, fmt.Errorf("no %q log line: %w", msg, ctx.Err())
		}
	}
}

// instance is run(), serving, in a goroutine of its own.
type instance struct {
	URL      string // http://host:port
	Addr     string
	AdminURL string // http://host:port of the admin listener, when there is one
	Logs     *logSink
	cancel   context.CancelFunc // what SIGTERM does in main
	stops    atomic.Int32       // calls of stopSignals
	done     chan struct{}      // closed when run returns
	err      error              // run's result, readable once done is closed
	client   *http.Client
}

// startTimeout bounds start-up and shutdown in the tests; nothing here should come close.
const startTimeout = 30 * time.Second

// serveEnv is the environment of a serving instance with its own database and Redis prefix.
// extra overrides it.
func serveEnv(t testing.TB, prefix string, extra map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{
		"STOCKSVC_ADDR":         "127.0.0.1:0",
		"DATABASE_URL":          testenv.DatabaseURL(t),
		"REDIS_URL":             testenv.RedisURL(t),
		"STOCKSVC_REDIS_PREFIX": prefix,
		"STOCKSVC_ADMIN_TOKEN":  "admin-secret-" + randomHex(t, 16),
		"STOCKSVC_LOG_FORMAT":   "json",
		"STOCKSVC_LOG_LEVEL":    "debug",
		// The API's customers are named by the body here; TestRunTokenMode serves with tokens.
		"STOCKSVC_CUSTOMER_AUTH": "body",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// startRun starts run with env and waits until it is ready to serve the API. The instance is
// stopped and joined when the test ends, if the test has not done so.
func startRun(t *testing.T, env map[string]string) *instance {
	t.Helper()
	in := launch(t, env)
	in.await(t, "ready")
	return in
}

// launch starts run with env without waiting for anything. The instance is stopped and joined
// when the test ends, if the test has not done so.
func launch(t *testing.T, env map[string]string) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{Logs: newLogSink(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(in.done)
		in.err = run(ctx, func() { in.stops.Add(1) }, nil, envOf(env), stdio{stdout: io.Discard, stderr: in.Logs})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-in.done:
		case <-time.After(startTimeout):
			t.Errorf("run did not return within %v of cancellation; logs:\n%s", startTimeout, in.Logs)
		}
	})
	tr := &http.Transport{}
	in.client = &http.Client{Transport: tr, Timeout: startTimeout}
	t.Cleanup(tr.CloseIdleConnections) // runs before the stop above: cleanups are last in, first out
	return in
}

// await waits for the log line msg, which must carry the address run listens on, and sets
// the instance's address from it.
func (in *instance) await(t *testing.T, msg string) {
	t.Helper()
	wctx, wcancel := context.WithTimeout(context.Background(), startTimeout)
	defer wcancel()
	rec, err := in.Logs.wait(wctx, in.done, msg)
	if err != nil {
		select {
		case <-in.done:
			t.Fatalf("run returned %v before logging %q; logs:\n%s", in.err, msg, in.Logs)
		default:
		}
		t.Fatalf("%v; logs:\n%s", err, in.Logs)
	}
	addr, _ := rec["addr"].(string)
	if addr == "" {
		t.Fatalf("%s line without addr: %v", msg, rec)
	}
	in.Addr, in.URL = addr, "http://"+addr
	if admin, _ := rec["admin_addr"].(string); admin != "" {
		in.AdminURL = "http://" + admin
	}
}

// stop cancels run's context, as SIGTERM does, and returns what run returns.
func (in *instance) stop(t *testing.T) error {
	t.Helper()
	in.cancel()
	return in.wait(t)
}

// wait returns what run returns, failing the test if it takes too long.
func (in *instance) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-in.done:
		return in.err
	case <-time.After(startTimeout):
		t.Fatalf("run did not return within %v; logs:\n%s", startTimeout, in.Logs)
		return nil
	}
}

// returned reports whether run has returned.
func (in *instance) returned() bool {
	select {
	case <-in.done:
		return true
	default:
		return false
	}
}

// response is an HTTP response, read whole.
type response struct {
	Status int
	Body   []byte
}

// doRequest sends a JSON request. It does not use t, so goroutines may call it.
func doRequest(ctx context.Context, client *http.Client, method, url string, body any, header http.Header) (response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return response{}, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	return response{Status: res.StatusCode, Body: b}, nil
}

// call sends a request to the instance and fails the test if it cannot.
func (in *instance) call(t *testing.T, method, path string, body any, header http.Header) response {
	t.Helper()
	res, err := doRequest(t.Context(), in.client, method, in.URL+path, body, header)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return res
}

// createProduct creates a product through the admin API and returns its id.
func (in *instance) createProduct(t *testing.T, token, sku string, stock int64) int64 {
	t.Helper()
	res := in.call(t, http.MethodPost, "/v1/products", map[string]any{"sku": sku, "name": "Product " + sku, "stock": stock},
		http.Header{"Authorization": {"Bearer " + token}})
	if res.Status != http.StatusCreated {
		t.Fatalf("create product: status %d, want %d: %s", res.Status, http.StatusCreated, res.Body)
	}
	var p struct {
		ID    int64 `json:"id"`
		Stock int64 `json:"stock"`
	}
	if err := json.Unmarshal(res.Body, &p); err != nil {
		t.Fatalf("create product: %v: %s", err, res.Body)
	}
	if p.ID == 0 || p.Stock != stock {
		t.Fatalf("create product: got %s, want an id and stock %d", res.Body, stock)
	}
	return p.ID
}

// eventually polls cond until it holds or timeout passes. cond says why it does not hold yet.
func eventually(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("condition not met within %v: %s", timeout, why)
		}
	}
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random: %v", err)
	}
	return hex.EncodeToString(b)
}

// scratchDatabase is a database on the test server that the test creates or drops itself, for
// the code paths that start from nothing: migrations on an empty database, and ensureDatabase.
type scratchDatabase struct {
	URL   string
	Name  string
	admin *pgx.Conn // to the server's "postgres" database
}

// newScratchDatabase names a database that does not exist yet on the test server. Whatever
// creates it, it is dropped when the test ends.
func newScratchDatabase(t testing.TB) *scratchDatabase {
	t.Helper()
	u, err := url.Parse(testenv.DatabaseURL(t)) // only to learn the server and its credentials
	if err != nil {
		t.Fatalf("parse test database URL: %v", err)
	}
	adminURL := *u
	adminURL.Path = "/postgres"
	conn, err := pgx.Connect(context.Background(), adminURL.String())
	if err != nil {
		t.Fatalf("connect to the postgres database: %v", err)
	}
	db := &scratchDatabase{Name: testenv.DatabaseName(t), admin: conn}
	target := *u
	target.Path = "/" + db.Name
	db.URL = target.String()
	t.Cleanup(func() {
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), `DROP DATABASE IF EXISTS `+pgx.Identifier{db.Name}.Sanitize()+` WITH (FORCE)`); err != nil {
			t.Errorf("drop database %s: %v", db.Name, err)
		}
	})
	return db
}

// create creates the database, empty.
func (db *scratchDatabase) create(t testing.TB) {
	t.Helper()
	if _, err := db.admin.Exec(context.Background(), `CREATE DATABASE `+pgx.Identifier{db.Name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", db.Name, err)
	}
}

// exists reports whether the database exists.
func (db *scratchDatabase) exists(t testing.TB) bool {
	t.Helper()
	var ok bool
	if err := db.admin.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, db.Name).Scan(&ok); err != nil {
		t.Fatalf("look up database %s: %v", db.Name, err)
	}
	return ok
}

func TestTuneGC(t *testing.T) {
	before := debug.SetGCPercent(-1)
	debug.SetGCPercent(before)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	if got := tuneGC(""); got != defaultGCPercent {
		t.Errorf("tuneGC without GOGC = %d, want %d", got, defaultGCPercent)
	}
	if now := debug.SetGCPercent(before); now != defaultGCPercent {
		t.Errorf("collector target after tuneGC without GOGC = %d, want %d", now, defaultGCPercent)
	}
	// With GOGC set, the runtime has read it at start: tuneGC reports it and changes nothing.
	if got := tuneGC("150"); got != before {
		t.Errorf("tuneGC with GOGC set = %d, want the runtime's %d", got, before)
	}
	if now := debug.SetGCPercent(before); now != before {
		t.Errorf("collector target after tuneGC with GOGC set = %d, want it untouched (%d)", now, before)
	}
}
