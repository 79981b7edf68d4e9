package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/internal/keyspace"
)

// permanentError marks a start-up failure that waiting cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// permanent marks err as a failure that waiting cannot fix.
func permanent(err error) error { return permanentError{err} }

// isPermanent reports whether err, met while connecting to Postgres or Redis at start-up, will
// not go away by waiting: credentials refused, a role or pg_hba entry missing, no right to
// connect, a Redis database number the server does not have, Redis keys under the prefix that
// belong to another database. Everything else — refused
// connections, timeouts, a server still starting, unknown host names (a container not created
// yet) — may be a dependency that is not up yet.
func isPermanent(err error) bool {
	if errors.As(err, new(permanentError)) || errors.Is(err, keyspace.ErrForeign) {
		return true
	}
	switch pgCode(err) {
	case "28P01", // invalid_password
		"28000", // invalid_authorization_specification: no such role, no pg_hba.conf entry
		"42501": // insufficient_privilege: no CONNECT on the database
		return true
	}
	return redis.IsAuthError(err) || redis.IsPermissionError(err) ||
		redis.HasErrorPrefix(err, "DB index is out of range") || // Redis 6 and 7
		redis.HasErrorPrefix(err, "invalid DB index") || // Redis before 6
		redis.HasErrorPrefix(err, "AUTH") // "AUTH <password> called without any password configured"
}

// startupPause is how long start-up waits after the attempt-th failed attempt: a quick first
// retry for a dependency that was only a moment late, then slower, at most 2 s.
func startupPause(attempt int) time.Duration {
	return min(time.Duration(attempt)*200*time.Millisecond, 2*time.Second)
}

// waitFor calls ping until it succeeds, fails in a way waiting cannot fix, or timeout passes,
// so that replicas started together with their databases do not give up on the first refused
// connection. It warns once per change of cause rather than once per attempt, and its error
// names the last real cause, not the deadline that cut the last attempt short.
func waitFor(ctx context.Context, what string, timeout time.Duration, ping func(context.Context) error, log *slog.Logger) error {
	return waitWith(ctx, what, timeout, startupPause, ping, log)
}

// waitWith is waitFor with the pause between attempts chosen by the caller.
func waitWith(ctx context.Context, what string, timeout time.Duration, pause func(attempt int) time.Duration, ping func(context.Context) error, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var cause error
	warned := ""
	for attempt := 1; ; attempt++ {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		err := ping(pctx)
		pcancel()
		if err == nil {
			if cause != nil {
				log.InfoContext(ctx, "dependency answered", slog.String("dependency", what), slog.Int("attempts", attempt))
			}
			return nil
		}
		if isPermanent(err) {
			return fmt.Errorf("%s: %w (not retried: waiting cannot fix this)", what, err)
		}
		if ctx.Err() != nil {
			// Cut short by the overall deadline or by a stop signal: that says nothing about
			// the dependency, unless nothing else was ever learnt.
			if cause == nil {
				cause = err
			}
			break
		}
		cause = err
		if msg := err.Error(); msg != warned {
			log.WarnContext(ctx, "waiting for dependency", slog.String("dependency", what), slog.Int("attempt", attempt), slog.Any("error", err))
			warned = msg
		}
		if clock.Sleep(ctx, pause(attempt)) != nil {
			break
		}
	}
	return fmt.Errorf("%s not reachable within %v: %w", what, timeout, cause)
}
