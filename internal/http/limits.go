package stockhttp

import (
	"context"
	"crypto/subtle"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/ratelimit"
)

// Limits throttle the customer routes and the admin token (docs/api.md, "Rate limits"); a
// request over a limit is answered 429 rate-limited with Retry-After, before the work it
// asks for. The zero value limits nothing.
type Limits struct {
	// Customer is each verified customer's budget of requests on the customer routes (orders,
	// holds, their reads), on this replica: the limit that keeps one customer from taking
	// a sale's capacity. Body mode names no verified customer, and is not limited.
	Customer ratelimit.Limit
	// Address is each client address's budget of refused customer credentials, on this
	// replica. Only refusals spend it; while it is spent, a request whose credential is not
	// already known good (a token verified before) is answered 429 without being checked,
	// so that buyers behind one NAT whose tokens were verified are never throttled by
	// another's failures.
	Address ratelimit.Limit
	// AdminFailures is each client address's budget of wrong admin tokens: while it is
	// spent, every admin token from the address is answered 429 without being compared.
	// Shared counts it across replicas, so that a brute force does not grow with their
	// number; without Shared, or while it fails, each replica counts on its own.
	AdminFailures ratelimit.Limit
	Shared        SharedLimiter
	// TrustedProxies are the peers whose X-Forwarded-For names the client: the client
	// address is the last address in it that is not a trusted proxy. From any other peer
	// the header is ignored, and the peer is the client.
	TrustedProxies []netip.Prefix
	// Now is the clock of the limits kept in memory. Default time.Now.
	Now func() time.Time
}

// SharedLimiter counts events of a key across replicas: *ratelimitredis.Limiter, or a fake.
type SharedLimiter interface {
	// Take counts one event of key and returns 0, or, when key has none left, counts
	// nothing and returns how long until it has one.
	Take(ctx context.Context, key string) (time.Duration, error)
	// Blocked returns how long until key has an event left, counting nothing.
	Blocked(ctx context.Context, key string) (time.Duration, error)
}

// limitKeys bounds the keys each limit of a replica remembers: the customers and addresses
// active within the time their burst takes to earn back matter, and a key forgotten starts
// again with a full burst.
const limitKeys = 50_000

// The names of the limits, in metrics and in the detail of a 429.
const (
	limitCustomer      = "customer"
	limitAddress       = "address"
	limitAdminFailures = "admin_failures"
)

// limiter is a Server's rate limits as it runs them.
type limiter struct {
	customer *ratelimit.Keyed // nil: off
	address  *ratelimit.Keyed
	// admin counts wrong admin tokens when there is no shared limiter, or it fails.
	admin  *ratelimit.Keyed
	shared SharedLimiter
	// blocked remembers until when an address is known to have spent its admin failures,
	// so that a flood of guesses from it costs no round trip to the shared limiter.
	blocked *lru.Cache[string, time.Time]
	trusted []netip.Prefix
	now     func() time.Time
	metrics *limitMetrics
}

func newLimiter(l Limits, reg prometheus.Registerer) *limiter {
	if l.Now == nil {
		l.Now = time.Now
	}
	lim := &limiter{trusted: l.TrustedProxies, now: l.Now, metrics: newLimitMetrics(reg)}
	if !l.Customer.Off() {
		lim.customer = ratelimit.NewKeyed(l.Customer, limitKeys, l.Now)
		lim.metrics.init(limitCustomer)
	}
	if !l.Address.Off() {
		lim.address = ratelimit.NewKeyed(l.Address, limitKeys, l.Now)
		lim.metrics.init(limitAddress)
	}
	if !l.AdminFailures.Off() {
		lim.admin = ratelimit.NewKeyed(l.AdminFailures, limitKeys, l.Now)
		lim.shared = l.Shared
		lim.blocked, _ = lru.New[string, time.Time](limitKeys)
		lim.metrics.init(limitAdminFailures)
	}
	return lim
}

// limitedError is a request a rate limit refused; problemFor answers it 429 rate-limited.
type limitedError struct {
	limit string
	wait  time.Duration
}

func (e *limitedError) Error() string { return "rate limited: " + e.limit }

// detail is what the client is told.
func (e *limitedError) detail() string {
	switch e.limit {
	case limitCustomer:
		return "this customer sent more requests than a customer may; nothing was done, retry after Retry-After seconds"
	case limitAddress:
		return "too many refused credentials came from this client address; nothing was done, retry after Retry-After seconds with a valid credential"
	}
	return "too many wrong admin tokens came from this client address; the token was not checked, retry after Retry-After seconds"
}

// retryAfter is the wait in whole seconds, at least one.
func (e *limitedError) retryAfter() int { return max(1, int(math.Ceil(e.wait.Seconds()))) }

// takeCustomer counts a request of a verified customer. Errors: a *limitedError.
func (l *limiter) takeCustomer(customer string) error {
	if l.customer == nil {
		return nil
	}
	if wait := l.customer.Take(customer); wait > 0 {
		l.metrics.decided(limitCustomer, false)
		return &limitedError{limit: limitCustomer, wait: wait}
	}
	l.metrics.decided(limitCustomer, true)
	return nil
}

// addressBlocked says whether a request from addr whose credential is not known good may
// have it checked. Errors: a *limitedError.
func (l *limiter) addressBlocked(addr string) error {
	if wait := l.address.Blocked(addr); wait > 0 {
		l.metrics.decided(limitAddress, false)
		return &limitedError{limit: limitAddress, wait: wait}
	}
	l.metrics.decided(limitAddress, true)
	return nil
}

// adminBlocked says whether an admin token from addr may be compared: not while the address
// has spent its failures, here or, with a shared limiter, on any replica. Errors: a
// *limitedError.
func (l *limiter) adminBlocked(ctx context.Context, addr string) error {
	now := l.now()
	if until, ok := l.blocked.Get(addr); ok && now.Before(until) {
		l.metrics.decided(limitAdminFailures, false)
		return &limitedError{limit: limitAdminFailures, wait: until.Sub(now)}
	}
	wait := l.admin.Blocked(addr)
	if l.shared != nil && wait == 0 {
		var err error
		if wait, err = l.shared.Blocked(ctx, addr); err != nil {
			l.metrics.fallbacks.Inc()
			wait = l.admin.Blocked(addr)
		}
	}
	if wait > 0 {
		l.blocked.Add(addr, now.Add(wait))
		l.metrics.decided(limitAdminFailures, false)
		return &limitedError{limit: limitAdminFailures, wait: wait}
	}
	l.metrics.decided(limitAdminFailures, true)
	return nil
}

// adminFailed counts a wrong admin token from addr.
func (l *limiter) adminFailed(ctx context.Context, addr string) {
	var wait time.Duration
	if l.shared != nil {
		var err error
		if wait, err = l.shared.Take(ctx, addr); err == nil {
			l.rememberBlocked(addr, wait)
			return
		}
		l.metrics.fallbacks.Inc()
	}
	wait = l.admin.Take(addr)
	l.rememberBlocked(addr, wait)
}

func (l *limiter) rememberBlocked(addr string, wait time.Duration) {
	if wait > 0 {
		l.blocked.Add(addr, l.now().Add(wait))
	}
}

// admitAdmin reports whether token is the admin token, unless the client address has spent
// its admin failures (checkAdmin), and counts a wrong token against the address. Errors: a
// *limitedError.
func (s *Server) admitAdmin(r *http.Request, token string) (bool, error) {
	admin, err := s.checkAdmin(r, token)
	if err == nil && !admin && s.limits.admin != nil {
		s.limits.adminFailed(r.Context(), s.limits.clientAddress(r))
	}
	return admin, err
}

// checkAdmin reports whether token is the admin token, compared in constant time, unless the
// client address has spent its admin failures; it counts nothing. Errors: a *limitedError.
func (s *Server) checkAdmin(r *http.Request, token string) (bool, error) {
	if s.limits.admin != nil {
		if err := s.limits.adminBlocked(r.Context(), s.limits.clientAddress(r)); err != nil {
			return false, err
		}
	}
	return s.isAdminToken(token), nil
}

// isAdminToken compares token with the admin token. Digests of equal length are compared in
// constant time, so neither the token nor its length leaks through timing.
func (s *Server) isAdminToken(token string) bool {
	return s.adminDigest != nil && subtle.ConstantTimeCompare(digest(token), s.adminDigest) == 1
}

// clientAddress is the address r came from, as a limit's key: the peer, or, from a trusted
// proxy, the last address in X-Forwarded-For that is not a trusted proxy (an entry that is
// not an address stops the walk at the proxy that passed it on). IPv6 addresses count by
// their /64, which a single host is commonly given whole.
func (l *limiter) clientAddress(r *http.Request) string {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	client := peer.Addr().Unmap()
	if l.isTrusted(client) {
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := parseHop(hops[i])
			if err != nil {
				break
			}
			client = hop
			if !l.isTrusted(hop) {
				break
			}
		}
	}
	if client.Is6() {
		return netip.PrefixFrom(client, 64).Masked().String()
	}
	return client.String()
}

func (l *limiter) isTrusted(a netip.Addr) bool {
	for _, p := range l.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop reads one X-Forwarded-For entry: an address, with a port or not.
func parseHop(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, perr := netip.ParseAddrPort(s)
		if perr != nil {
			return netip.Addr{}, err
		}
		a = ap.Addr()
	}
	return a.Unmap(), nil
}

// limitMetrics count each limit's decisions.
type limitMetrics struct {
	decisions *prometheus.CounterVec
	fallbacks prometheus.Counter
}

func newLimitMetrics(reg prometheus.Registerer) *limitMetrics {
	m := &limitMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_rate_limit_decisions_total",
			Help: "Requests a rate limit judged, by limit (customer, address, admin_failures) and decision (allowed, limited).",
		}, []string{"limit", "decision"}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_rate_limit_fallbacks_total",
			Help: "Admin failures counted by this replica alone because the shared limiter (Redis) did not answer.",
		}),
	}
	reg.MustRegister(m.decisions, m.fallbacks)
	return m
}

func (m *limitMetrics) init(limit string) {
	m.decisions.WithLabelValues(limit, "allowed")
	m.decisions.WithLabelValues(limit, "limited")
}

func (m *limitMetrics) decided(limit string, allowed bool) {
	decision := "limited"
	if allowed {
		decision = "allowed"
	}
	m.decisions.WithLabelValues(limit, decision).Inc()
}
