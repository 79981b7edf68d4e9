// Command stocksvc runs the flash-sale stock service: an HTTP API that sells products without
// ever selling more than there is, across any number of replicas.
//
// Usage:
//
//	stocksvc [flags]                  serve the API (migrating the database first)
//	stocksvc migrate up               apply pending migrations
//	stocksvc migrate down [N|all]     roll back N migrations (default 1) or all of them
//	stocksvc migrate version          print the schema version
//
// Every flag has an environment variable; run stocksvc -h for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, stop, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.As(err, new(loggedError)) {
			fmt.Fprintln(os.Stderr, "stocksvc:", err)
		}
		os.Exit(1)
	}
}

// loggedError is an error the service's log already holds, as its last line: printing it again
// in plain text would break a log read as JSON lines.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// run is the whole program. stopSignals restores default signal handling once shutdown has
// begun, so a second Ctrl-C ends the process at once.
func run(ctx context.Context, stopSignals func(), args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, rest, err := loadConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	// go-redis logs through one process-wide logger; a process runs one service.
	redis.SetLogger(redisLogger{log})
	if len(rest) > 0 && rest[0] == "migrate" {
		return runMigrate(ctx, cfg, rest[1:], stdout, log)
	}
	if len(rest) > 0 {
		return fmt.Errorf("unknown command %q (want no command, or migrate)", rest[0])
	}
	if err := serve(ctx, stopSignals, cfg, log); err != nil {
		log.ErrorContext(context.WithoutCancel(ctx), "exiting", slog.Any("error", err))
		return loggedError{err}
	}
	return nil
}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel)) // validated with the config
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
