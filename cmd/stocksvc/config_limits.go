package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/ratelimit"
	"github.com/stocksvc/stocksvc/internal/ratelimit/ratelimitredis"
)

// limitConfig is the rate limits, the proxies whose X-Forwarded-For is believed, and the
// permission to fetch a JWKS over plain http (issue #31): docs/configuration.md, "Rate limits".
type limitConfig struct {
	LimitCustomerRate  int
	LimitCustomerBurst int
	LimitAddressRate   int
	LimitAddressBurst  int
	LimitAdminFailures int
	TrustedProxies     string
	JWKSAllowHTTP      bool
}

func limitSettings() []setting {
	integer := func(f func(c *config) *int) func(*config, string) error {
		return func(c *config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("want a non-negative integer, got %q", v)
			}
			*f(c) = n
			return nil
		}
	}
	return []setting{
		{"STOCKSVC_LIMIT_CUSTOMER_RATE", "limit-customer-rate", "5", "requests a second each verified customer may send to the customer routes (orders, holds, their reads), on each replica; 0 turns the limit off", integer(func(c *config) *int { return &c.LimitCustomerRate }), false},
		{"STOCKSVC_LIMIT_CUSTOMER_BURST", "limit-customer-burst", "20", "requests a verified customer may send at once before STOCKSVC_LIMIT_CUSTOMER_RATE applies", integer(func(c *config) *int { return &c.LimitCustomerBurst }), false},
		{"STOCKSVC_LIMIT_ADDRESS_RATE", "limit-address-rate", "20", "refused customer credentials a second each client address may send, on each replica, before its credentials that are not already known good are answered 429 unchecked; verified tokens are never held back; 0 turns the limit off", integer(func(c *config) *int { return &c.LimitAddressRate }), false},
		{"STOCKSVC_LIMIT_ADDRESS_BURST", "limit-address-burst", "100", "refused customer credentials a client address may send at once before STOCKSVC_LIMIT_ADDRESS_RATE applies", integer(func(c *config) *int { return &c.LimitAddressBurst }), false},
		{"STOCKSVC_LIMIT_ADMIN_FAILURES", "limit-admin-failures", "10", "wrong admin tokens a minute (and at once) each client address may send, counted in Redis across the replicas; past them no admin token from the address is compared (429); 0 turns the limit off", integer(func(c *config) *int { return &c.LimitAdminFailures }), false},
		{"STOCKSVC_TRUSTED_PROXIES", "trusted-proxies", "", "comma-separated addresses or CIDR prefixes of the proxies in front of the replicas whose X-Forwarded-For names the client (the rate limits count by client address); empty believes no one: the peer is the client", stringSetting(func(c *config) *string { return &c.TrustedProxies }), false},
		{"STOCKSVC_JWKS_ALLOW_HTTP", "jwks-allow-http", "", "set to 1 to accept a plain-http STOCKSVC_JWKS_URL on a host other than loopback (development only: anyone on the path could sign tokens)", func(c *config, v string) error {
			c.JWKSAllowHTTP = v == "1" || strings.EqualFold(v, "true")
			return nil
		}, false},
	}
}

// stringSetting sets a string setting.
func stringSetting(f func(c *config) *string) func(*config, string) error {
	return func(c *config, v string) error { *f(c) = v; return nil }
}

// validateLimits checks the rate limits, the trusted proxies, and that a JWKS URL is fetched
// over TLS unless STOCKSVC_JWKS_ALLOW_HTTP says otherwise.
func (c *config) validateLimits() []error {
	var errs []error
	for _, l := range []struct {
		rate, burst int
		name        string
	}{
		{c.LimitCustomerRate, c.LimitCustomerBurst, "STOCKSVC_LIMIT_CUSTOMER"},
		{c.LimitAddressRate, c.LimitAddressBurst, "STOCKSVC_LIMIT_ADDRESS"},
	} {
		if l.rate > 0 && l.burst < 1 {
			errs = append(errs, fmt.Errorf("%s_BURST: must be at least 1 while %s_RATE is on", l.name, l.name))
		}
	}
	if _, err := parseProxies(c.TrustedProxies); err != nil {
		errs = append(errs, fmt.Errorf("STOCKSVC_TRUSTED_PROXIES: %w", err))
	}
	if c.JWKSURL != "" && identity.CheckJWKSURL(c.JWKSURL) == nil {
		if err := identity.CheckJWKSTransport(c.JWKSURL, c.JWKSAllowHTTP); err != nil {
			errs = append(errs, fmt.Errorf("STOCKSVC_JWKS_URL: %w: anyone on the path could serve keys of their own and sign tokens for any customer; use https, or set STOCKSVC_JWKS_ALLOW_HTTP=1 to accept it (development only)", err))
		}
	}
	return errs
}

// parseProxies reads STOCKSVC_TRUSTED_PROXIES: addresses (a /32 or /128) or prefixes.
func parseProxies(spec string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for item := range strings.SplitSeq(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if p, err := netip.ParsePrefix(item); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(item)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR prefix", item)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// limits are the API's rate limits as configured; the admin failures are counted in rdb,
// under the service's key prefix, so that the replicas share them.
func (c config) limits(rdb redis.UniversalClient) stockhttp.Limits {
	perSecond := func(rate, burst int) ratelimit.Limit {
		return ratelimit.Limit{Events: rate, Per: time.Second, Burst: burst}
	}
	proxies, _ := parseProxies(c.TrustedProxies) // validated
	l := stockhttp.Limits{
		Customer:       perSecond(c.LimitCustomerRate, c.LimitCustomerBurst),
		Address:        perSecond(c.LimitAddressRate, c.LimitAddressBurst),
		AdminFailures:  ratelimit.Limit{Events: c.LimitAdminFailures, Per: time.Minute, Burst: c.LimitAdminFailures},
		TrustedProxies: proxies,
	}
	if !l.AdminFailures.Off() {
		l.Shared = ratelimitredis.New(rdb, c.RedisPrefix+"admin-failures:", l.AdminFailures)
	}
	return l
}

// limitAttrs describe the limits for the start-up log line.
func (c config) limitAttrs() []any {
	return []any{
		slog.String("limit_customer", perSecondText(c.LimitCustomerRate, c.LimitCustomerBurst)),
		slog.String("limit_address", perSecondText(c.LimitAddressRate, c.LimitAddressBurst)),
		slog.Int("limit_admin_failures", c.LimitAdminFailures),
		slog.String("trusted_proxies", c.TrustedProxies),
		slog.Bool("jwks_allow_http", c.JWKSAllowHTTP),
	}
}

func perSecondText(rate, burst int) string {
	return ratelimit.Limit{Events: rate, Per: time.Second, Burst: burst}.String()
}
