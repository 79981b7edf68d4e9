package cluster

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// CreateDatabase creates database name on the server serverURL points at and returns the
// URL of the new database.
func CreateDatabase(ctx context.Context, serverURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect to postgres (%s): %w", Redact(serverURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return DatabaseURL(serverURL, name)
}

// DatabaseURL is the URL of database name on the server serverURL points at.
func DatabaseURL(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", Redact(serverURL), err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// DropDatabase drops database name, and ends its connections, on the server serverURL
// points at.
func DropDatabase(serverURL, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("could not drop %s: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("could not drop %s: %w", name, err)
	}
	return nil
}
