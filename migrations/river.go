package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverLockID is the advisory lock that serialises River's migrations: golang-migrate locks
// its own, rivermigrate does not, and N replicas starting at once all migrate.
const riverLockID = 0x5707c5_0004

// RiverUp applies River's own migrations (its job table, the asynchronous orders' queue): they
// ship with the River version in go.mod and are applied with its migrator, which records them
// in river_migration, not with golang-migrate.
func RiverUp(ctx context.Context, databaseURL string) error {
	return withRiver(ctx, databaseURL, func(m *rivermigrate.Migrator[pgx.Tx]) error {
		if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return fmt.Errorf("migrate river up: %w", err)
		}
		return nil
	})
}

// RiverDown removes River's schema, every queued job with it.
func RiverDown(ctx context.Context, databaseURL string) error {
	return withRiver(ctx, databaseURL, func(m *rivermigrate.Migrator[pgx.Tx]) error {
		if _, err := m.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1}); err != nil {
			return fmt.Errorf("migrate river down: %w", err)
		}
		return nil
	})
}

// RiverVersion returns the newest River migration applied, 0 for none.
func RiverVersion(ctx context.Context, databaseURL string) (int, error) {
	version := 0
	err := withRiver(ctx, databaseURL, func(m *rivermigrate.Migrator[pgx.Tx]) error {
		applied, err := m.ExistingVersions(ctx)
		if err != nil {
			return fmt.Errorf("river migration versions: %w", err)
		}
		for _, a := range applied {
			version = max(version, a.Version)
		}
		return nil
	})
	return version, err
}

// RiverLatest is the newest River migration this build ships.
func RiverLatest() int {
	m, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		return 0
	}
	all := m.AllVersions()
	return all[len(all)-1].Version
}

func withRiver(ctx context.Context, databaseURL string, fn func(*rivermigrate.Migrator[pgx.Tx]) error) error {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect for river migrations: %w", err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect for river migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, riverLockID); err != nil {
		return fmt.Errorf("lock river migrations: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, riverLockID) }()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	return fn(m)
}
