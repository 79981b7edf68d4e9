package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// withoutRetry returns c without its retry strategy, which holds a func and so cannot be
// compared; tests check the strategy on its own.
func withoutRetry(t *testing.T, c config) config {
	t.Helper()
	c.retry = nil
	return c
}

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	got, rest, err := loadConfig(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatalf("loadConfig with an empty environment: %v", err)
	}
	if len(rest) != 0 {
		t.Errorf("rest = %q, want none", rest)
	}
	want := config{
		Addr:           ":8080",
		DatabaseURL:    "postgres://postgres@localhost:5432/stocksvc?sslmode=disable",
		RedisURL:       "redis://localhost:6379/0",
		RedisMode:      "single",
		RedisPrefix:    "stocksvc:",
		AdminToken:     "",
		DBMaxConns:     20,
		LockTTL:        10 * time.Second,
		LockWait:       2 * time.Second,
		QueueWait:      500 * time.Millisecond,
		LockRetry:      "wait",
		LockMaxRetries: 0,
		MaxQuantity:    10,
		MaxBatch:       256,
		AsyncWorkers:   4,
		CacheLease:     50 * time.Millisecond,
		CacheTTL:       5 * time.Second,
		CacheRedisWait: 500 * time.Millisecond,
		LinePoll:       250 * time.Millisecond,
		LineMaxWait:    30 * time.Second,
		RequestTimeout: 10 * time.Second,
		ShutdownGrace:  15 * time.Second,
		ShutdownDelay:  2 * time.Second,
		StartupTimeout: 30 * time.Second,
		IdempotencyTTL: 24 * time.Hour,
		Defense:        "lock,version,guard",
		DemoUnsafe:     false,
		RuleChecks:     "on",
		LogFormat:      "json",
		LogLevel:       "info",
		CustomerAuth:   "token",
		JWKSRefresh:    5 * time.Minute,
		JWTLeeway:      30 * time.Second,
		CustomerHeader: "X-Customer-Id",
		limitConfig:    defaultLimits,
		defense:        stock.DefaultDefense(),
		mode:           identity.ModeToken,
	}
	if g := withoutRetry(t, got); g != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", g, want)
	}
	// The default waits without polling: no strategy.
	if got.retry != nil {
		t.Errorf("default retry strategy = %v, want none (wait for releases)", got.retry)
	}
}

// TestSettingsDocumentDefaults checks that -h shows every variable with the default it really
// has, so the documentation cannot drift from the code.
func TestSettingsDocumentDefaults(t *testing.T) {
	t.Parallel()
	var usage bytes.Buffer
	_, _, err := loadConfig([]string{"-h"}, envOf(nil), &usage)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("loadConfig(-h) error = %v, want flag.ErrHelp", err)
	}
	seen := map[string]bool{}
	for _, s := range settings() {
		if seen[s.env] || seen[s.flag] {
			t.Errorf("setting %s/-%s is declared twice", s.env, s.flag)
		}
		seen[s.env], seen[s.flag] = true, true
		if !strings.HasPrefix(s.env, "STOCKSVC_") && s.env != "DATABASE_URL" && s.env != "REDIS_URL" {
			t.Errorf("variable %s lacks the STOCKSVC_ prefix", s.env)
		}
		for _, want := range []string{"-" + s.flag, "env " + s.env, `default "` + s.def + `"`} {
			if !strings.Contains(usage.String(), want) {
				t.Errorf("usage lacks %q:\n%s", want, usage.String())
			}
		}
		// Each documented default must itself be a valid value.
		var c config
		if err := s.set(&c, s.def); err != nil {
			t.Errorf("%s: default %q is refused: %v", s.env, s.def, err)
		}
	}
}

// TestConfigurationDocListsEverySetting keeps docs/configuration.md in step with the code:
// every variable and flag, with its default, has a row.
func TestConfigurationDocListsEverySetting(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatalf("read the configuration doc: %v", err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 4 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = line
		}
	}
	for _, s := range settings() {
		row, ok := rows[s.env]
		if !ok {
			t.Errorf("docs/configuration.md has no row for %s", s.env)
			continue
		}
		def := "`" + s.def + "`"
		if s.def == "" {
			def = "(empty"
		}
		if !strings.Contains(row, "`-"+s.flag+"`") || !strings.Contains(row, def) {
			t.Errorf("docs/configuration.md row for %s lacks -%s or its default %q:\n%s", s.env, s.flag, s.def, row)
		}
		if s.secret && !strings.Contains(row, s.env+"_FILE") {
			t.Errorf("docs/configuration.md row for %s does not mention %s_FILE", s.env, s.env)
		}
	}
}

func TestLoadConfigEnvironmentOverrides(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"STOCKSVC_ADDR":             "127.0.0.1:9999",
		"DATABASE_URL":              "postgres://u@db.example:5432/shop?sslmode=require",
		"REDIS_URL":                 "redis://cache.example:6380/2",
		"STOCKSVC_REDIS_MODE":       "cluster",
		"STOCKSVC_REDIS_PREFIX":     "shop:",
		"STOCKSVC_ADMIN_TOKEN":      "tok-5f0c1e2d3b4a69788796a5b4",
		"STOCKSVC_DB_MAX_CONNS":     "7",
		"STOCKSVC_ASYNC_WORKERS":    "3",
		"STOCKSVC_LOCK_TTL":         "3s",
		"STOCKSVC_LOCK_WAIT":        "250ms",
		"STOCKSVC_QUEUE_WAIT":       "100ms",
		"STOCKSVC_LOCK_RETRY":       "fixed:5ms",
		"STOCKSVC_LOCK_MAX_RETRIES": "4",
		"STOCKSVC_MAX_QUANTITY":     "3",
		"STOCKSVC_MAX_BATCH":        "64",
		"STOCKSVC_CACHE_LEASE":      "20ms",
		"STOCKSVC_CACHE_TTL":        "2s",
		"STOCKSVC_CACHE_REDIS_WAIT": "150ms",
		"STOCKSVC_LINE_POLL":        "100ms",
		"STOCKSVC_LINE_MAX_WAIT":    "20s",
		"STOCKSVC_DEBUG_ADDR":       "127.0.0.1:6060",
		"STOCKSVC_REQUEST_TIMEOUT":  "4s",
		"STOCKSVC_SHUTDOWN_GRACE":   "6s",
		"STOCKSVC_SHUTDOWN_DELAY":   "1500ms",
		"STOCKSVC_STARTUP_TIMEOUT":  "9s",
		"STOCKSVC_IDEMPOTENCY_TTL":  "48h",
		"STOCKSVC_DEFENSE":          "version,guard",
		"STOCKSVC_DEMO_UNSAFE":      "1",
		"STOCKSVC_LOG_FORMAT":       "text",
		"STOCKSVC_LOG_LEVEL":        "warn",
		"STOCKSVC_CUSTOMER_AUTH":    "gateway",
		"STOCKSVC_CUSTOMER_HEADER":  "X-User",
		"STOCKSVC_JWKS_URL":         "http://127.0.0.1:1/jwks.json",
		"STOCKSVC_JWKS_REFRESH":     "1m",
		"STOCKSVC_JWT_ISSUER":       "https://id.example",
		"STOCKSVC_JWT_AUDIENCE":     "shop",
		"STOCKSVC_JWT_LEEWAY":       "5s",
	}
	got, rest, err := loadConfig([]string{"migrate", "up"}, envOf(env), io.Discard)
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if strings.Join(rest, " ") != "migrate up" {
		t.Errorf("rest = %q, want [migrate up]", rest)
	}
	want := config{
		Addr:           "127.0.0.1:9999",
		DatabaseURL:    "postgres://u@db.example:5432/shop?sslmode=require",
		RedisURL:       "redis://cache.example:6380/2",
		RedisMode:      "cluster",
		RedisPrefix:    "shop:",
		AdminToken:     "tok-5f0c1e2d3b4a69788796a5b4",
		DBMaxConns:     7,
		LockTTL:        3 * time.Second,
		LockWait:       250 * time.Millisecond,
		QueueWait:      100 * time.Millisecond,
		LockRetry:      "fixed:5ms",
		LockMaxRetries: 4,
		MaxQuantity:    3,
		MaxBatch:       64,
		AsyncWorkers:   3,
		CacheLease:     20 * time.Millisecond,
		CacheTTL:       2 * time.Second,
		CacheRedisWait: 150 * time.Millisecond,
		LinePoll:       100 * time.Millisecond,
		LineMaxWait:    20 * time.Second,
		DebugAddr:      "127.0.0.1:6060",
		RequestTimeout: 4 * time.Second,
		ShutdownGrace:  6 * time.Second,
		ShutdownDelay:  1500 * time.Millisecond,
		StartupTimeout: 9 * time.Second,
		IdempotencyTTL: 48 * time.Hour,
		Defense:        "version,guard",
		DemoUnsafe:     true,
		RuleChecks:     "on",
		LogFormat:      "text",
		LogLevel:       "warn",
		CustomerAuth:   "gateway",
		CustomerHeader: "X-User",
		JWKSURL:        "http://127.0.0.1:1/jwks.json",
		JWKSRefresh:    time.Minute,
		JWTIssuer:      "https://id.example",
		JWTAudience:    "shop",
		JWTLeeway:      5 * time.Second,
		limitConfig:    defaultLimits,
		defense:        stock.Defense{Version: true, Guard: true, Check: true},
		mode:           identity.ModeGateway,
	}
	if g := withoutRetry(t, got); g != want {
		t.Errorf("env overrides:\n got %+v\nwant %+v", g, want)
	}
	// fixed:5ms capped at 4 retries.
	for failed := 1; failed <= 4; failed++ {
		if got, want := got.retry.Backoff(failed), 5*time.Millisecond; got != want {
			t.Errorf("Backoff(%d) = %v, want %v", failed, got, want)
		}
	}
	if got := got.retry.Backoff(5); got >= 0 {
		t.Errorf("Backoff(5) = %v, want negative (4 retries allowed)", got)
	}
}

func TestLoadConfigFlagsOverrideEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"STOCKSVC_ADDR":             ":1111",
		"STOCKSVC_LOCK_TTL":         "3s",
		"STOCKSVC_MAX_QUANTITY":     "3",
		"STOCKSVC_LOCK_RETRY":       "none",
		"STOCKSVC_LOCK_MAX_RETRIES": "9",
		"STOCKSVC_LOG_LEVEL":        "warn",
		"STOCKSVC_DEFENSE":          "check",
		"STOCKSVC_DEMO_UNSAFE":      "1",
		"STOCKSVC_STARTUP_TIMEOUT":  "9s",
	}
	args := []string{
		"-addr", ":2222",
		"-lock-ttl=4s",
		"-max-quantity", "5",
		"-lock-retry", "linear:1ms:3ms",
		"-lock-max-retries", "2",
		"-log-level=debug",
		"-defense", "lock,version,guard",
		"-demo-unsafe", "0",
		"-startup-timeout", "1s",
		"migrate", "version",
	}
	got, rest, err := loadConfig(args, envOf(env), io.Discard)
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if strings.Join(rest, " ") != "migrate version" {
		t.Errorf("rest = %q, want [migrate version]", rest)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Addr", got.Addr, ":2222"},
		{"LockTTL", got.LockTTL, 4 * time.Second},
		{"MaxQuantity", got.MaxQuantity, int64(5)},
		{"LockRetry", got.LockRetry, "linear:1ms:3ms"},
		{"LockMaxRetries", got.LockMaxRetries, 2},
		{"LogLevel", got.LogLevel, "debug"},
		{"Defense", got.Defense, "lock,version,guard"},
		{"defense", got.defense, stock.DefaultDefense()},
		{"DemoUnsafe", got.DemoUnsafe, false},
		{"StartupTimeout", got.StartupTimeout, time.Second},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v (the flag's value)", c.name, c.got, c.want)
		}
	}
	// The strategy must be the flag's: linear, capped at 2 retries, not the env's none.
	if got := got.retry.Backoff(2); got < 0 || got > 2*time.Millisecond {
		t.Errorf("Backoff(2) = %v, want within [0, 2ms]", got)
	}
	if got := got.retry.Backoff(3); got >= 0 {
		t.Errorf("Backoff(3) = %v, want negative (2 retries allowed)", got)
	}
}

func TestLoadConfigFlagWinsOverUnreadableVariable(t *testing.T) {
	t.Parallel()
	env := envOf(map[string]string{"STOCKSVC_LOCK_TTL": "bogus", "STOCKSVC_MAX_QUANTITY": "many"})
	got, _, err := loadConfig([]string{"-lock-ttl", "5s", "-max-quantity", "4"}, env, io.Discard)
	if err != nil {
		t.Fatalf("loadConfig: %v; the flags should replace the unreadable variables", err)
	}
	if got.LockTTL != 5*time.Second || got.MaxQuantity != 4 {
		t.Errorf("LockTTL, MaxQuantity = %v, %d; want 5s, 4", got.LockTTL, got.MaxQuantity)
	}
	if _, _, err := loadConfig([]string{"-lock-ttl", "5s"}, env, io.Discard); err == nil || !strings.Contains(err.Error(), "STOCKSVC_MAX_QUANTITY") {
		t.Errorf("err = %v, want the variable without a flag reported", err)
	}
}

func TestLoadConfigInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want []string // substrings of the error
	}{
		{"bad duration", map[string]string{"STOCKSVC_LOCK_TTL": "soon"}, nil, []string{"STOCKSVC_LOCK_TTL", `"soon"`}},
		{"duration without unit", map[string]string{"STOCKSVC_REQUEST_TIMEOUT": "10"}, nil, []string{"STOCKSVC_REQUEST_TIMEOUT", `"10"`}},
		{"negative duration", map[string]string{"STOCKSVC_SHUTDOWN_GRACE": "-1s"}, nil, []string{"STOCKSVC_SHUTDOWN_GRACE"}},
		{"negative delay", map[string]string{"STOCKSVC_SHUTDOWN_DELAY": "-5s"}, nil, []string{"STOCKSVC_SHUTDOWN_DELAY"}},
		{"zero shutdown budget", map[string]string{"STOCKSVC_SHUTDOWN_GRACE": "0s", "STOCKSVC_SHUTDOWN_DELAY": "0s"}, nil, []string{"STOCKSVC_SHUTDOWN_GRACE", "positive"}},
		{"shutdown delay filling the budget", map[string]string{"STOCKSVC_SHUTDOWN_GRACE": "2s", "STOCKSVC_SHUTDOWN_DELAY": "2s"}, nil, []string{"STOCKSVC_SHUTDOWN_DELAY", "leaves nothing of STOCKSVC_SHUTDOWN_GRACE (2s)"}},
		{"non-integer", map[string]string{"STOCKSVC_DB_MAX_CONNS": "many"}, nil, []string{"STOCKSVC_DB_MAX_CONNS", `"many"`}},
		{"fractional integer", map[string]string{"STOCKSVC_MAX_QUANTITY": "1.5"}, nil, []string{"STOCKSVC_MAX_QUANTITY", `"1.5"`}},
		{"non-integer retries", map[string]string{"STOCKSVC_LOCK_MAX_RETRIES": "3x"}, nil, []string{"STOCKSVC_LOCK_MAX_RETRIES"}},
		{"unknown log format", map[string]string{"STOCKSVC_LOG_FORMAT": "xml"}, nil, []string{"STOCKSVC_LOG_FORMAT", `"xml"`}},
		{"unknown log level", map[string]string{"STOCKSVC_LOG_LEVEL": "loud"}, nil, []string{"STOCKSVC_LOG_LEVEL", "loud"}},
		{"idempotency TTL below 24h", map[string]string{"STOCKSVC_IDEMPOTENCY_TTL": "23h59m"}, nil, []string{"STOCKSVC_IDEMPOTENCY_TTL", "24h"}},
		{"unknown defense layer", map[string]string{"STOCKSVC_DEFENSE": "lock,moat", "STOCKSVC_DEMO_UNSAFE": "1"}, nil, []string{"STOCKSVC_DEFENSE", "moat"}},
		{"unknown retry strategy", map[string]string{"STOCKSVC_LOCK_RETRY": "quadratic"}, nil, []string{"STOCKSVC_LOCK_RETRY", "quadratic"}},
		{"lock TTL too short", map[string]string{"STOCKSVC_LOCK_TTL": "50ms"}, nil, []string{"STOCKSVC_LOCK_TTL", "100ms"}},
		{"zero lock wait", map[string]string{"STOCKSVC_LOCK_WAIT": "0s"}, nil, []string{"STOCKSVC_LOCK_WAIT"}},
		{"zero max quantity", map[string]string{"STOCKSVC_MAX_QUANTITY": "0"}, nil, []string{"STOCKSVC_MAX_QUANTITY"}},
		{"zero queue wait", map[string]string{"STOCKSVC_QUEUE_WAIT": "0s"}, nil, []string{"STOCKSVC_QUEUE_WAIT"}},
		{"zero max batch", map[string]string{"STOCKSVC_MAX_BATCH": "0"}, nil, []string{"STOCKSVC_MAX_BATCH"}},
		{"huge max batch", map[string]string{"STOCKSVC_MAX_BATCH": "1000000"}, nil, []string{"STOCKSVC_MAX_BATCH", "1..10000"}},
		{"long cache lease", map[string]string{"STOCKSVC_CACHE_LEASE": "2s"}, nil, []string{"STOCKSVC_CACHE_LEASE", "at most 1s"}},
		{"zero cache redis wait", map[string]string{"STOCKSVC_CACHE_REDIS_WAIT": "0s"}, nil, []string{"STOCKSVC_CACHE_REDIS_WAIT", "positive"}},
		{"line poll too fast", map[string]string{"STOCKSVC_LINE_POLL": "1ms"}, nil, []string{"STOCKSVC_LINE_POLL", "10ms..5s"}},
		{"line poll too slow", map[string]string{"STOCKSVC_LINE_POLL": "10s"}, nil, []string{"STOCKSVC_LINE_POLL", "10ms..5s"}},
		{"long-poll too long", map[string]string{"STOCKSVC_LINE_MAX_WAIT": "2m"}, nil, []string{"STOCKSVC_LINE_MAX_WAIT", "1s..1m"}},
		{"cache ttl below lease", map[string]string{"STOCKSVC_CACHE_LEASE": "500ms", "STOCKSVC_CACHE_TTL": "100ms"}, nil, []string{"STOCKSVC_CACHE_TTL", "shorter"}},
		{"zero pool", map[string]string{"STOCKSVC_DB_MAX_CONNS": "0"}, nil, []string{"STOCKSVC_DB_MAX_CONNS"}},
		{"async workers above half the pool", map[string]string{"STOCKSVC_DB_MAX_CONNS": "8", "STOCKSVC_ASYNC_WORKERS": "5"}, nil, []string{"STOCKSVC_ASYNC_WORKERS", "0..4"}},
		{"negative async workers", map[string]string{"STOCKSVC_ASYNC_WORKERS": "-1"}, nil, []string{"STOCKSVC_ASYNC_WORKERS"}},
		{"zero request timeout", map[string]string{"STOCKSVC_REQUEST_TIMEOUT": "0s"}, nil, []string{"STOCKSVC_REQUEST_TIMEOUT"}},
		{"zero startup timeout", map[string]string{"STOCKSVC_STARTUP_TIMEOUT": "0s"}, nil, []string{"STOCKSVC_STARTUP_TIMEOUT"}},
		{"every error at once", map[string]string{"STOCKSVC_LOCK_WAIT": "x", "STOCKSVC_MAX_QUANTITY": "y"}, nil, []string{"STOCKSVC_LOCK_WAIT", "STOCKSVC_MAX_QUANTITY"}},
		{"every validation error at once", map[string]string{"STOCKSVC_LOG_FORMAT": "xml", "STOCKSVC_IDEMPOTENCY_TTL": "1h"}, nil, []string{"STOCKSVC_LOG_FORMAT", "STOCKSVC_IDEMPOTENCY_TTL"}},
		{"bad flag value", nil, []string{"-lock-ttl", "soon"}, []string{"lock-ttl", "soon"}},
		{"flag value failing validation", nil, []string{"-idempotency-ttl=1h"}, []string{"STOCKSVC_IDEMPOTENCY_TTL"}},
		{"unknown flag", nil, []string{"-frobnicate"}, []string{"frobnicate"}},
		{"admin listener on the public address", map[string]string{"STOCKSVC_ADMIN_ADDR": ":8080"}, nil, []string{"STOCKSVC_ADMIN_ADDR", "leave it empty"}},
		{"profiler on every interface", map[string]string{"STOCKSVC_DEBUG_ADDR": ":6060"}, nil, []string{"STOCKSVC_DEBUG_ADDR", `":6060" is not a loopback address`}},
		{"profiler on an unspecified address (an IP, but not loopback)", map[string]string{"STOCKSVC_DEBUG_ADDR": "[::]:6060"}, nil, []string{"STOCKSVC_DEBUG_ADDR", "not a loopback address"}},
		{"profiler on a host name", map[string]string{"STOCKSVC_DEBUG_ADDR": "stocksvc:6060"}, nil, []string{"STOCKSVC_DEBUG_ADDR", "not a loopback address"}},
		{"profiler without a port", map[string]string{"STOCKSVC_DEBUG_ADDR": "127.0.0.1"}, nil, []string{"STOCKSVC_DEBUG_ADDR", "not host:port"}},
		{"unknown customer auth", map[string]string{"STOCKSVC_CUSTOMER_AUTH": "jwt"}, nil, []string{"STOCKSVC_CUSTOMER_AUTH", `"jwt"`}},
		{"JWKS URL not http", map[string]string{"STOCKSVC_JWKS_URL": "file:///etc/jwks.json"}, nil, []string{"STOCKSVC_JWKS_URL", "http or https"}},
		{"JWKS URL without a host", map[string]string{"STOCKSVC_JWKS_URL": "https:///jwks.json"}, nil, []string{"STOCKSVC_JWKS_URL", "no host"}},
		{"JWKS refresh too short", map[string]string{"STOCKSVC_JWKS_REFRESH": "100ms"}, nil, []string{"STOCKSVC_JWKS_REFRESH", "at least 1s"}},
		{"leeway too long", map[string]string{"STOCKSVC_JWT_LEEWAY": "1h"}, nil, []string{"STOCKSVC_JWT_LEEWAY", "at most 5m"}},
		{"customer header not a header name", map[string]string{"STOCKSVC_CUSTOMER_HEADER": "X User"}, nil, []string{"STOCKSVC_CUSTOMER_HEADER", `"X User"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := loadConfig(tt.args, envOf(tt.env), io.Discard)
			if err == nil {
				t.Fatalf("loadConfig(%q) with %v: no error, want one naming %q", tt.args, tt.env, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestLoadConfigUnsafeDefense(t *testing.T) {
	t.Parallel()
	tests := []struct {
		defense, unsafe string
		want            stock.Defense
		wantErr         bool
	}{
		{"lock,version,guard", "", stock.DefaultDefense(), false},
		{"guard, version ,lock", "", stock.DefaultDefense(), false},
		{"lock,version,guard,check", "", stock.DefaultDefense(), false},
		{"lock", "", stock.Defense{}, true},
		{"none", "", stock.Defense{}, true},
		{"check", "", stock.Defense{}, true},
		{"version,guard", "0", stock.Defense{}, true},
		{"version,guard", "yes", stock.Defense{}, true},
		{"lock", "1", stock.Defense{Lock: true, Check: true}, false},
		{"none", "1", stock.Defense{}, false},
		{"check", "true", stock.Defense{Check: true}, false},
		{"version,guard", "TRUE", stock.Defense{Version: true, Guard: true, Check: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.defense+"/unsafe="+tt.unsafe, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"STOCKSVC_DEFENSE": tt.defense, "STOCKSVC_DEMO_UNSAFE": tt.unsafe}
			got, _, err := loadConfig(nil, envOf(env), io.Discard)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "STOCKSVC_DEMO_UNSAFE=1") {
					t.Fatalf("error = %v, want a refusal that names STOCKSVC_DEMO_UNSAFE=1", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("loadConfig: %v", err)
			}
			if got.defense != tt.want {
				t.Errorf("defense = %+v, want %+v", got.defense, tt.want)
			}
		})
	}
}

// checkBackoff samples s.Backoff(failed) and checks that it stays within [0, ceiling] and, being
// jittered over that range, comes near the ceiling (a wrong ceiling shows either way).
func checkBackoff(t *testing.T, s interface{ Backoff(int) time.Duration }, failed int, ceiling time.Duration) {
	t.Helper()
	var highest time.Duration
	for range 300 {
		d := s.Backoff(failed)
		if d < 0 || d > ceiling {
			t.Errorf("Backoff(%d) = %v, want within [0, %v]", failed, d, ceiling)
			return
		}
		highest = max(highest, d)
	}
	if highest <= ceiling/2 {
		t.Errorf("Backoff(%d) never exceeded %v in 300 tries, want values up to %v", failed, ceiling/2, ceiling)
	}
}

func TestParseRetry(t *testing.T) {
	t.Parallel()
	type probe struct {
		failed  int
		ceiling time.Duration // for jittered strategies
		exact   time.Duration // for fixed; negative means "gives up"
	}
	tests := []struct {
		spec   string
		probes []probe
	}{
		{"exponential", []probe{{failed: 1, ceiling: time.Millisecond}, {failed: 4, ceiling: 8 * time.Millisecond}, {failed: 7, ceiling: 50 * time.Millisecond}, {failed: 1000, ceiling: 50 * time.Millisecond}}},
		{"exponential:1ms:20ms", []probe{{failed: 1, ceiling: time.Millisecond}, {failed: 3, ceiling: 4 * time.Millisecond}, {failed: 5, ceiling: 16 * time.Millisecond}, {failed: 6, ceiling: 20 * time.Millisecond}, {failed: 100, ceiling: 20 * time.Millisecond}}},
		{"linear", []probe{{failed: 1, ceiling: 2 * time.Millisecond}, {failed: 3, ceiling: 6 * time.Millisecond}, {failed: 25, ceiling: 50 * time.Millisecond}, {failed: 1000, ceiling: 50 * time.Millisecond}}},
		{"linear:2ms:10ms", []probe{{failed: 1, ceiling: 2 * time.Millisecond}, {failed: 4, ceiling: 8 * time.Millisecond}, {failed: 6, ceiling: 10 * time.Millisecond}, {failed: 1000, ceiling: 10 * time.Millisecond}}},
		{"fixed:100ms", []probe{{failed: 1, exact: 100 * time.Millisecond}, {failed: 1000, exact: 100 * time.Millisecond}}},
		{"none", []probe{{failed: 1, exact: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			t.Parallel()
			s, err := parseRetry(tt.spec, 0)
			if err != nil {
				t.Fatalf("parseRetry(%q, 0): %v", tt.spec, err)
			}
			for _, p := range tt.probes {
				switch {
				case p.exact < 0:
					if got := s.Backoff(p.failed); got >= 0 {
						t.Errorf("Backoff(%d) = %v, want negative (give up)", p.failed, got)
					}
				case p.exact > 0:
					if got := s.Backoff(p.failed); got != p.exact {
						t.Errorf("Backoff(%d) = %v, want %v", p.failed, got, p.exact)
					}
				default:
					checkBackoff(t, s, p.failed, p.ceiling)
				}
			}
		})
	}
}

func TestParseRetryMaxRetries(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"exponential", "exponential:1ms:20ms", "linear", "linear:2ms:10ms", "fixed:100ms"} {
		for _, n := range []int{1, 3, 10} {
			s, err := parseRetry(spec, n)
			if err != nil {
				t.Fatalf("parseRetry(%q, %d): %v", spec, n, err)
			}
			for failed := 1; failed <= n; failed++ {
				if got := s.Backoff(failed); got < 0 {
					t.Errorf("%s capped at %d: Backoff(%d) = %v, want a pause (retry %d of %d)", spec, n, failed, got, failed, n)
				}
			}
			if got := s.Backoff(n + 1); got >= 0 {
				t.Errorf("%s capped at %d: Backoff(%d) = %v, want negative (stop)", spec, n, n+1, got)
			}
		}
	}
	// With a cap, none still never retries.
	s, err := parseRetry("none", 5)
	if err != nil {
		t.Fatalf("parseRetry(none, 5): %v", err)
	}
	if got := s.Backoff(1); got >= 0 {
		t.Errorf("none capped at 5: Backoff(1) = %v, want negative", got)
	}
}

func TestParseRetryErrors(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{
		"",
		"quadratic",
		"Exponential",
		"exponential:1ms",
		"exponential:1ms:20ms:30ms",
		"exponential:0s:20ms",
		"linear:2ms",
		"linear:2ms:-10ms",
		"fixed",
		"fixed:0s",
		"fixed:-1ms",
		"fixed:soon",
		"fixed:100",
		"none:1ms",
		"exponential:",
	} {
		t.Run(spec, func(t *testing.T) {
			t.Parallel()
			s, err := parseRetry(spec, 0)
			if err == nil {
				t.Fatalf("parseRetry(%q) = %v, want an error", spec, s)
			}
			if !strings.Contains(err.Error(), `"`+spec+`"`) {
				t.Errorf("error %q does not quote the spec %q", err, spec)
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "-help", "--help"} {
		var stdout, stderr bytes.Buffer
		stopped := false
		err := run(context.Background(), func() { stopped = true }, []string{arg}, envOf(nil), stdio{stdout: &stdout, stderr: &stderr})
		if err != nil {
			t.Errorf("run(%s) = %v, want nil (help exits 0)", arg, err)
		}
		for _, want := range []string{"-database-url", "STOCKSVC_ADMIN_TOKEN", "Commands:", "  serve ", "  migrate down N|all ", "  version ", "  healthcheck "} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("run(%s) usage lacks %q:\n%s", arg, want, stderr.String())
			}
		}
		if stopped {
			t.Errorf("run(%s) called stopSignals", arg)
		}
	}
}

func TestRunRejectsBadInvocations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"unknown command", []string{"sideways"}, nil, `unknown command "sideways"`},
		{"arguments after serve", []string{"serve", "now"}, nil, `serve: unexpected arguments ["now"]`},
		{"invalid config", nil, map[string]string{"STOCKSVC_LOG_FORMAT": "xml"}, "STOCKSVC_LOG_FORMAT"},
		{"invalid config before migrate", []string{"migrate", "up"}, map[string]string{"STOCKSVC_LOCK_TTL": "x"}, "STOCKSVC_LOCK_TTL"},
		{"unsafe defense", nil, map[string]string{"STOCKSVC_DEFENSE": "none"}, "STOCKSVC_DEMO_UNSAFE=1"},
		{"migrate without a subcommand", []string{"migrate"}, nil, "want up, down N|all [-force] or version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), func() {}, tt.args, envOf(tt.env), stdio{stdout: &stdout, stderr: &stderr})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// logLine renders attrs as the JSON start-up line would.
func logLine(t *testing.T, c config) (string, map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("starting", c.logAttrs()...)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("start-up line is not JSON: %v: %s", err, buf.Bytes())
	}
	return buf.String(), rec
}

func TestLogAttrsMaskSecrets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                     string
		env                      map[string]string
		secrets                  []string
		wantAdmin, wantDB, wantR string
	}{
		{
			name: "passwords in user info",
			env: map[string]string{
				"STOCKSVC_ADMIN_TOKEN": "tok-Adm1n-SeCrEt-8faab3cccff97e5a",
				"DATABASE_URL":         "postgres://shop:pg-Pa55word@db.example:5432/shop?sslmode=disable",
				"REDIS_URL":            "redis://default:redis-Pa55word@cache.example:6379/0",
			},
			secrets:   []string{"tok-Adm1n-SeCrEt-8faab3cccff97e5a", "pg-Pa55word", "redis-Pa55word"},
			wantAdmin: "***",
			wantDB:    "postgres://shop:xxxxx@db.example:5432/shop?sslmode=disable",
			wantR:     "redis://default:xxxxx@cache.example:6379/0",
		},
		{
			name: "passwords as query parameters",
			env: map[string]string{
				"STOCKSVC_ADMIN_TOKEN": "another-token-5f0c1e2d3b4a6978",
				"DATABASE_URL":         "postgres://shop@db.example/shop?password=pg-Query-Secret&sslmode=disable",
				"REDIS_URL":            "redis://:redis-Only-Password@cache.example:6379/1",
			},
			secrets:   []string{"another-token-5f0c1e2d3b4a6978", "pg-Query-Secret", "redis-Only-Password"},
			wantAdmin: "***",
			wantDB:    "postgres://shop@db.example/shop?password=xxxxx&sslmode=disable",
			wantR:     "redis://:xxxxx@cache.example:6379/1",
		},
		{
			name: "key=value settings, quoted password",
			env: map[string]string{
				"DATABASE_URL": "host=db.example user=shop password='pg kv Secret' dbname=shop",
				"REDIS_URL":    "rediss://app:tls-Secret-R@cache.example:6380/0",
			},
			secrets:   []string{"pg kv Secret", "tls-Secret-R"},
			wantAdmin: "",
			wantDB:    "host=db.example user=shop password=xxxxx dbname=shop",
			wantR:     "rediss://app:xxxxx@cache.example:6380/0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _, err := loadConfig(nil, envOf(tt.env), io.Discard)
			if err != nil {
				t.Fatalf("loadConfig: %v", err)
			}
			line, rec := logLine(t, c)
			for _, s := range tt.secrets {
				if strings.Contains(line, s) {
					t.Errorf("secret %q appears in the start-up line: %s", s, line)
				}
			}
			for _, f := range []struct{ key, want string }{
				{"admin_token", tt.wantAdmin}, {"database_url", tt.wantDB}, {"redis_url", tt.wantR},
			} {
				if got := rec[f.key]; got != f.want {
					t.Errorf("%s = %v, want %q", f.key, got, f.want)
				}
			}
		})
	}
}

// TestLogAttrsDescribeConfig checks that the start-up line reports the effective settings.
func TestLogAttrsDescribeConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{"STOCKSVC_DEFENSE": "guard", "STOCKSVC_DEMO_UNSAFE": "1", "STOCKSVC_STARTUP_TIMEOUT": "7s", "STOCKSVC_LOCK_RETRY": "linear"}
	c, _, err := loadConfig(nil, envOf(env), io.Discard)
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	_, rec := logLine(t, c)
	for key, want := range map[string]any{
		"addr":            ":8080",
		"defense":         "guard",
		"lock_retry":      "linear",
		"startup_timeout": "7s",
		"idempotency_ttl": "24h0m0s",
		"max_quantity":    float64(10),
	} {
		if got := rec[key]; got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
}

func TestParseRetryWait(t *testing.T) {
	t.Parallel()
	s, err := parseRetry("wait", 0)
	if err != nil || s != nil {
		t.Errorf(`parseRetry("wait", 0) = %v, %v; want no strategy (queue and wake on release)`, s, err)
	}
	if _, err := parseRetry("wait", 3); err == nil {
		t.Errorf(`parseRetry("wait", 3) accepted a retry cap that cannot apply`)
	}
}

func TestRedisModes(t *testing.T) {
	t.Parallel()
	if _, _, err := loadConfig(nil, envOf(map[string]string{"STOCKSVC_REDIS_MODE": "ring"}), io.Discard); err == nil || !strings.Contains(err.Error(), "STOCKSVC_REDIS_MODE") {
		t.Errorf("unknown mode: err = %v, want it named", err)
	}
	tests := []struct {
		mode, url string
		want      string // the client's type, or "error"
	}{
		{"single", "redis://127.0.0.1:6379/0", "*redis.Client"},
		{"cluster", "redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", "*redis.ClusterClient"},
		{"sentinel", "redis://127.0.0.1:26379?master_name=mymaster&addr=127.0.0.1:26380", "*redis.Client"},
		{"sentinel", "redis://127.0.0.1:26379", "error"},
		{"single", "http://127.0.0.1:6379", "error"},
		// The views' client: the first node.
		{"redlock", "redis://127.0.0.1:7000/0?addr=127.0.0.1:7001&addr=127.0.0.1:7002", "*redis.Client"},
		{"redlock", "redis://127.0.0.1:7000?addr=127.0.0.1:7001", "error"},                     // two nodes survive no loss
		{"redlock", "redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7000", "error"}, // one node twice
	}
	for _, tt := range tests {
		opts, err := parseRedisURL(tt.url, tt.mode)
		got := "error"
		if err == nil {
			rdb := opts.client()
			got = fmt.Sprintf("%T", rdb)
			_ = rdb.Close()
		}
		if got != tt.want {
			t.Errorf("parseRedisURL(%q, %s).client() = %s (%v), want %s", tt.url, tt.mode, got, err, tt.want)
		}
	}
}

// TestLoadConfigDebugAddrOnLoopback: the profiler may listen on any loopback address, by
// number or as localhost, or be off.
func TestLoadConfigDebugAddrOnLoopback(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"", "127.0.0.1:6060", "127.8.9.10:0", "[::1]:6060", "localhost:6060"} {
		got, _, err := loadConfig(nil, envOf(map[string]string{"STOCKSVC_DEBUG_ADDR": addr}), io.Discard)
		if err != nil || got.DebugAddr != addr {
			t.Errorf("STOCKSVC_DEBUG_ADDR=%q: DebugAddr %q, err %v; want it accepted", addr, got.DebugAddr, err)
		}
	}
}
