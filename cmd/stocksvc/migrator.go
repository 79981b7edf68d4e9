package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/migrations"
)

// migrationLockTimeout is the lock_timeout of the migrations' connections, unless DATABASE_URL
// sets one. A migration that alters a table waits for every transaction on it to end, and
// every query on the table then queues behind that wait: unbounded, one long transaction of a
// running replica would stall the whole service behind a deploy. The advisory locks that let
// one replica migrate at a time are bounded by it too, so that a replica waiting for another
// notices its start-up deadline and its stop signal.
const migrationLockTimeout = 5 * time.Second

// migrationURL is the URL the migrators connect with: DATABASE_URL as a URL (see migratorURL),
// with lock_timeout added unless it sets one. The parameter is appended rather than the URL
// rebuilt, so that the rest of it, its password included, stays as written.
func migrationURL(databaseURL string) string {
	raw := migratorURL(databaseURL)
	u, err := url.Parse(raw)
	if err != nil {
		return raw // the migrator says what is wrong with it
	}
	q := u.Query()
	if q.Has("lock_timeout") || strings.Contains(q.Get("options"), "lock_timeout") {
		return raw
	}
	param := "lock_timeout=" + url.QueryEscape(migrationLockTimeout.String())
	body, fragment, hasFragment := strings.Cut(raw, "#")
	switch {
	case u.RawQuery == "" && !strings.HasSuffix(body, "?"):
		body += "?" + param
	case strings.HasSuffix(body, "?") || strings.HasSuffix(body, "&"):
		body += param
	default:
		body += "&" + param
	}
	if hasFragment {
		body += "#" + fragment
	}
	return body
}

// migrator runs the service's migrations (golang-migrate) so that they honour a context: when
// it ends, no further migration begins, and the one in progress finishes or fails within its
// lock waits (migrationLockTimeout each). A migration is never cut short by the client: a
// golang-migrate migration stopped half way leaves the schema marked dirty, for a person to
// repair.
type migrator struct {
	m   *migrate.Migrate
	src source.Driver // the same migrations, to find the versions around one
	url string        // migrationURL, for River's migrator too
}

// openMigrator connects a migrator to the database at databaseURL. Callers must Close it.
func openMigrator(databaseURL string) (*migrator, error) {
	u := migrationURL(databaseURL)
	m, err := migrations.New(u)
	if err != nil {
		return nil, err
	}
	src, err := iofs.New(migrations.Files, ".")
	if err != nil {
		_, _ = m.Close()
		return nil, fmt.Errorf("open embedded migrations: %w", err)
	}
	// golang-migrate's own bound on the advisory lock, for a DATABASE_URL that turns
	// lock_timeout off; Postgres's, shorter, answers first otherwise.
	m.LockTimeout = 3 * migrationLockTimeout
	return &migrator{m: m, src: src, url: u}, nil
}

// Close closes the migrator's connections.
func (mg *migrator) Close() {
	_, _ = mg.m.Close()
	_ = mg.src.Close()
}

// up applies every pending migration (see step).
func (mg *migrator) up(ctx context.Context) error {
	n, err := mg.pending()
	if err != nil {
		return err
	}
	return mg.step(ctx, true, n)
}

// down rolls back n migrations (see step).
func (mg *migrator) down(ctx context.Context, n int) error {
	return mg.step(ctx, false, n)
}

// step applies (up) or rolls back n migrations, one golang-migrate call each, and asks ctx
// before each: once it has ended, no further migration begins. Having none to run is
// migrate.ErrNoChange. One call per migration, rather than golang-migrate's Up or Down with a
// GracefulStop: those read up to ten migrations ahead, each into a pipe that only running it
// drains, so a run stopped early leaves their readers blocked for the life of the process.
//
// A migration that Postgres refused (a lock wait that ran out, say) was rolled back whole,
// since each file runs as one implicit transaction; golang-migrate marks its version dirty all
// the same, and step sets the version back to where it was before it, so that the next
// attempt can begin. The error then says so.
func (mg *migrator) step(ctx context.Context, up bool, n int) error {
	if n == 0 {
		return migrate.ErrNoChange
	}
	dir := 1
	if !up {
		dir = -1
	}
	for range n {
		if ctx.Err() != nil {
			return fmt.Errorf("stopped before the migrations were all applied: %w", context.Cause(ctx))
		}
		err := mg.m.Steps(dir)
		if up && errors.Is(err, os.ErrNotExist) {
			// Nothing after the database's version: another replica applied the rest between
			// the count and this step's lock. Done, if the version is one this binary has.
			if left, perr := mg.pending(); perr == nil && left == 0 {
				return nil
			}
		}
		if err != nil {
			return mg.undoRefused(up, err)
		}
	}
	return nil
}

// pending counts the migrations not yet applied. A database at a version this binary does not
// have (migrated by a newer one) is an error.
func (mg *migrator) pending() (int, error) {
	current, _, err := mg.m.Version()
	nothing := errors.Is(err, migrate.ErrNilVersion)
	if err != nil && !nothing {
		return 0, fmt.Errorf("read the schema version: %w", err)
	}
	n, known := 0, nothing
	v, err := mg.src.First()
	for ; err == nil; v, err = mg.src.Next(v) {
		switch {
		case !nothing && v == current:
			known = true
		case nothing || v > current:
			n++
		}
	}
	if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("list migrations: %w", err)
	}
	if !known {
		return 0, fmt.Errorf("the database is at version %d, which this binary does not have: a newer one migrated it", current)
	}
	return n, nil
}

// undoRefused cleans up after err, a failed migration run: golang-migrate's own error, which
// quotes the migration's whole SQL, becomes its message and cause; and when Postgres refused
// the migration, the version marked dirty is set back to the last one applied.
func (mg *migrator) undoRefused(up bool, err error) error {
	var dbErr database.Error
	if !errors.As(err, &dbErr) {
		return migrationError(err)
	}
	err = migrationError(err)
	if !strings.HasPrefix(dbErr.Err, "migration failed") || !errors.As(dbErr.OrigErr, new(*pgconn.PgError)) {
		return err // not known to have been rolled back: leave the mark for a person
	}
	v, dirty, verr := mg.m.Version()
	var back int
	switch {
	case up && verr == nil && dirty:
		// Dirty at the version being applied: back to the one before it, or to none.
		prev, perr := mg.src.Prev(v)
		switch {
		case perr == nil:
			back = int(prev)
		case errors.Is(perr, os.ErrNotExist):
			back = -1
		default:
			return errors.Join(err, fmt.Errorf("find the migration before %d: %w", v, perr))
		}
	case !up && verr == nil && dirty:
		// Dirty at the version being rolled back to: forward to the one being rolled back.
		next, nerr := mg.src.Next(v)
		if nerr != nil {
			return errors.Join(err, fmt.Errorf("find the migration after %d: %w", v, nerr))
		}
		back = int(next)
	case !up && errors.Is(verr, migrate.ErrNilVersion):
		// Rolling back the first migration marks "none" dirty, which Version cannot show.
		first, ferr := mg.src.First()
		if ferr != nil {
			return errors.Join(err, fmt.Errorf("find the first migration: %w", ferr))
		}
		back = int(first)
	default:
		return err
	}
	if ferr := mg.m.Force(back); ferr != nil {
		return errors.Join(err, fmt.Errorf("set the version back to %d after the refused migration: %w", back, migrationError(ferr)))
	}
	return fmt.Errorf("%w (Postgres refused it and rolled it back: the schema is still at version %d)", err, back)
}

// migrationError turns golang-migrate's database.Error, whose text quotes the whole migration,
// into its message and its cause, so that errors.As finds the Postgres error.
func migrationError(err error) error {
	var dbErr database.Error
	if errors.As(err, &dbErr) {
		return wrapDatabaseError(dbErr)
	}
	var dbErrPtr *database.Error
	if errors.As(err, &dbErrPtr) {
		return wrapDatabaseError(*dbErrPtr)
	}
	return err
}

func wrapDatabaseError(e database.Error) error {
	msg := e.Err
	if msg == "" {
		msg = "migration statement failed"
	}
	if e.OrigErr == nil {
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %w", msg, e.OrigErr)
}

// applied counts the migrations applied up to and including version current.
func (mg *migrator) applied(current uint) (int, error) {
	n := 0
	v, err := mg.src.First()
	for err == nil && v <= current {
		n++
		v, err = mg.src.Next(v)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("list migrations: %w", err)
	}
	return n, nil
}

// versionBefore is the version left after rolling back steps migrations from current, which
// has at least that many applied.
func (mg *migrator) versionBefore(current uint, steps int) (int, error) {
	v := current
	for range steps {
		prev, err := mg.src.Prev(v)
		if errors.Is(err, os.ErrNotExist) {
			return -1, nil
		}
		if err != nil {
			return 0, fmt.Errorf("find the migration before %d: %w", v, err)
		}
		v = prev
	}
	return int(v), nil
}

// lockTimedOut reports whether err is a lock wait that ran out: Postgres's lock_timeout
// (55P03), or golang-migrate's own bound on its advisory lock.
func lockTimedOut(err error) bool {
	return pgCode(migrationError(err)) == "55P03" || errors.Is(err, migrate.ErrLockTimeout)
}

// migrateUp applies every pending migration, the service's and then River's, within ctx.
func migrateUp(ctx context.Context, databaseURL string) error {
	mg, err := openMigrator(databaseURL)
	if err != nil {
		return err
	}
	defer mg.Close()
	if err := mg.up(ctx); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate up: %w", err)
	}
	return migrations.RiverUp(ctx, mg.url)
}

// migrateOnStart migrates before the replica serves, within ctx: the start-up deadline and the
// stop signal. A lock wait that ran out — another replica migrating, a long transaction on a
// table a migration alters — is tried again after a pause, until ctx ends; any other failure
// ends start-up.
func migrateOnStart(ctx context.Context, databaseURL string, log *slog.Logger) error {
	for attempt := 1; ; attempt++ {
		err := migrateUp(ctx, databaseURL)
		if err == nil || ctx.Err() != nil || !lockTimedOut(err) {
			return err
		}
		log.WarnContext(ctx, "migrations waited too long for a lock; trying again", slog.Int("attempt", attempt), slog.Any("error", err))
		if clock.Sleep(ctx, startupPause(attempt)) != nil {
			return err
		}
	}
}
