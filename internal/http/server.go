package stockhttp

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stocksvc/stocksvc/api"
	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// Service is what the handlers ask of the stock domain: *stock.Service, or a fake in tests.
// Each method returns the errors its stock.Service namesake documents; problemFor turns them
// into problems.
type Service interface {
	CreateProduct(ctx context.Context, p stock.NewProduct) (stock.Product, error)
	Product(ctx context.Context, id int64) (stock.ProductView, error)
	Restock(ctx context.Context, req stock.RestockRequest) (stock.RestockResult, error)
	UpdateSale(ctx context.Context, id int64, c stock.SaleChange) (stock.Product, error)
	// Confirm and Cancel decide a held order (the customer paid, or gave up) of customer, ""
	// for any customer's (an admin's call); another customer's order does not exist to them.
	Confirm(ctx context.Context, id uuid.UUID, customer string) (stock.Order, error)
	Cancel(ctx context.Context, id uuid.UUID, customer string) (stock.Order, error)
	Products(ctx context.Context, after int64, limit int, onSale bool) (stock.ProductsPage, error)
	Audit(ctx context.Context, id int64) (stock.Audit, error)
	// PlaceOrder decides an order at once. A result with Accepted set names the order its key
	// was accepted as for later, which Queue.Order then reads.
	PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.OrderResult, error)
	Order(ctx context.Context, id uuid.UUID) (stock.Order, error)
	// CustomerOrders returns a page of a customer's confirmed orders, newest first.
	CustomerOrders(ctx context.Context, q stock.OrdersQuery) (stock.OrdersPage, error)
}

// Queue is what the handlers ask of the asynchronous route: *async.Queue, or a fake in tests.
// Each method returns the errors its async.Queue namesake documents.
type Queue interface {
	// Place accepts an order to be decided later, or refuses it at once.
	Place(ctx context.Context, req stock.OrderRequest) (async.Acceptance, error)
	// Find returns the order an id names, whichever route placed it.
	Find(ctx context.Context, id uuid.UUID) (async.Found, error)
	// Order returns an order accepted for later as it stands.
	Order(ctx context.Context, id uuid.UUID) (async.Order, error)
}

var (
	_ Service = (*stock.Service)(nil)
	_ Queue   = (*async.Queue)(nil)
)

// Config wires a Server. Zero fields take the defaults documented on each.
type Config struct {
	// Service does the work. Required.
	Service Service
	// Queue, when set, takes orders sent with Prefer: respond-async (202, decided later) and
	// answers for them on GET /v1/orders/{id}. Without it (a nil interface, not a nil
	// *async.Queue) the preference is ignored: every order is decided at once, as RFC 7240
	// lets a server do.
	Queue Queue
	// AdminToken guards the admin routes; empty turns them off (403 admin-disabled). On the
	// order reads (GET /v1/orders, GET /v1/orders/{id}) of the listener that serves the admin
	// routes, it is recognised before any customer credential: an admin reads every order.
	AdminToken string
	// Customers says who the customer of an order route is (customers.go). The zero value is
	// body mode: whatever the request says.
	Customers CustomerAuth
	// Lines, when set, serves the lines' routes (line.go) and checks the passes of every order
	// for a lined product before its customer's credential. Without it the line routes answer
	// 404 line-not-found and orders are not checked.
	Lines Lines
	// Limits throttle customers, refused credentials and wrong admin tokens (limits.go).
	// The zero value limits nothing.
	Limits Limits
	// Ready reports whether the backing services answer; /readyz calls it with a 1s deadline.
	// Nil means always ready.
	Ready func(ctx context.Context) error
	// Logger receives the access log and server-side errors. Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the HTTP metrics and Gatherer serves /metrics. Default: a private
	// registry for both.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// RequestTimeout bounds each API request. Default 10s.
	RequestTimeout time.Duration
	// MaxBodyBytes limits request bodies. Default 1 MiB.
	MaxBodyBytes int64
}

// Server is the stocksvc HTTP API. It is an http.Handler.
type Server struct {
	svc   Service
	queue Queue // nil: no asynchronous route
	// findOrder looks an order up by id: Queue.Find, or, without a queue, Service.Order.
	findOrder   func(ctx context.Context, id uuid.UUID) (async.Found, error)
	log         *slog.Logger
	ready       func(ctx context.Context) error
	adminDigest []byte // sha256 of the admin token; nil when admin routes are off
	customers   CustomerAuth
	lines       Lines // nil: no lines
	limits      *limiter
	timeout     time.Duration
	maxBody     int64
	metrics     *httpMetrics
	draining    atomic.Bool
	unready     atomic.Bool // the last readiness check failed
	router      *chi.Mux    // every route, /metrics behind the admin token
	admin       *chi.Mux    // every route, /metrics open: for a listener of operators only
	public      *chi.Mux    // every route but the admin ones and /metrics
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registerer == nil || cfg.Gatherer == nil {
		reg := prometheus.NewRegistry()
		cfg.Registerer, cfg.Gatherer = reg, reg
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Ready == nil {
		cfg.Ready = func(context.Context) error { return nil }
	}
	s := &Server{
		svc:       cfg.Service,
		queue:     cfg.Queue,
		log:       cfg.Logger,
		ready:     cfg.Ready,
		timeout:   cfg.RequestTimeout,
		maxBody:   cfg.MaxBodyBytes,
		metrics:   newHTTPMetrics(cfg.Registerer),
		customers: cfg.Customers.withDefaults(),
		lines:     cfg.Lines,
		limits:    newLimiter(cfg.Limits, cfg.Registerer),
	}
	s.findOrder = s.findConfirmed
	if cfg.Queue != nil {
		s.findOrder = cfg.Queue.Find
	}
	if cfg.AdminToken != "" {
		s.adminDigest = digest(cfg.AdminToken)
	}
	metrics := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})
	s.router = s.routes(metrics, onlyListener)
	s.admin = s.routes(metrics, adminListener)
	s.public = s.routes(nil, publicListener)
	return s
}

// ServeHTTP implements http.Handler: the whole API, for a replica's only listener, which
// clients reach. /metrics there needs the admin token, like the admin routes: a scrape runs
// Postgres queries, and it is no public read (issue #31).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.router.ServeHTTP(w, r)
}

// Admin returns the whole API for a listener that only operators and Prometheus reach, when
// clients are served Public on another: the admin routes need the admin token as everywhere,
// and /metrics answers without it, as a Prometheus on the operators' network scrapes it.
func (s *Server) Admin() http.Handler { return s.admin }

// Public returns the API without the admin routes and /metrics, for a listener that clients
// reach, when Admin is served on a listener that only operators and Prometheus reach. On
// Public those routes do not exist (404 not-found), so a public balancer cannot expose them
// by mistake.
func (s *Server) Public() http.Handler { return s.public }

// StartDraining makes /readyz answer 503 from now on, so that a load balancer stops sending
// new requests while the ones in flight finish.
func (s *Server) StartDraining() {
	s.draining.Store(true)
}

// listener is what a router is built for.
type listener int

const (
	onlyListener   listener = iota // every route; /metrics needs the admin token
	adminListener                  // every route; /metrics open (operators only reach it)
	publicListener                 // no admin route and no /metrics
)

// routes is the one place where the middleware stack and the routes are defined, for the
// listener l. Without the admin routes (publicListener), metricsHandler is left out too.
func (s *Server) routes(metricsHandler http.Handler, l listener) *chi.Mux {
	admin := l != publicListener
	r := chi.NewRouter()
	// GetHead answers HEAD on every GET route, as HTTP requires.
	r.Use(s.withRequestID, s.withAccessLog, s.withRecover, middleware.GetHead)
	notFound := func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, badRequest("not-found", "no route for "+r.URL.Path))
	}
	r.NotFound(notFound)
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if r.Match(chi.NewRouteContext(), m, req.URL.Path) {
				allow = append(allow, m)
				if m == http.MethodGet {
					allow = append(allow, http.MethodHead) // served by GetHead
				}
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		s.writeError(w, req, badRequest("method-not-allowed", req.Method+" is not allowed on "+req.URL.Path))
	})

	r.Get("/healthz", s.handleHealth)
	r.Get("/readyz", s.handleReady)
	switch l {
	case onlyListener:
		r.With(s.requireAdmin).Method(http.MethodGet, "/metrics", metricsHandler)
	case adminListener:
		r.Method(http.MethodGet, "/metrics", metricsHandler)
	}
	r.Get("/problems/{code}", s.handleProblemType)
	r.Get("/openapi.yaml", handleOpenAPI)

	r.Route("/v1", func(r chi.Router) {
		r.Use(s.withTimeout)
		if admin {
			r.With(s.requireAdmin).Post("/products", s.handleCreateProduct)
			r.With(s.requireAdmin).Post("/products/{id}/restock", s.handleRestock)
			// The audit recounts every order of the product: an operator's check, not a
			// public read that a crowd could turn against the purchase path's pool.
			r.With(s.requireAdmin).Get("/products/{id}/audit", s.handleAudit)
			r.With(s.requireAdmin).Patch("/products/{id}/sale", s.handleUpdateSale)
			r.With(s.requireAdmin).Post("/products/{id}/sale/end", s.handleEndSale)
		} else {
			// The listing shares its path with the creation: without this, the public API
			// would answer 405 and name an admin route in Allow.
			r.Post("/products", notFound)
		}
		r.Get("/products", s.handleListProducts)
		r.Get("/products/{id}", s.handleGetProduct)
		// The line's routes: joining is the customer's; a ticket is its own credential.
		r.With(s.withCustomer(false)).Post("/products/{id}/line", s.lineRoute(s.handleJoin))
		r.Get("/products/{id}/line", s.lineRoute(s.handleLine))
		r.Get("/products/{id}/line/ticket", s.lineRoute(s.handleTicket))
		r.Delete("/products/{id}/line/ticket", s.lineRoute(s.handleLeave))
		if admin {
			r.With(s.requireAdmin).Get("/products/{id}/line/draw", s.lineRoute(s.handleDraw))
		}
		// The order routes are the customer's: withCustomer names the caller. An admin token
		// counts only on the reads, and only where the admin routes are served. An order's
		// passes are checked before the customer's credential (withAdmission).
		r.With(s.withAdmission, s.withCustomer(false)).Post("/orders", s.handlePlaceOrder)
		r.With(s.withCustomer(admin)).Get("/orders", s.handleListOrders)
		r.With(s.withCustomer(admin)).Get("/orders/{id}", s.handleGetOrder)
		r.With(s.withCustomer(admin)).Post("/orders/{id}/confirm", s.handleConfirm)
		r.With(s.withCustomer(admin)).Post("/orders/{id}/cancel", s.handleCancel)
	})
	return r
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, "application/json", map[string]string{"status": "ok"})
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		s.writeNotReady(w, r, "shutting down")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		// The cause goes to the log, once per change of state, not to this unauthenticated
		// endpoint: driver errors name hosts, users and databases.
		if s.unready.CompareAndSwap(false, true) {
			s.log.WarnContext(r.Context(), "not ready", slog.Any("error", err))
		}
		s.writeNotReady(w, r, "a backing service is not answering")
		return
	}
	if s.unready.CompareAndSwap(true, false) {
		s.log.InfoContext(r.Context(), "ready again")
	}
	writeJSON(w, http.StatusOK, "application/json", map[string]string{"status": "ready"})
}

func (s *Server) writeNotReady(w http.ResponseWriter, r *http.Request, why string) {
	p := newProblem("unavailable", "not ready: "+why)
	p.Instance = r.URL.Path
	p.retryAfter = 1 // every 503 unavailable says when to look again (docs/api.md)
	writeProblem(w, p)
}

func (s *Server) handleProblemType(w http.ResponseWriter, r *http.Request) {
	code := chi.URLParam(r, "code")
	pt, ok := problemTypes[code]
	if !ok {
		s.writeError(w, r, badRequest("not-found", "no problem type "+code))
		return
	}
	writeJSON(w, http.StatusOK, "application/json", map[string]any{
		"code": code, "status": pt.Status, "title": pt.Title, "description": pt.About,
	})
}

// handleOpenAPI serves the contract the tests hold this service to, so that clients read the
// one that matches the build they talk to.
func handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(api.OpenAPI())
}

// writeJSON writes v as the whole response. An encoding failure can only come from a broken
// connection by then, so there is nothing left to tell the client.
func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"status":500,"code":"internal","title":"Internal error"}`)
		contentType = "application/problem+json"
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
