// Command prededuct is the reference the -throughput benchmark measures the service against
// (issue #24): the flash-sale design most people build instead of stocksvc. Each order is one
// Lua script in Redis — check every item's stock, take it, append the order to a stream — and a
// 201 at once. It speaks the service's order API (POST /v1/orders, the same request body, the
// same 201 body and Location, a 409 sold-out problem when an item is short) and GET /healthz
// (and /readyz, which the balancer checks); nothing else.
//
// What it does NOT keep, and why it is fast:
//
//   - No Postgres. A confirmed order exists only as a Redis stream entry, for a consumer
//     nobody wrote to persist later. A Redis restart without persistence (or with the default
//     once-a-second fsync, the last second), a failover to a replica that had not received the
//     script's effects, or a stream entry lost or trimmed before it is persisted loses orders
//     that the buyer was told were confirmed, and the stock they took.
//   - No idempotency record. A retry of the same Idempotency-Key (the header is read and
//     ignored) buys again: a buyer whose answer was lost and who retries pays twice.
//   - No sale rules, no customer identity, no holds, no audit, no read of the product, no
//     metrics, no rate limit or queue bound: an order is one script and an answer.
//
// It is a yardstick, not a design to deploy. Configuration is by environment:
// PREDEDUCT_ADDR (listen address), REDIS_URL, PREDEDUCT_REDIS_PREFIX (its keys: <prefix>stock:<id>
// holds a product's units, set by whoever runs it; <prefix>orders is the stream). GOGC is 400
// unless set, as stocksvc serve sets it, so that the two designs differ in their work and not in
// their collector's tuning.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// maxItems and maxBody are the service's limits on an order (api/openapi.yaml).
const (
	maxItems = 20
	maxBody  = 1 << 20
)

// takeScript takes every item of an order or none, and appends the order to the stream, in one
// step: Redis runs a script alone, so no two orders interleave between the check and the
// decrement. KEYS: the items' stock keys, then the stream. ARGV: order id, customer, created_at,
// then each item's product id and quantity, in the order of KEYS. It returns {0} when the order
// was taken, {1, i, available} when item i (1-based) is short, and {2, i} when its product has no
// stock key.
var takeScript = redis.NewScript(`
local n = #KEYS - 1
for i = 1, n do
  local left = redis.call('GET', KEYS[i])
  if not left then return {2, i} end
  left = tonumber(left)
  if left < tonumber(ARGV[3 + 2 * i]) then return {1, i, left} end
end
local fields = {'id', ARGV[1], 'customer_id', ARGV[2], 'created_at', ARGV[3]}
for i = 1, n do
  redis.call('DECRBY', KEYS[i], ARGV[3 + 2 * i])
  table.insert(fields, 'item')
  table.insert(fields, ARGV[2 + 2 * i] .. 'x' .. ARGV[3 + 2 * i])
end
redis.call('XADD', KEYS[n + 1], '*', unpack(fields))
return {0}
`)

type item struct {
	ProductID int64 `json:"product_id"`
	Quantity  int64 `json:"quantity"`
}

type orderRequest struct {
	CustomerID string `json:"customer_id"`
	Items      []item `json:"items"`
}

type orderResponse struct {
	ID         string    `json:"id"`
	CustomerID string    `json:"customer_id"`
	Status     string    `json:"status"`
	Items      []item    `json:"items"`
	CreatedAt  time.Time `json:"created_at"`
}

type problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Code      string `json:"code"`
	Instance  string `json:"instance,omitempty"`
	Field     string `json:"field,omitempty"`
	ProductID int64  `json:"product_id,omitempty"`
	Requested int64  `json:"requested,omitempty"`
	Available *int64 `json:"available,omitempty"`
}

type server struct {
	rdb    *redis.Client
	prefix string
}

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	addr := envOr("PREDEDUCT_ADDR", "127.0.0.1:8090")
	opts, err := redis.ParseURL(envOr("REDIS_URL", "redis://127.0.0.1:6379/0"))
	if err != nil {
		log.Fatalf("prededuct: REDIS_URL: %v", err)
	}
	s := &server{rdb: redis.NewClient(opts), prefix: envOr("PREDEDUCT_REDIS_PREFIX", "prededuct:")}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		log.Fatalf("prededuct: redis: %v", err)
	}
	if err := takeScript.Load(ctx, s.rdb).Err(); err != nil {
		log.Fatalf("prededuct: load the script: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", s.placeOrder)
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{\"status\":\"ok\"}\n"))
	}
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", ok)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("prededuct: %v", err)
	}
}

func (s *server) placeOrder(w http.ResponseWriter, r *http.Request) {
	var req orderRequest
	body, err := readBody(w, r)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(&req)
	}
	if err != nil {
		writeProblem(w, r, &problem{Status: 400, Code: "malformed-json", Title: "Malformed JSON", Detail: "the body is not an order: " + err.Error()})
		return
	}
	if field, reason := invalid(req); field != "" {
		writeProblem(w, r, &problem{Status: 422, Code: "invalid-request", Title: "Invalid request", Detail: field + " " + reason, Field: field})
		return
	}
	slices.SortFunc(req.Items, func(a, b item) int { return cmp.Compare(a.ProductID, b.ProductID) })
	id, err := uuid.NewV7()
	if err != nil {
		writeProblem(w, r, &problem{Status: 500, Code: "internal", Title: "Internal error", Detail: "no order id: " + err.Error()})
		return
	}
	created := time.Now().UTC()
	keys := make([]string, 0, len(req.Items)+1)
	args := make([]any, 0, 2*len(req.Items)+3)
	args = append(args, id.String(), req.CustomerID, created.Format(time.RFC3339Nano))
	for _, it := range req.Items {
		keys = append(keys, s.prefix+"stock:"+strconv.FormatInt(it.ProductID, 10))
		args = append(args, it.ProductID, it.Quantity)
	}
	keys = append(keys, s.prefix+"orders")
	res, err := takeScript.Run(r.Context(), s.rdb, keys, args...).Int64Slice()
	if err != nil || len(res) == 0 {
		writeProblem(w, r, &problem{Status: 503, Code: "unavailable", Title: "Unavailable", Detail: fmt.Sprintf("redis: %v", err)})
		return
	}
	switch res[0] {
	case 0:
		w.Header().Set("Location", "/v1/orders/"+id.String())
		writeJSON(w, http.StatusCreated, "application/json", orderResponse{ID: id.String(), CustomerID: req.CustomerID, Status: "confirmed", Items: req.Items, CreatedAt: created})
	case 1:
		it := req.Items[res[1]-1]
		available := res[2]
		writeProblem(w, r, &problem{Status: 409, Code: "sold-out", Title: "Sold out",
			Detail:    fmt.Sprintf("product %d has %d left; %d requested", it.ProductID, available, it.Quantity),
			ProductID: it.ProductID, Requested: it.Quantity, Available: &available})
	default:
		it := req.Items[res[1]-1]
		writeProblem(w, r, &problem{Status: 404, Code: "product-not-found", Title: "Product not found",
			Detail: fmt.Sprintf("product %d does not exist", it.ProductID), ProductID: it.ProductID})
	}
}

// readBody reads at most maxBody bytes of a JSON body.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Header.Get("Content-Type") != "application/json" {
		return nil, errors.New("Content-Type must be application/json")
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// invalid applies the order's schema rules: the same ones the service applies before any work.
func invalid(req orderRequest) (field, reason string) {
	switch {
	case req.CustomerID == "" || len(req.CustomerID) > 64:
		return "customer_id", "must be 1 to 64 characters"
	case len(req.Items) == 0 || len(req.Items) > maxItems:
		return "items", fmt.Sprintf("must hold 1 to %d items", maxItems)
	}
	seen := make(map[int64]bool, len(req.Items))
	for _, it := range req.Items {
		switch {
		case it.ProductID < 1:
			return "items.product_id", "must be at least 1"
		case it.Quantity < 1:
			return "items.quantity", "must be at least 1"
		case seen[it.ProductID]:
			return "items", "must name each product at most once"
		}
		seen[it.ProductID] = true
	}
	return "", ""
}

func writeProblem(w http.ResponseWriter, r *http.Request, p *problem) {
	p.Type, p.Instance = "/problems/"+p.Code, r.URL.Path
	writeJSON(w, p.Status, "application/problem+json", p)
}

func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body, contentType = 500, []byte(`{"status":500,"code":"internal","title":"Internal error"}`), "application/problem+json"
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
