package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	"github.com/jackc/pgx/v5"

	"github.com/stocksvc/stocksvc/internal/async/asyncpg"
	"github.com/stocksvc/stocksvc/migrations"
)

const migrateUsage = "want up, down N|all [-force] or version"

// migrateArgs is a migrate command line, read before anything touches the database, so that a
// typo changes nothing.
type migrateArgs struct {
	action string // up, down or version
	steps  int    // for down: how many; -1 means all
	force  bool   // down all (or down N reaching the first migration) without asking
}

// parseMigrateArgs reads "up", "version" or "down N|all", with -force anywhere after "migrate".
func parseMigrateArgs(args []string) (migrateArgs, error) {
	var a migrateArgs
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error says it all
	fs.BoolVar(&a.force, "force", false, "roll back every migration without asking")
	var words []string
	for {
		// A negative number is a wrong step count, not an unknown flag: say so.
		if len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' {
			if _, err := strconv.Atoi(args[0]); err == nil {
				words, args = append(words, args[0]), args[1:]
				continue
			}
		}
		if err := fs.Parse(args); err != nil {
			return a, fmt.Errorf("migrate: %w (%s)", err, migrateUsage)
		}
		if fs.NArg() == 0 {
			break
		}
		words, args = append(words, fs.Arg(0)), fs.Args()[1:]
	}
	switch {
	case len(words) == 0:
		return a, fmt.Errorf("migrate: no action given (%s)", migrateUsage)
	case len(words) == 1 && (words[0] == "up" || words[0] == "version"):
	case words[0] == "down" && len(words) == 1:
		return a, errors.New("migrate down: say how many migrations to roll back: a number, or all " +
			"(all drops every table, orders included, and asks for confirmation or -force)")
	case words[0] == "down" && len(words) == 2 && words[1] == "all":
		a.steps = -1
	case words[0] == "down" && len(words) == 2:
		n, err := strconv.Atoi(words[1])
		if err != nil || n < 1 {
			return a, fmt.Errorf("migrate down: want a positive number of steps or all, got %q", words[1])
		}
		a.steps = n
	default:
		return a, fmt.Errorf("migrate: unknown arguments %q (%s)", words, migrateUsage)
	}
	if a.force && words[0] != "down" {
		return a, errors.New("migrate: -force applies to down only (down all, or down N reaching the first migration)")
	}
	a.action = words[0]
	return a, nil
}

// runMigrate implements "stocksvc migrate up|down N|all|version".
func runMigrate(ctx context.Context, cfg config, rawArgs []string, std stdio, log *slog.Logger) error {
	args, err := parseMigrateArgs(rawArgs)
	if err != nil {
		return err
	}

	// Only up creates the database: asking for the version, or to roll back, of a database
	// that does not exist must not leave an empty one behind.
	var createErr error
	if args.action == "up" {
		if createErr = ensureDatabase(ctx, cfg.DatabaseURL, log); createErr != nil && !errors.Is(createErr, errCannotCreate) {
			return fmt.Errorf("migrate up: %w", createErr)
		}
	}
	// Connect once first: the migrator's driver says less when it cannot, and leaves a
	// connection pool behind.
	if err := pingDatabase(ctx, cfg.DatabaseURL); err != nil {
		switch {
		case pgCode(err) == "3D000" && createErr != nil: // invalid_catalog_name
			return fmt.Errorf("migrate up: the database does not exist, and %w", createErr)
		case pgCode(err) == "3D000":
			return fmt.Errorf("migrate %s: the database does not exist yet (migrate up, or starting the service, creates it): %w", args.action, err)
		}
		return fmt.Errorf("migrate %s: %w", args.action, err)
	}
	mg, err := openMigrator(cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer mg.Close()

	switch args.action {
	case "version":
		desc, err := describeVersion(mg.m)
		if err != nil {
			return err
		}
		fmt.Fprintln(std.stdout, desc)
		return nil
	case "up":
		if err = mg.up(ctx); err == nil {
			err = migrations.RiverUp(ctx, mg.url)
		}
	case "down":
		err = rollBack(ctx, cfg, mg, args, std)
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate %s: %w", args.action, err)
	}
	desc, err := describeVersion(mg.m)
	if err != nil {
		return err
	}
	fmt.Fprintf(std.stdout, "migrate %s: done, %s\n", args.action, desc)
	return nil
}

// asyncOrdersMigration is the migration that creates async_orders, the line of orders
// accepted for later; rolling it back drops the table.
const asyncOrdersMigration = 4

// rollBack runs "migrate down N|all". Rolling back every migration, whether asked as all or
// as a count that reaches the first one, drops every table and needs confirmation; rolling
// back asyncOrdersMigration is refused while orders accepted for later are pending, since
// their buyers were told they would be decided.
func rollBack(ctx context.Context, cfg config, mg *migrator, args migrateArgs, std stdio) error {
	current, _, err := mg.m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return migrate.ErrNoChange
	}
	if err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	applied, err := mg.applied(current)
	if err != nil {
		return err
	}
	all := args.steps < 0 || args.steps >= applied
	target := -1 // the version left once the rollback is done; -1 for none
	if !all {
		if target, err = mg.versionBefore(current, args.steps); err != nil {
			return err
		}
	}
	// Refused before anyone is asked to confirm.
	if current >= asyncOrdersMigration && target < asyncOrdersMigration {
		if err := refusePendingOrders(ctx, cfg.DatabaseURL); err != nil {
			return err
		}
	}
	if all {
		if err := confirmDownAll(cfg.DatabaseURL, args, applied, std); err != nil {
			return err
		}
	}
	if args.steps >= 0 {
		// Asking for more steps than were applied rolls back what there is.
		return mg.down(ctx, min(args.steps, applied))
	}
	// River's queue first: its jobs name orders the service's tables hold.
	if err := migrations.RiverDown(ctx, mg.url); err != nil {
		return err
	}
	return mg.down(ctx, applied)
}

// errPendingOrders refuses a rollback that would drop orders accepted for later and not yet
// decided.
var errPendingOrders = errors.New("orders accepted for later are still pending")

// refusePendingOrders returns errPendingOrders (wrapped, with their number and what to do)
// when async_orders holds pending orders. It is a check before the rollback, not a lock: stop
// the replicas, which accept such orders, before rolling back.
func refusePendingOrders(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	n, err := asyncpg.CountPending(ctx, conn)
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: rolling back migration %d drops async_orders, with %d pending orders whose buyers were told they would be decided; "+
			"let a replica with STOCKSVC_ASYNC_WORKERS above 0 decide them first (stocksvc_async_orders_pending falls to 0), then stop the replicas and roll back",
			errPendingOrders, asyncOrdersMigration, n)
	}
	return nil
}

// errNotConfirmed is returned when "migrate down all" was not confirmed.
var errNotConfirmed = errors.New("not confirmed")

// confirmDownAll lets a rollback of every migration go ahead — "migrate down all", or "down N"
// with N at or above the applied count, which amounts to the same — with -force, or when a
// person at a terminal types the database's name. Anything else — a script, a pipe, CI — is
// refused, since the rollback drops every table and every order in it.
func confirmDownAll(databaseURL string, args migrateArgs, applied int, std stdio) error {
	if args.force {
		return nil
	}
	what := "down all"
	if args.steps >= 0 {
		what = fmt.Sprintf("down %d rolls back all %d applied migrations: it", args.steps, applied)
	}
	if !std.terminal {
		return fmt.Errorf("%s drops every table, orders included: run it at a terminal to confirm, or add -force: %w", what, errNotConfirmed)
	}
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	fmt.Fprintf(std.stderr, "This rolls back every migration of database %q on %s: every table is dropped, with every order in it.\n"+
		"Type the database name to go on: ", cfg.Database, cfg.Host)
	answer, err := bufio.NewReader(std.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read confirmation: %w", err)
	}
	if strings.TrimSpace(answer) != cfg.Database {
		return fmt.Errorf("the answer was not %q, nothing was rolled back: %w", cfg.Database, errNotConfirmed)
	}
	return nil
}

// describeVersion says which schema version the database is at.
func describeVersion(m *migrate.Migrate) (string, error) {
	v, dirty, err := m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return "no migrations applied", nil
	}
	if err != nil {
		return "", fmt.Errorf("migrate version: %w", err)
	}
	return fmt.Sprintf("version %d (dirty: %t)", v, dirty), nil
}
