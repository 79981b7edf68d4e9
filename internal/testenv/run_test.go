package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

// runEnv selects what TestChildRun does, in a child process of this test binary: "exit"
// returns (the run cleans up), "kill" kills the process before anything is cleaned up,
// "hold" waits until its standard input is closed.
const runEnv = "STOCKSVC_TESTENV_RUN"

// TestChildRun is what the children of TestRunsLeaveNothingBehind run: it makes a database
// of each kind and keys under two prefixes, prints their names, and ends as runEnv says.
func TestChildRun(t *testing.T) {
	mode := os.Getenv(runEnv)
	if mode == "" {
		t.Skip("runs only as the child of TestRunsLeaveNothingBehind")
	}
	fmt.Printf("servers %s %s\n", redact(env.get(t).postgresURL), env.redisURL)
	pool := Pool(t)
	scratch := DatabaseName(t) // one the test makes itself, and leaves
	if _, err := pool.Exec(t.Context(), `CREATE DATABASE `+pgx.Identifier{scratch}.Sanitize()); err != nil {
		t.Fatalf("create %s: %v", scratch, err)
	}
	var db string
	if err := pool.QueryRow(t.Context(), `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	rdb, deleted := Redis(t)
	left := KeyPrefix(t) // keys the test does not delete itself
	for _, k := range []string{deleted + "k", left + "k"} {
		if err := rdb.Set(t.Context(), k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		fmt.Println("key", k)
	}
	fmt.Println("database", env.template)
	fmt.Println("database", db)
	fmt.Println("database", scratch)
	fmt.Println("ready")
	switch mode {
	case "kill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "hold":
		_, _ = io.Copy(io.Discard, os.Stdin)
	}
}

// child is TestChildRun running in a process of its own.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	lines []string // what it printed so far
}

// childRun starts TestChildRun in a new process of this test binary, on this binary's servers
// unless env says otherwise, and returns it once it has printed "ready" (or ended).
func childRun(t *testing.T, mode string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildRun$", "-test.count=1")
	cmd.Env = append(childEnviron(), runEnv+"="+mode)
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // no summary on the terminal
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	for c.out.Scan() && c.out.Text() != "ready" {
		c.lines = append(c.lines, c.out.Text())
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.wait()
		}
	})
	return c
}

// wait lets the child end (its standard input closed), reads what it prints to the end, and
// returns how it ended.
func (c *child) wait() error {
	_ = c.stdin.Close()
	for c.out.Scan() {
		c.lines = append(c.lines, c.out.Text())
	}
	return c.cmd.Wait()
}

// childEnviron is this process's environment for a child, with the servers this binary uses
// named and the choice of test left out.
func childEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvDatabaseURL+"=") && !strings.HasPrefix(kv, EnvRedisURL+"=") &&
			!strings.HasPrefix(kv, EnvPrefix+"=") && !strings.HasPrefix(kv, runEnv+"=") && !strings.HasPrefix(kv, childEnv+"=") {
			out = append(out, kv)
		}
	}
	return append(out, EnvDatabaseURL+"="+env.postgresURL, EnvRedisURL+"="+env.redisURL)
}

// made returns the names a child printed after kind ("database" or "key").
func made(lines []string, kind string) []string {
	var names []string
	for _, l := range lines {
		if name, ok := strings.CutPrefix(l, kind+" "); ok {
			names = append(names, name)
		}
	}
	return names
}

// TestRunsLeaveNothingBehind: a run names everything it makes under the prefix; one killed
// leaves its databases and keys, which the next run under the same prefix removes — but not
// those of a run still alive —; and a run that ends removes all of its own, the template, a
// database a test made itself and keys a test left included.
func TestRunsLeaveNothingBehind(t *testing.T) {
	t.Parallel()
	pool := Pool(t) // for this binary's own view of the servers
	rdb, _ := Redis(t)
	prefix := "tenv" + randomHex(4) + "_"
	withPrefix := EnvPrefix + "=" + prefix
	ctx := t.Context()
	t.Cleanup(func() { // whatever a failure left: no later run takes this prefix
		dbs, err := databasesUnder(context.Background(), env.admin, prefix)
		for _, name := range dbs {
			err = errors.Join(err, dropDatabase(context.Background(), env.admin, name))
		}
		if _, kerr := deleteKeys(context.Background(), rdb, prefix); err != nil || kerr != nil {
			t.Errorf("remove what the children left: %v", errors.Join(err, kerr))
		}
	})
	databases := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY 1`, prefix)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	keys := func() []string {
		t.Helper()
		got, err := rdb.Keys(ctx, prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	left := func(lines []string) ([]string, []string) {
		dbs, ks := made(lines, "database"), made(lines, "key")
		slices.Sort(dbs)
		slices.Sort(ks)
		return dbs, ks
	}

	// A run killed: everything it made is there, named under the prefix.
	killed := childRun(t, "kill", withPrefix)
	if err := killed.wait(); err == nil {
		t.Fatalf("the killed child succeeded:\n%s", strings.Join(killed.lines, "\n"))
	}
	deadDBs, deadKeys := left(killed.lines)
	if len(deadDBs) != 3 || len(deadKeys) != 2 {
		t.Fatalf("the killed child made databases %q and keys %q, want 3 and 2:\n%s", deadDBs, deadKeys, strings.Join(killed.lines, "\n"))
	}
	for _, name := range append(slices.Clone(deadDBs), deadKeys...) {
		if !strings.HasPrefix(name, prefix) {
			t.Errorf("%q is not under the prefix %q", name, prefix)
		}
	}
	if got := databases(); !slices.Equal(got, deadDBs) {
		t.Errorf("after a killed run: databases %q, want what it made, %q", got, deadDBs)
	}
	if got := keys(); !slices.Equal(got, deadKeys) {
		t.Errorf("after a killed run: keys %q, want what it made, %q", got, deadKeys)
	}

	// A run that starts removes the killed run's leftovers, and says so.
	holder := childRun(t, "hold", withPrefix)
	held := holder.lines
	liveDBs, liveKeys := left(held)
	if len(liveDBs) != 3 || len(liveKeys) != 2 {
		t.Fatalf("the holding child made databases %q and keys %q, want 3 and 2:\n%s", liveDBs, liveKeys, strings.Join(held, "\n"))
	}
	if !slices.ContainsFunc(held, func(l string) bool { return strings.Contains(l, "removed 3 databases and 2 Redis keys") }) {
		t.Errorf("the run that swept did not say what it removed:\n%s", strings.Join(held, "\n"))
	}
	if got := databases(); !slices.Equal(got, liveDBs) {
		t.Errorf("after the sweep: databases %q, want the live run's only, %q", got, liveDBs)
	}
	if got := keys(); !slices.Equal(got, liveKeys) {
		t.Errorf("after the sweep: keys %q, want the live run's only, %q", got, liveKeys)
	}

	// Another run, while that one lives, sweeps nothing of it, and takes its own along when it
	// ends.
	ended := childRun(t, "exit", withPrefix)
	if err := ended.wait(); err != nil {
		t.Fatalf("a run beside a live one: %v\n%s", err, strings.Join(ended.lines, "\n"))
	}
	if got := databases(); !slices.Equal(got, liveDBs) {
		t.Errorf("after a run beside a live one: databases %q, want the live run's only, %q", got, liveDBs)
	}
	if got := keys(); !slices.Equal(got, liveKeys) {
		t.Errorf("after a run beside a live one: keys %q, want the live run's only, %q", got, liveKeys)
	}

	// The live run ends: nothing is left under the prefix.
	if err := holder.wait(); err != nil {
		t.Fatalf("the holding child: %v\n%s", err, strings.Join(holder.lines, "\n"))
	}
	if got := databases(); len(got) != 0 {
		t.Errorf("after every run ended: databases %q, want none", got)
	}
	if got := keys(); len(got) != 0 {
		t.Errorf("after every run ended: keys %q, want none", got)
	}
}

// TestUsualLocalServers: with no server named, a run finds Postgres and Redis on their usual
// local ports. It runs where this binary's servers are those.
func TestUsualLocalServers(t *testing.T) {
	t.Parallel()
	DatabaseURL(t)
	pg, err := pgx.ParseConfig(env.postgresURL)
	if err != nil {
		t.Fatal(err)
	}
	if pg.Host != "127.0.0.1" || pg.Port != 5432 || pg.User != "postgres" || !strings.HasPrefix(env.redisURL, "redis://127.0.0.1:6379/") {
		t.Skipf("this run's servers are not the usual local ones (%s, %s)", redact(env.postgresURL), env.redisURL)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildRun$", "-test.count=1")
	for _, kv := range childEnviron() {
		if !strings.HasPrefix(kv, EnvDatabaseURL+"=") && !strings.HasPrefix(kv, EnvRedisURL+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, runEnv+"=exit", EnvRequire+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("a run with no server URLs: %v\n%s", err, out)
	}
	if want := "servers " + redact(localPostgresURL) + " " + localRedisURL; !strings.Contains(string(out), want) {
		t.Errorf("a run with no server URLs did not use the local servers (%q):\n%s", want, out)
	}
}

// TestProbe: a usual local server is taken only when it answers as one: a port that refuses,
// or something that accepts and says nothing, is no server.
func TestProbe(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	if err := probePostgres(ctx, env.get(t).postgresURL); err != nil {
		t.Errorf("probe of this run's Postgres: %v", err)
	}
	if err := probeRedis(ctx, env.redisURL); err != nil {
		t.Errorf("probe of this run's Redis: %v", err)
	}
	refused, dead := fmt.Sprintf("127.0.0.1:%d", FreePort(t)), DeadEndpoint(t)
	for _, addr := range []string{refused, dead} {
		if err := probePostgres(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable"); err == nil || !strings.Contains(err.Error(), "no Postgres at postgres://postgres@"+addr) {
			t.Errorf("probe of Postgres at %s: %v, want an error naming it", addr, err)
		}
		if err := probeRedis(ctx, "redis://"+addr+"/0"); err == nil || !strings.Contains(err.Error(), "no Redis at redis://"+addr) {
			t.Errorf("probe of Redis at %s: %v, want an error naming it", addr, err)
		}
	}
}

func TestNamesFromEnv(t *testing.T) {
	for _, tt := range []struct {
		prefix, want string // want "" for an error
	}{
		{"", DefaultPrefix},
		{"ci_7_", "ci_7_"},
		{"stocksvc_ci_", "stocksvc_ci_"},
		{strings.Repeat("a", 40), strings.Repeat("a", 40)},
		{strings.Repeat("a", 41), ""},
		{"Stocksvc_", ""},
		{"stocksvc-test:", ""},
		{"_x", ""},
		{"7x", ""},
	} {
		t.Setenv(EnvPrefix, tt.prefix)
		n, err := namesFromEnv()
		if tt.want == "" {
			if err == nil || !strings.Contains(err.Error(), EnvPrefix) {
				t.Errorf("prefix %q: %v, want an error naming %s", tt.prefix, err, EnvPrefix)
			}
			continue
		}
		if err != nil || n.prefix != tt.want {
			t.Errorf("prefix %q: %q, %v; want %q", tt.prefix, n.prefix, err, tt.want)
			continue
		}
		// Postgres cuts a longer name short, and the sweep would not know it.
		if l := len(n.newDatabase()); l > 63 {
			t.Errorf("prefix %q: a database name of %d bytes", tt.prefix, l)
		}
	}
}

// TestRunOf: the sweep takes only names a run under the same prefix made, and reads their run.
func TestRunOf(t *testing.T) {
	t.Parallel()
	n := newNames("stocksvc_test_", 0x0a0b0c0d)
	other := newNames("stocksvc_test_", 0xfffffffe)
	for _, tt := range []struct {
		name    string
		isKey   bool
		wantRun uint32
		ok      bool
	}{
		{n.template(), false, n.run, true},
		{n.newDatabase(), false, n.run, true},
		{other.newDatabase(), false, other.run, true},
		{n.newKeyPrefix() + "lock:product:{1}", true, n.run, true},
		{other.newKeyPrefix() + "database", true, other.run, true},
		// Names of older testenv versions, of other prefixes, and near misses.
		{"stocksvc_test_0a0b0c0d0e0f1a2b", false, 0, false},
		{"stocksvc_tpl_265b6457988127e8", false, 0, false},
		{"stocksvc_test_0a0b0c0d_tpl_x", false, 0, false},
		{"stocksvc_test_0a0b0c0d_0102030", false, 0, false},
		{"other_0a0b0c0d_01020304", false, 0, false},
		{"stocksvc-test:0a0b0c0d0e0f:lock", true, 0, false},
		{"stocksvc_test_0a0b0c0d_01020304", true, 0, false}, // a key prefix ends with ':'
		{"stocksvc_test_0a0b0c0d_tpl:x", true, 0, false},
	} {
		pattern := n.database
		if tt.isKey {
			pattern = n.key
		}
		run, ok := runOf(pattern, tt.name)
		if ok != tt.ok || run != tt.wantRun {
			t.Errorf("runOf(%q) = %08x, %v; want %08x, %v", tt.name, run, ok, tt.wantRun, tt.ok)
		}
	}
}
