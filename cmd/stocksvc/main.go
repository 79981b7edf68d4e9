// Command stocksvc runs the flash-sale stock service: an HTTP API that sells products without
// ever selling more than there is, across any number of replicas.
//
// Usage:
//
//	stocksvc [flags] [serve]              serve the API (migrating the database first)
//	stocksvc [flags] migrate up           apply pending migrations
//	stocksvc [flags] migrate down N|all   roll back N migrations, or all of them (all asks first)
//	stocksvc [flags] migrate version      print the schema version
//	stocksvc version                      print the build's module version and VCS revision
//	stocksvc [flags] healthcheck          exit 0 if this host's replica is ready, 1 if not
//	stocksvc devkeys [-out DIR]           make a development key set for token mode
//	stocksvc token -sub CUSTOMER          print a customer token signed with that key
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
	"runtime/debug"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	std := stdio{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, terminal: isTerminal(os.Stdin)}
	if err := run(ctx, stop, os.Args[1:], os.Getenv, std); err != nil {
		if !errors.As(err, new(loggedError)) {
			fmt.Fprintln(os.Stderr, "stocksvc:", err)
		}
		os.Exit(1)
	}
}

// stdio is what run reads and writes besides its environment.
type stdio struct {
	stdin  io.Reader
	stdout io.Writer // what a command prints: migrate's result, the version
	stderr io.Writer // the log, usage, and questions asked before a destructive step
	// terminal says that stdin is a person at a terminal, who can be asked to confirm.
	terminal bool
}

// isTerminal reports whether f is a character device (a terminal), not a pipe or a file.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// loggedError is an error the service's log already holds, as its last line: printing it again
// in plain text would break a log read as JSON lines.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// commands lists what stocksvc can do, for -h.
const commands = `Usage: stocksvc [flags] [command]

Commands:
  serve                 serve the API, migrating the database first (the default)
  migrate up            apply pending migrations
  migrate down N|all    roll back N migrations, or all of them: all (or an N reaching
                        the first migration) asks on a terminal, and needs -force
                        otherwise; refused while orders accepted for later are pending
  migrate version       print the schema version
  version               print the module version and VCS revision of this build
  healthcheck           GET /readyz of the replica on this host (STOCKSVC_ADDR);
                        exit 0 when ready, 1 otherwise (for container health checks)
  devkeys [-out DIR]    make a development key set for token mode: an ES256 signing
                        key and the JWKS replicas verify with (for trying the service,
                        not for production; stocksvc devkeys -h)
  token -sub CUSTOMER   print a customer token signed with a devkeys key
                        (stocksvc token -h)

Flags (each also an environment variable; a flag wins):
`

// run is the whole program. stopSignals restores default signal handling once shutdown has
// begun, so a second Ctrl-C ends the process at once.
func run(ctx context.Context, stopSignals func(), args []string, getenv func(string) string, std stdio) error {
	// "version" reads no configuration: it must answer even where the configuration is broken.
	// Nor do the development tools, which have flags of their own.
	if len(args) > 0 {
		switch args[0] {
		case "version":
			return printVersion(args[1:], std.stdout)
		case "devkeys":
			return runDevKeys(args[1:], std)
		case "token":
			return runToken(args[1:], std)
		}
	}
	cfg, rest, err := loadConfig(args, getenv, std.stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	cfg.gogc = getenv("GOGC")
	// Every log line, and every error printed instead of logged, passes through the scrubber:
	// masking the configuration line is not enough when a driver quotes a connection string.
	secrets := newRedactor(cfg.secrets())
	log := newLogger(cfg, std.stderr, secrets)
	// go-redis logs through one process-wide logger; a process runs one service.
	redis.SetLogger(redisLogger{log})
	return secrets.scrubError(dispatch(ctx, stopSignals, cfg, rest, std, log))
}

// dispatch runs the command that rest names (serve when it names none).
func dispatch(ctx context.Context, stopSignals func(), cfg config, rest []string, std stdio, log *slog.Logger) error {
	command := "serve"
	if len(rest) > 0 {
		command, rest = rest[0], rest[1:]
	}
	switch {
	case command == "migrate":
		return runMigrate(ctx, cfg, rest, std, log)
	case command == "version":
		return printVersion(rest, std.stdout)
	case command == "devkeys":
		return runDevKeys(rest, std)
	case command == "token":
		return runToken(rest, std)
	case command == "healthcheck" && len(rest) == 0:
		return runHealthcheck(ctx, cfg.Addr, std.stdout)
	case len(rest) > 0:
		return fmt.Errorf("%s: unexpected arguments %q", command, rest)
	case command == "serve":
	default:
		return fmt.Errorf("unknown command %q (want serve, migrate, version, healthcheck, devkeys or token; see stocksvc -h)", command)
	}
	// Only serving verifies customers: migrate and healthcheck run without the token settings.
	if err := cfg.checkCustomerAuth(); err != nil {
		return err
	}
	gcPercent := tuneGC(cfg.gogc)
	log.DebugContext(ctx, "garbage collector", slog.Int("gc_percent", gcPercent))
	if err := serve(ctx, stopSignals, cfg, log); err != nil {
		log.ErrorContext(context.WithoutCancel(ctx), "exiting", slog.Any("error", err))
		return loggedError{err}
	}
	return nil
}

func printVersion(args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("version: unexpected arguments %q", args)
	}
	_, err := io.WriteString(stdout, versionText())
	return err
}

func newLogger(cfg config, w io.Writer, secrets redactor) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel)) // validated with the config
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(redactHandler{next: h, r: secrets})
}

// defaultGCPercent is the garbage collector's target when GOGC is not set. A replica's live heap
// is a few megabytes, and with Go's default (100) a crowd's requests set off a collection every
// few megabytes allocated, many times a second: with the stack scans and stack regrowth that
// follow, about a tenth of a replica's CPU when it answers sold-out orders from its cache
// (docs/benchmarks.md, section 4). 400 collects about a quarter as often for a few tens of
// megabytes more; the Compose file sets GOMEMLIMIT below the container's memory limit, so that
// the collector works harder rather than the container running out.
const defaultGCPercent = 400

// tuneGC sets the collector's target to defaultGCPercent unless GOGC (the runtime's own
// setting, gogc) says otherwise, and returns the target in force.
func tuneGC(gogc string) int {
	if gogc != "" {
		current := debug.SetGCPercent(-1)
		debug.SetGCPercent(current)
		return current
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}
