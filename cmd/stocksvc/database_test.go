package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// testLogger returns a JSON logger writing to a sink the test can read.
func testLogger() (*slog.Logger, *logSink) {
	sink := newLogSink()
	return slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug})), sink
}

func TestEnsureDatabaseCreatesMissingDatabase(t *testing.T) {
	t.Parallel()
	db := newScratchDatabase(t)
	if db.exists(t) {
		t.Fatalf("database %s exists before the test", db.Name)
	}
	log, logs := testLogger()
	if err := ensureDatabase(t.Context(), db.URL, log); err != nil {
		t.Fatalf("ensureDatabase on a missing database: %v", err)
	}
	if !db.exists(t) {
		t.Fatalf("database %s was not created", db.Name)
	}
	rec, ok := logs.find("database created")
	if !ok || rec["database"] != db.Name {
		t.Errorf("database created line = %v, want one naming %s; logs:\n%s", rec, db.Name, logs)
	}

	// Again: the database exists now, so nothing happens.
	if err := ensureDatabase(t.Context(), db.URL, log); err != nil {
		t.Fatalf("ensureDatabase on an existing database: %v", err)
	}
	if n := logs.count("database created"); n != 1 {
		t.Errorf("database created logged %d times after two calls, want once", n)
	}
}

func TestEnsureDatabaseExistingIsNoOp(t *testing.T) {
	t.Parallel()
	log, logs := testLogger()
	if err := ensureDatabase(t.Context(), testenv.DatabaseURL(t), log); err != nil {
		t.Fatalf("ensureDatabase on an existing database: %v", err)
	}
	if s := logs.String(); s != "" {
		t.Errorf("ensureDatabase logged for an existing database:\n%s", s)
	}
}

// TestEnsureDatabaseConcurrentReplicas starts several replicas' worth of ensureDatabase at once
// on the same missing database: losing the creation race is not an error.
func TestEnsureDatabaseConcurrentReplicas(t *testing.T) {
	t.Parallel()
	db := newScratchDatabase(t)
	log, logs := testLogger()
	const replicas = 6
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() { errs[i] = ensureDatabase(t.Context(), db.URL, log) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: ensureDatabase = %v, want nil", i, err)
		}
	}
	if !db.exists(t) {
		t.Fatalf("database %s was not created", db.Name)
	}
	if n := logs.count("database created"); n != 1 {
		t.Errorf("database created logged %d times, want once; logs:\n%s", n, logs)
	}
}

func TestEnsureDatabaseEdgeCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		url     string
		wantErr string // empty: want nil
		wantLog string // empty: want no log at all
	}{
		// Nothing to create, so nothing is dialled: the server here does not exist.
		{"postgres database", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable", "", ""},
		{"unparsable URL", "postgres://postgres@127.0.0.1:port/x", "parse DATABASE_URL", ""},
		// An unreachable server is an error of its own (start-up waits and tries again),
		// not errCannotCreate: nothing answered.
		{"unreachable server", "postgres://postgres@127.0.0.1:1/stocksvc_nowhere?sslmode=disable&connect_timeout=1", "connect to postgres", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			log, logs := testLogger()
			err := ensureDatabase(t.Context(), tt.url, log)
			if errors.Is(err, errCannotCreate) {
				t.Errorf("ensureDatabase(%s) = %v, which says a server answered", tt.url, err)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("ensureDatabase(%s) = %v, want nil", tt.url, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("ensureDatabase(%s) = %v, want an error containing %q", tt.url, err, tt.wantErr)
			}
			if tt.wantLog == "" {
				if s := logs.String(); s != "" {
					t.Errorf("unexpected logs:\n%s", s)
				}
			} else if _, ok := logs.find(tt.wantLog); !ok {
				t.Errorf("no %q line; logs:\n%s", tt.wantLog, logs)
			}
		})
	}
}

// A multi-host DATABASE_URL (the service's on an HA Postgres) moves on from a host that takes
// the connection and never answers — a primary whose machine is gone, as a connection finds it
// — within the connection timeout, instead of waiting on it; and the pool's connections carry
// the TCP settings that drop such a connection once open.
func TestPoolMovesPastASilentHost(t *testing.T) {
	t.Parallel()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	dialled := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			dialled <- c // held open, never answered
		}
	}()
	u, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = silent.Addr().String() + "," + u.Host
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()

	// Without the timeout, pgx waits on the silent host for as long as the context lets it.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	pool, err := newPool(ctx, u.String(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("acquire past a silent host: %v", err)
	}
	defer conn.Release()
	took := time.Since(start)
	select {
	case c := <-dialled:
		defer c.Close()
	default:
		t.Fatal("the silent host was never dialled: the test proves nothing")
	}
	if took < pgConnectTimeout || took > pgConnectTimeout+5*time.Second {
		t.Errorf("connected after %v, want about the connection timeout (%v)", took, pgConnectTimeout)
	}

	raw, ok := conn.Conn().PgConn().Conn().(syscall.Conn)
	if !ok {
		t.Fatalf("the pool's connection is a %T, not a socket", conn.Conn().PgConn().Conn())
	}
	sc, err := raw.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var userTimeout, idle int
	var serr error
	if err := sc.Control(func(fd uintptr) {
		userTimeout, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
		if serr == nil {
			idle, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		}
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if userTimeout != int(pgUserTimeout.Milliseconds()) || idle != int(pgKeepAliveIdle.Seconds()) {
		t.Errorf("TCP_USER_TIMEOUT %d ms, TCP_KEEPIDLE %d s; want %v and %v", userTimeout, idle, pgUserTimeout, pgKeepAliveIdle)
	}
}
