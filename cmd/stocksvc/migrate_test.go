package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stocksvc/stocksvc/internal/testenv"
	"github.com/stocksvc/stocksvc/migrations"
)

// migrateCmd runs "stocksvc migrate args..." against databaseURL, as a script would (no
// terminal), and returns its output.
func migrateCmd(t *testing.T, databaseURL string, args ...string) (string, error) {
	t.Helper()
	var stdout bytes.Buffer
	err := migrateWith(t, databaseURL, stdio{stdout: &stdout}, args...)
	return stdout.String(), err
}

// migrateWith runs "stocksvc migrate args..." with the streams of std; the log goes to a sink
// that checks it is JSON whatever std.stderr is.
func migrateWith(t *testing.T, databaseURL string, std stdio, args ...string) error {
	t.Helper()
	logs := newLogSink()
	if std.stderr == nil {
		std.stderr = logs
	}
	err := run(t.Context(), func() {}, append([]string{"migrate"}, args...),
		envOf(map[string]string{"DATABASE_URL": databaseURL}), std)
	if len(logs.bad) > 0 {
		t.Errorf("migrate %q wrote log lines that are not JSON: %q", args, logs.bad)
	}
	return err
}

// mustMigrate runs migrateCmd and checks that it succeeds with the given output.
func mustMigrate(t *testing.T, databaseURL, want string, args ...string) {
	t.Helper()
	got, err := migrateCmd(t, databaseURL, args...)
	if err != nil {
		t.Fatalf("migrate %s: %v", strings.Join(args, " "), err)
	}
	if got != want {
		t.Errorf("migrate %s printed %q, want %q", strings.Join(args, " "), got, want)
	}
}

// hasTable reports whether the database at databaseURL holds the table.
func hasTable(t *testing.T, databaseURL, table string) bool {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), databaseURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, "public."+table).Scan(&ok); err != nil {
		t.Fatalf("look for table %s: %v", table, err)
	}
	return ok
}

// hasSchema reports whether the database at databaseURL holds the products table.
func hasSchema(t *testing.T, databaseURL string) bool {
	t.Helper()
	return hasTable(t, databaseURL, "products")
}

// The service's migration versions, ascending, as embedded: the tests count steps and name
// versions from them, so that a new migration changes none of them.
var (
	versions    = migrationVersions()
	applied     = len(versions)
	noneApplied = "no migrations applied\n"
	atVersion1  = "version 1 (dirty: false)\n"
	atLatest    = fmt.Sprintf("version %d (dirty: false)\n", versions[applied-1])
	upDone      = "migrate up: done, " + atLatest
)

// migrationVersions reads the versions of migrations.Files' up migrations.
func migrationVersions() []uint {
	entries, err := fs.Glob(migrations.Files, "*.up.sql")
	if err != nil || len(entries) == 0 {
		panic(fmt.Sprintf("no embedded migrations: %v", err))
	}
	var vs []uint
	for _, name := range entries {
		v, err := strconv.ParseUint(name[:strings.IndexByte(name, '_')], 10, 64)
		if err != nil {
			panic(fmt.Sprintf("migration %s: %v", name, err))
		}
		vs = append(vs, uint(v))
	}
	slices.Sort(vs)
	return vs
}

// downTo is what migrate down prints when it leaves the schema at version v.
func downTo(v uint) string { return fmt.Sprintf("migrate down: done, version %d (dirty: false)\n", v) }

// stepsTo is how many migrations down N must roll back for version v to be the last undone.
func stepsTo(v uint) int { return applied - slices.Index(versions, v) }

func TestMigrateUpVersionDown(t *testing.T) {
	t.Parallel()
	db := newScratchDatabase(t)
	db.create(t)

	mustMigrate(t, db.URL, noneApplied, "version")
	if hasSchema(t, db.URL) {
		t.Fatalf("a new empty database already has the schema")
	}

	mustMigrate(t, db.URL, upDone, "up")
	if !hasSchema(t, db.URL) {
		t.Fatalf("no products table after migrate up")
	}
	mustMigrate(t, db.URL, atLatest, "version")
	// Nothing left to apply is success, not an error.
	mustMigrate(t, db.URL, upDone, "up")

	if !hasTable(t, db.URL, "river_job") {
		t.Errorf("no river_job table after migrate up: River's migrations were not applied")
	}

	// One step back at a time.
	for i := applied - 2; i >= 0; i-- {
		mustMigrate(t, db.URL, downTo(versions[i]), "down", "1")
	}
	mustMigrate(t, db.URL, atVersion1, "version")
	if !hasSchema(t, db.URL) {
		t.Errorf("products table gone after migrate down 1 from version 2")
	}
	// The last one is every one left: confirmed as down all is.
	if _, err := migrateCmd(t, db.URL, "down", "1"); !errors.Is(err, errNotConfirmed) {
		t.Errorf("migrate down 1 at version 1 from a script = %v, want it refused as not confirmed", err)
	}
	mustMigrate(t, db.URL, "migrate down: done, no migrations applied\n", "down", "1", "-force")
	if hasSchema(t, db.URL) {
		t.Errorf("products table still there after migrate down 1 from version 1")
	}
	mustMigrate(t, db.URL, noneApplied, "version")

	// down N and down all. More steps than were applied rolls back what there is, and asks
	// for the same confirmation as down all (TestMigrateDownEverythingConfirmation).
	for _, down := range [][]string{{"down", strconv.Itoa(applied), "-force"}, {"down", "all", "-force"}, {"down", "-force", "all"}, {"down", "-force", strconv.Itoa(applied + 1)}} {
		mustMigrate(t, db.URL, upDone, "up")
		mustMigrate(t, db.URL, "migrate down: done, no migrations applied\n", down...)
		mustMigrate(t, db.URL, noneApplied, "version")
		if hasSchema(t, db.URL) {
			t.Errorf("products table still there after migrate %s", strings.Join(down, " "))
		}
		// River's queue goes with down all only: down N counts the service's migrations.
		if all := slices.Contains(down, "all"); hasTable(t, db.URL, "river_job") == all {
			t.Errorf("after migrate %s: river_job table there = %t, want %t", strings.Join(down, " "), !all, !all)
		}
	}
	// Rolling back when nothing is applied is no change, hence success.
	mustMigrate(t, db.URL, "migrate down: done, no migrations applied\n", "down", "all")
	mustMigrate(t, db.URL, "migrate down: done, no migrations applied\n", "down", "1")
}

// TestMigrateCreatesMissingDatabase checks that "migrate up" creates the database first.
func TestMigrateCreatesMissingDatabase(t *testing.T) {
	t.Parallel()
	db := newScratchDatabase(t)
	mustMigrate(t, db.URL, upDone, "up")
	if !db.exists(t) {
		t.Fatalf("database %s not created", db.Name)
	}
	mustMigrate(t, db.URL, atLatest, "version")
}

// TestMigrateReadsDoNotCreateDatabase: only "migrate up" creates a missing database; "version"
// and "down" say it does not exist and leave nothing behind.
func TestMigrateReadsDoNotCreateDatabase(t *testing.T) {
	t.Parallel()
	db := newScratchDatabase(t)
	for _, args := range [][]string{{"version"}, {"down", "1"}, {"down", "all"}} {
		out, err := migrateCmd(t, db.URL, args...)
		if err == nil || !strings.Contains(err.Error(), "does not exist yet") {
			t.Errorf("migrate %q on a missing database = %v, want an error saying it does not exist yet", args, err)
		}
		if out != "" {
			t.Errorf("migrate %q printed %q, want nothing", args, out)
		}
		if db.exists(t) {
			t.Fatalf("migrate %q created database %s", args, db.Name)
		}
	}
}

func TestMigrateBadArguments(t *testing.T) {
	t.Parallel()
	db := newScratchDatabase(t)
	db.create(t)
	tests := []struct {
		args []string
		want string
	}{
		{nil, "migrate: no action given (want up, down N|all [-force] or version)"},
		{[]string{"down"}, "migrate down: say how many migrations to roll back: a number, or all"},
		{[]string{"up", "-force"}, "-force applies to down only"},
		{[]string{"version", "-force"}, "-force applies to down only"},
		{[]string{"down", "all", "-yes"}, "flag provided but not defined: -yes"},
		{[]string{"sideways"}, "unknown arguments"},
		{[]string{"UP"}, "unknown arguments"},
		{[]string{"up", "now"}, "unknown arguments"},
		{[]string{"version", "1"}, "unknown arguments"},
		{[]string{"down", "1", "2"}, "unknown arguments"},
		{[]string{"down", "0"}, `positive number of steps or all, got "0"`},
		{[]string{"down", "-1"}, `positive number of steps or all, got "-1"`},
		{[]string{"down", "x"}, `positive number of steps or all, got "x"`},
		{[]string{"down", "ALL"}, `positive number of steps or all, got "ALL"`},
	}
	t.Run("group", func(t *testing.T) { // returns once its parallel subtests are done
		for _, tt := range tests {
			t.Run("migrate_"+strings.Join(tt.args, "_"), func(t *testing.T) {
				t.Parallel()
				out, err := migrateCmd(t, db.URL, tt.args...)
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("migrate %q = %v, want an error containing %q", tt.args, err, tt.want)
				}
				if out != "" {
					t.Errorf("migrate %q printed %q, want nothing", tt.args, out)
				}
			})
		}
	})
	if hasSchema(t, db.URL) {
		t.Errorf("bad arguments changed the schema")
	}
	mustMigrate(t, db.URL, noneApplied, "version")
}

// TestMigrateKeywordValueSettings checks that a DATABASE_URL in pgx's key=value form, which the
// migrator cannot read as written, migrates like the URL form.
func TestMigrateKeywordValueSettings(t *testing.T) {
	t.Parallel()
	db := newScratchDatabase(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	password, _ := u.User.Password()
	kv := fmt.Sprintf("host=%s port=%s user=%s password='%s' dbname=%s sslmode=disable", u.Hostname(), u.Port(), u.User.Username(), password, db.Name)
	mustMigrate(t, kv, upDone, "up")
	if !hasSchema(t, db.URL) {
		t.Fatalf("no products table after migrate up with key=value settings")
	}
	mustMigrate(t, kv, atLatest, "version")
}

// TestMigrateDownAllConfirmation checks who may roll everything back: a script without -force
// may not, a person at a terminal may by typing the database's name, and nothing else goes.
func TestMigrateDownAllConfirmation(t *testing.T) {
	t.Parallel()
	db := newScratchDatabase(t)
	db.create(t)
	mustMigrate(t, db.URL, upDone, "up")

	tests := []struct {
		name     string
		terminal bool
		answer   string
	}{
		{"script", false, db.Name + "\n"}, // an answer on a pipe counts for nothing
		{"terminal, wrong answer", true, "yes\n"},
		{"terminal, no answer", true, ""},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		err := migrateWith(t, db.URL, stdio{stdin: strings.NewReader(tt.answer), stdout: &stdout, stderr: &stderr, terminal: tt.terminal}, "down", "all")
		if !errors.Is(err, errNotConfirmed) {
			t.Errorf("%s: migrate down all = %v, want it refused as not confirmed", tt.name, err)
		}
		if !hasSchema(t, db.URL) {
			t.Fatalf("%s: the schema was rolled back without confirmation", tt.name)
		}
		if stdout.Len() != 0 {
			t.Errorf("%s: printed %q, want nothing", tt.name, stdout.String())
		}
		if asked := strings.Contains(stderr.String(), "Type the database name to go on"); asked != tt.terminal {
			t.Errorf("%s: asked = %v, want %v; stderr:\n%s", tt.name, asked, tt.terminal, stderr.String())
		}
	}
	if err := migrateWith(t, db.URL, stdio{stdout: &bytes.Buffer{}}, "down", "all"); err == nil || !strings.Contains(err.Error(), "run it at a terminal to confirm, or add -force") {
		t.Errorf("migrate down all from a script = %v, want the way to confirm named", err)
	}

	var stdout, stderr bytes.Buffer
	err := migrateWith(t, db.URL, stdio{stdin: strings.NewReader(" " + db.Name + " \n"), stdout: &stdout, stderr: &stderr, terminal: true}, "down", "all")
	if err != nil {
		t.Fatalf("migrate down all confirmed at a terminal: %v", err)
	}
	if got, want := stdout.String(), "migrate down: done, no migrations applied\n"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
	if !strings.Contains(stderr.String(), `rolls back every migration of database "`+db.Name+`"`) {
		t.Errorf("the question does not name the database:\n%s", stderr.String())
	}
	if hasSchema(t, db.URL) {
		t.Errorf("products table still there after a confirmed migrate down all")
	}
}

// TestMigrateDownEverythingConfirmation: "down N" with N at or above the number of applied
// migrations rolls back everything, as down all does, and needs the same confirmation.
func TestMigrateDownEverythingConfirmation(t *testing.T) {
	t.Parallel()
	db := newScratchDatabase(t)
	db.create(t)
	mustMigrate(t, db.URL, upDone, "up")

	all := strconv.Itoa(applied)
	for _, n := range []string{all, strconv.Itoa(applied + 4)} {
		var stdout, stderr bytes.Buffer
		err := migrateWith(t, db.URL, stdio{stdout: &stdout, stderr: &stderr}, "down", n)
		if !errors.Is(err, errNotConfirmed) || !strings.Contains(err.Error(), "rolls back all "+all+" applied migrations") {
			t.Errorf("migrate down %s from a script = %v, want it refused as not confirmed, saying it rolls back all %s", n, err, all)
		}
		err = migrateWith(t, db.URL, stdio{stdin: strings.NewReader("yes\n"), stdout: &stdout, stderr: &stderr, terminal: true}, "down", n)
		if !errors.Is(err, errNotConfirmed) {
			t.Errorf("migrate down %s at a terminal, wrong answer = %v, want it refused", n, err)
		}
		if !hasSchema(t, db.URL) {
			t.Fatalf("migrate down %s rolled back everything without confirmation", n)
		}
	}
	// Fewer than all: no question.
	mustMigrate(t, db.URL, downTo(versions[applied-2]), "down", "1")
	mustMigrate(t, db.URL, upDone, "up")

	var stdout, stderr bytes.Buffer
	err := migrateWith(t, db.URL, stdio{stdin: strings.NewReader(db.Name + "\n"), stdout: &stdout, stderr: &stderr, terminal: true}, "down", all)
	if err != nil {
		t.Fatalf("migrate down 5 confirmed at a terminal: %v", err)
	}
	if !strings.Contains(stderr.String(), "Type the database name to go on") {
		t.Errorf("migrate down 5 did not ask; stderr:\n%s", stderr.String())
	}
	if hasSchema(t, db.URL) {
		t.Errorf("products table still there after a confirmed migrate down 5")
	}
	mustMigrate(t, db.URL, upDone, "up")
	mustMigrate(t, db.URL, "migrate down: done, no migrations applied\n", "down", all, "-force")
}

// TestMigrateDownRefusesPendingOrders: rolling back the migration that holds the orders
// accepted for later (down N reaching it, or down all, even forced) is refused while one of
// them is pending, and goes ahead once none is.
func TestMigrateDownRefusesPendingOrders(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var order string
	err = conn.QueryRow(t.Context(), `
		WITH p AS (INSERT INTO products (sku, name, stock, initial_stock) VALUES ('pending', 'x', 5, 5) RETURNING id)
		INSERT INTO async_orders (id, customer_id, product_ids, quantities, product_id)
		SELECT gen_random_uuid(), 'c', ARRAY[p.id], ARRAY[1::bigint], p.id FROM p RETURNING id::text`).Scan(&order)
	if err != nil {
		t.Fatalf("accept an order: %v", err)
	}
	reach := stepsTo(asyncOrdersMigration) // down this many rolls back the migration of async_orders
	for _, args := range [][]string{{"down", strconv.Itoa(reach)}, {"down", strconv.Itoa(reach + 2)}, {"down", "all", "-force"}, {"down", strconv.Itoa(applied + 4), "-force"}} {
		out, err := migrateCmd(t, url, args...)
		if !errors.Is(err, errPendingOrders) || !strings.Contains(err.Error(), "with 1 pending orders") {
			t.Errorf("migrate %q with a pending order = %v, want errPendingOrders naming one order", args, err)
		}
		if out != "" {
			t.Errorf("migrate %q printed %q, want nothing", args, out)
		}
		if !hasTable(t, url, "async_orders") {
			t.Fatalf("migrate %q dropped async_orders with a pending order in it", args)
		}
	}
	// Rollbacks that leave the table are not concerned.
	mustMigrate(t, url, downTo(versions[applied-2]), "down", "1")
	mustMigrate(t, url, upDone, "up")

	if _, err := conn.Exec(t.Context(), `UPDATE async_orders SET status = 'rejected', reason = 'sold_out', decided_at = now() WHERE id = $1`, order); err != nil {
		t.Fatalf("decide the order: %v", err)
	}
	mustMigrate(t, url, downTo(versions[slices.Index(versions, asyncOrdersMigration)-1]), "down", strconv.Itoa(reach))
}

// TestMigrateUpConcurrently: replicas started together migrate the same empty database at
// once; each one's migrations run one step at a time, so a replica whose count of pending
// migrations another has since applied must finish, not fail on "no next migration".
func TestMigrateUpConcurrently(t *testing.T) {
	t.Parallel()
	db := newScratchDatabase(t)
	db.create(t)
	const replicas = 4
	errs := make(chan error, replicas)
	for range replicas {
		go func() { errs <- migrateUp(t.Context(), db.URL) }()
	}
	for range replicas {
		if err := <-errs; err != nil {
			t.Errorf("migrate up beside %d others: %v", replicas-1, err)
		}
	}
	mustMigrate(t, db.URL, atLatest, "version")
}
