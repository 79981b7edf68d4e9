package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestIsPermanent(t *testing.T) {
	t.Parallel()
	pg := func(code string) error {
		return fmt.Errorf("connect: %w", &pgconn.PgError{Severity: "FATAL", Code: code, Message: "m"})
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"wrong password", pg("28P01"), true},
		{"unknown role or no pg_hba entry", pg("28000"), true},
		{"no CONNECT privilege", pg("42501"), true},
		{"marked permanent", fmt.Errorf("x: %w", permanent(errors.New("missing"))), true},
		{"server starting up", pg("57P03"), false},
		{"too many connections", pg("53300"), false},
		{"database missing (it may still be created)", pg("3D000"), false},
		{"connection refused", fmt.Errorf("dial: %w", refused), false},
		{"timeout", context.DeadlineExceeded, false},
		{"unknown host", &net.DNSError{Err: "no such host", Name: "postgres", IsNotFound: true}, false},
	}
	for _, tt := range tests {
		if got := isPermanent(tt.err); got != tt.want {
			t.Errorf("%s: isPermanent(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// script is a ping that fails with errs in turn, then succeeds, counting its calls.
type script struct {
	errs  []error
	calls atomic.Int32
}

func (s *script) ping(ctx context.Context) error {
	n := int(s.calls.Add(1)) - 1
	if n < len(s.errs) {
		return s.errs[n]
	}
	return nil
}

func noPause(int) time.Duration { return 0 }

// TestWaitForWarnsOncePerCause checks that a dependency failing the same way on every attempt
// is warned about once, and again only when the cause changes.
func TestWaitForWarnsOncePerCause(t *testing.T) {
	t.Parallel()
	refused, timeout := errors.New("dial: connection refused"), errors.New("dial: i/o timeout")
	s := &script{errs: []error{refused, refused, refused, timeout, timeout, refused}}
	log, logs := testLogger()
	if err := waitWith(context.Background(), "postgres", time.Minute, noPause, s.ping, log); err != nil {
		t.Fatalf("waitWith = %v, want success on the 7th attempt", err)
	}
	if n := s.calls.Load(); n != 7 {
		t.Errorf("ping called %d times, want 7", n)
	}
	var got []string
	for _, r := range logs.records {
		if r["msg"] == "waiting for dependency" {
			got = append(got, fmt.Sprintf("%v@%v", r["error"], r["attempt"]))
		}
	}
	want := []string{"dial: connection refused@1", "dial: i/o timeout@4", "dial: connection refused@6"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("warnings = %q, want %q", got, want)
	}
	if rec, ok := logs.find("dependency answered"); !ok || rec["attempts"] != float64(7) {
		t.Errorf("dependency answered line = %v, want one saying 7 attempts", rec)
	}
}

// TestWaitForStopsAtPermanentFailure checks that a failure waiting cannot fix ends the wait at
// the first attempt, with the cause.
func TestWaitForStopsAtPermanentFailure(t *testing.T) {
	t.Parallel()
	auth := &pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "shop"`}
	s := &script{errs: []error{fmt.Errorf("connect to postgres: %w", auth)}}
	log, logs := testLogger()
	err := waitWith(context.Background(), "postgres", time.Hour, noPause, s.ping, log)
	if !errors.As(err, new(*pgconn.PgError)) || !strings.Contains(err.Error(), "password authentication failed") || !strings.Contains(err.Error(), "not retried") {
		t.Fatalf("waitWith = %v, want the authentication failure, not retried", err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Errorf("ping called %d times, want 1", n)
	}
	if n := logs.count("waiting for dependency"); n != 0 {
		t.Errorf("%d waiting lines for a failure that is not waited out", n)
	}
}

// TestWaitForNamesLastCause checks that the final error names what went wrong, not the
// deadline that cut the last attempt short.
func TestWaitForNamesLastCause(t *testing.T) {
	t.Parallel()
	refused := errors.New("dial tcp 127.0.0.9:5432: connect: connection refused")
	calls := 0
	ping := func(ctx context.Context) error {
		calls++
		if calls == 1 {
			return refused
		}
		<-ctx.Done() // the dependency hangs until the overall deadline
		return ctx.Err()
	}
	log, _ := testLogger()
	err := waitWith(context.Background(), "postgres", 200*time.Millisecond, noPause, ping, log)
	if !errors.Is(err, refused) || strings.Contains(err.Error(), "deadline exceeded") {
		t.Errorf("waitWith = %v, want the refused connection as the cause", err)
	}
	if !strings.HasPrefix(err.Error(), "postgres not reachable within 200ms: ") {
		t.Errorf("waitWith = %v, want it to say what and how long", err)
	}

	// With nothing but timeouts, the timeout is the cause.
	hang := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	if err := waitWith(context.Background(), "redis", 100*time.Millisecond, noPause, hang, log); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waitWith on a hanging dependency = %v, want the deadline as the cause", err)
	}
}

// limitedRole creates a login role that may not create databases, dropped when the test ends.
func limitedRole(t *testing.T) (user, password string) {
	t.Helper()
	u, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatalf("parse test database URL: %v", err)
	}
	admin, err := pgx.Connect(context.Background(), u.String())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	user, password = "stocksvc_nocreate_"+randomHex(t, 6), "pw-"+randomHex(t, 8)
	if _, err := admin.Exec(context.Background(), `CREATE ROLE `+pgx.Identifier{user}.Sanitize()+` LOGIN NOCREATEDB PASSWORD '`+password+`'`); err != nil {
		t.Fatalf("create role: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+pgx.Identifier{user}.Sanitize()); err != nil {
			t.Errorf("drop role %s: %v", user, err)
		}
	})
	return user, password
}

// TestRunStartupPermanentFailures starts the service against dependencies that answer but can
// never serve it, with a start-up timeout far longer than the test allows: run must return the
// cause at once instead of waiting.
func TestRunStartupPermanentFailures(t *testing.T) {
	t.Parallel()
	server, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatalf("parse test database URL: %v", err)
	}
	on := func(user *url.Userinfo, database string) string {
		u := *server
		u.User, u.Path = user, "/"+database
		return u.String()
	}
	redisURL, err := url.Parse(testenv.RedisURL(t))
	if err != nil {
		t.Fatalf("parse test Redis URL: %v", err)
	}
	redisURL.Path = "/9999"

	tests := []struct {
		name  string
		extra func(t *testing.T) map[string]string
		want  string
	}{
		{"unknown role", func(t *testing.T) map[string]string {
			return map[string]string{"DATABASE_URL": on(url.UserPassword("no_such_role_"+randomHex(t, 4), "x"), "stocksvc")}
		}, "no_such_role_"},
		{"database missing and not creatable", func(t *testing.T) map[string]string {
			user, password := limitedRole(t)
			return map[string]string{"DATABASE_URL": on(url.UserPassword(user, password), "stocksvc_missing_"+randomHex(t, 4))}
		}, "the database does not exist, and stocksvc cannot create it: "},
		{"redis database number out of range", func(t *testing.T) map[string]string {
			return map[string]string{"REDIS_URL": redisURL.String()}
		}, "DB index is out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := serveEnv(t, testenv.KeyPrefix(t), tt.extra(t))
			env["STOCKSVC_STARTUP_TIMEOUT"] = "10m"
			in := launch(t, env)
			select {
			case <-in.done:
			case <-time.After(startTimeout):
				t.Fatalf("run still waiting after %v with a cause that waiting cannot fix; logs:\n%s", startTimeout, in.Logs)
			}
			if in.err == nil || !strings.Contains(in.err.Error(), tt.want) || !strings.Contains(in.err.Error(), "not retried") {
				t.Errorf("run = %v, want an error containing %q, not retried; logs:\n%s", in.err, tt.want, in.Logs)
			}
			if n := in.Logs.count("waiting for dependency"); n != 0 {
				t.Errorf("%d waiting lines for a failure that is not waited out; logs:\n%s", n, in.Logs)
			}
			if rec, ok := in.Logs.find("exiting"); !ok || !strings.Contains(fmt.Sprint(rec["error"]), tt.want) {
				t.Errorf("exiting line = %v, want the cause", rec)
			}
		})
	}
}
