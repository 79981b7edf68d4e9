// Package migrations embeds the SQL schema of stocksvc and applies it with golang-migrate.
// The service and the integration tests use the same files, so tests always run against the
// schema that ships.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4"
	// The pgx/v5 driver registers the "pgx5" URL scheme and takes a Postgres advisory lock
	// around every migration, which makes it safe for N replicas to migrate at once.
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

// Files holds the migration SQL files.
//
//go:embed *.sql
var Files embed.FS

// New returns a migrator for the database at databaseURL (a postgres:// or postgresql:// URL).
// Callers must Close it.
func New(databaseURL string) (*migrate.Migrate, error) {
	src, err := iofs.New(Files, ".")
	if err != nil {
		return nil, fmt.Errorf("open embedded migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, driverURL(databaseURL))
	if err != nil {
		return nil, fmt.Errorf("connect migrator: %w", err)
	}
	return m, nil
}

// Up applies every pending migration, the service's and then River's. Having nothing to apply
// is success.
func Up(databaseURL string) error {
	m, err := New(databaseURL)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate up: %w", err)
	}
	return RiverUp(context.Background(), databaseURL)
}

// driverURL rewrites the scheme to the one golang-migrate's pgx/v5 driver registers.
func driverURL(databaseURL string) string {
	for _, prefix := range []string{"postgresql://", "postgres://"} {
		if len(databaseURL) >= len(prefix) && databaseURL[:len(prefix)] == prefix {
			return "pgx5://" + databaseURL[len(prefix):]
		}
	}
	return databaseURL
}
