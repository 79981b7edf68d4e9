package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/golang-migrate/migrate/v4"

	"github.com/stocksvc/stocksvc/migrations"
)

// runMigrate implements "stocksvc migrate up|down [N|all]|version".
func runMigrate(ctx context.Context, cfg config, args []string, stdout io.Writer, log *slog.Logger) error {
	if len(args) == 0 {
		return errors.New("migrate: want up, down [N|all] or version")
	}
	if err := ensureDatabase(ctx, cfg.DatabaseURL, log); err != nil {
		return err
	}
	m, err := migrations.New(cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer m.Close()

	switch {
	case args[0] == "up" && len(args) == 1:
		err = m.Up()
	case args[0] == "down" && len(args) <= 2:
		steps := 1
		if len(args) == 2 && args[1] == "all" {
			err = m.Down()
			break
		}
		if len(args) == 2 {
			if steps, err = strconv.Atoi(args[1]); err != nil || steps < 1 {
				return fmt.Errorf("migrate down: want a positive number of steps or all, got %q", args[1])
			}
		}
		err = m.Steps(-steps)
	case args[0] == "version" && len(args) == 1:
		v, dirty, verr := m.Version()
		if errors.Is(verr, migrate.ErrNilVersion) {
			fmt.Fprintln(stdout, "no migrations applied")
			return nil
		}
		if verr != nil {
			return fmt.Errorf("migrate version: %w", verr)
		}
		fmt.Fprintf(stdout, "version %d (dirty: %t)\n", v, dirty)
		return nil
	default:
		return fmt.Errorf("migrate: unknown arguments %q (want up, down [N|all] or version)", args)
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate %s: %w", args[0], err)
	}
	v, dirty, _ := m.Version()
	fmt.Fprintf(stdout, "migrate %s: done, version %d (dirty: %t)\n", args[0], v, dirty)
	return nil
}
