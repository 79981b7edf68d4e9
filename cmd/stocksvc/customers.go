package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/identity"
)

// logCustomerAuth names, at start-up, where the replica takes its customers from; body mode,
// where anyone may buy and read as anyone, is a warning.
func logCustomerAuth(ctx context.Context, cfg config, log *slog.Logger) {
	switch cfg.mode {
	case identity.ModeToken:
		source := slog.String("jwks_file", cfg.JWKSFile)
		if cfg.JWKSURL != "" {
			source = slog.String("jwks_url", maskHTTPURL(cfg.JWKSURL))
		}
		log.InfoContext(ctx, "customer identity", slog.String("customer_auth", string(cfg.mode)), source,
			slog.String("jwt_issuer", cfg.JWTIssuer), slog.String("jwt_audience", cfg.JWTAudience))
		if cfg.JWKSURL != "" && identity.CheckJWKSTransport(cfg.JWKSURL, false) != nil {
			log.WarnContext(ctx, "PLAIN-HTTP JWKS URL: STOCKSVC_JWKS_ALLOW_HTTP=1 lets the keys that sign customer tokens come over plain http from another host; anyone on the path could sign tokens for any customer; use https outside development")
		}
	case identity.ModeGateway:
		log.InfoContext(ctx, "customer identity", slog.String("customer_auth", string(cfg.mode)),
			slog.String("customer_header", cfg.CustomerHeader))
	default:
		log.WarnContext(ctx, "UNVERIFIED CUSTOMERS: STOCKSVC_CUSTOMER_AUTH=body takes the customer from the request body; anyone may buy and read orders as anyone; use it only for demonstrations and tests",
			slog.String("customer_auth", string(cfg.mode)))
	}
}

// customerAuth builds what the API names customers with: in token mode a Verifier over the
// configured keys (a JWKS URL fetched once within the start-up timeout), whose failures to
// reload are logged as warnings while the keys read before stay in use; its metrics go to
// reg. The returned close stops the Verifier's refresh. The errors it returns and logs show the
// JWKS URL masked: jwx, httprc and net/http quote it whole, credentials included.
func customerAuth(ctx context.Context, cfg config, reg prometheus.Registerer, log *slog.Logger) (stockhttp.CustomerAuth, func(), error) {
	auth := stockhttp.CustomerAuth{Mode: cfg.mode, Header: cfg.CustomerHeader}
	if cfg.mode != identity.ModeToken {
		return auth, func() {}, nil
	}
	keysURL := parseHTTPURL(cfg.JWKSURL)
	sctx, cancel := context.WithTimeout(ctx, cfg.StartupTimeout)
	defer cancel()
	v, err := identity.NewVerifier(sctx, identity.Config{
		Issuer:     cfg.JWTIssuer,
		Audience:   cfg.JWTAudience,
		JWKSFile:   cfg.JWKSFile,
		JWKSURL:    cfg.JWKSURL,
		Refresh:    cfg.JWKSRefresh,
		Leeway:     cfg.JWTLeeway,
		AllowHTTP:  cfg.JWKSAllowHTTP,
		Registerer: reg,
		OnError: func(err error) {
			log.Warn("customer keys not reloaded; the keys read before stay in use", slog.Any("error", keysURL.hideError(err, cfg.JWKSURL)))
		},
	})
	if err != nil {
		return auth, nil, keysURL.hideError(fmt.Errorf("customer keys: %w", err), cfg.JWKSURL)
	}
	auth.Verifier = v
	return auth, func() { _ = v.Close() }, nil
}
