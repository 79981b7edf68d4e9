package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/golang-migrate/migrate/v4"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stocksvc/stocksvc/migrations"
)

// runMigrate implements "stocksvc migrate up|down [N|all]|version".
func runMigrate(ctx context.Context, cfg config, args []string, stdout io.Writer, log *slog.Logger) error {
	const usage = "want up, down [N|all] or version"
	// Read the arguments before touching the database, so a typo changes nothing.
	steps := 0 // for down: how many; -1 means all
	switch {
	case len(args) == 1 && (args[0] == "up" || args[0] == "version"):
	case len(args) >= 1 && args[0] == "down" && len(args) <= 2:
		steps = 1
		if len(args) == 2 && args[1] == "all" {
			steps = -1
		} else if len(args) == 2 {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return fmt.Errorf("migrate down: want a positive number of steps or all, got %q", args[1])
			}
			steps = n
		}
	default:
		return fmt.Errorf("migrate: unknown arguments %q (%s)", args, usage)
	}

	// Only up creates the database: asking for the version, or to roll back, of a database
	// that does not exist must not leave an empty one behind.
	if args[0] == "up" {
		if err := ensureDatabase(ctx, cfg.DatabaseURL, log); err != nil {
			return err
		}
	}
	// Connect once first: the migrator's driver says less when it cannot, and leaves a
	// connection pool behind.
	if err := pingDatabase(ctx, cfg.DatabaseURL); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name
			return fmt.Errorf("migrate %s: the database does not exist yet (migrate up, or starting the service, creates it): %w", args[0], err)
		}
		return fmt.Errorf("migrate %s: %w", args[0], err)
	}
	m, err := migrations.New(migratorURL(cfg.DatabaseURL))
	if err != nil {
		return err
	}
	defer m.Close()

	switch args[0] {
	case "version":
		desc, err := describeVersion(m)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, desc)
		return nil
	case "up":
		err = m.Up()
	case "down":
		if _, _, verr := m.Version(); errors.Is(verr, migrate.ErrNilVersion) {
			err = migrate.ErrNoChange
		} else if steps < 0 {
			err = m.Down()
		} else {
			// Asking for more steps than were applied rolls back what there is.
			if err = m.Steps(-steps); errors.As(err, new(migrate.ErrShortLimit)) {
				err = nil
			}
		}
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate %s: %w", args[0], err)
	}
	desc, err := describeVersion(m)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrate %s: done, %s\n", args[0], desc)
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
