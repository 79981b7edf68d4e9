package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The topology comes up with a synchronous standby, the multi-host URL reaches whichever node
// leads, a crashed primary's synchronous standby takes over with the commits acknowledged
// before, and stop leaves no process and no file behind. It runs from a working directory the
// postgres user may not enter, as a checkout under /root or in a mktemp -d folder is (issue
// #34): nothing Patroni runs may need it.
func TestPostgresHAFailsOverAndCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three Patroni nodes (about 30 s)")
	}
	t.Chdir(t.TempDir()) // mode 0700, the harness's user's
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ha, err := startPostgresHA(ctx, t.TempDir(), DefaultPatroniTiming, false, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			ha.stop(agentGrace)
		}
	}()
	dbURL, err := CreateDatabase(ctx, ha.URL("postgres"), "hatest")
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(`CREATE TABLE t (n int); INSERT INTO t VALUES (1)`)

	leader, sync, err := ha.Roles(ctx)
	if err != nil || leader == "" || sync == "" {
		t.Fatalf("roles: leader %q, sync %q, %v", leader, sync, err)
	}
	if _, err := ha.KillPostgres(ha.Node(leader)); err != nil {
		t.Fatal(err)
	}
	next, err := ha.WaitLeader(ctx, leader, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if next != sync {
		t.Errorf("new leader %s, want the synchronous standby %s", next, sync)
	}
	exec(`INSERT INTO t VALUES (2)`) // the multi-host URL finds the new primary
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 2 {
		t.Errorf("rows on the new primary: %d (%v), want 2", n, err)
	}
	conn.Close(ctx)

	var pids []int
	for _, node := range ha.Nodes {
		if pid, err := postmasterPid(node.dataDir); err == nil {
			pids = append(pids, pid)
		}
	}
	ha.stop(agentGrace)
	stopped = true
	if _, err := os.Stat(ha.root); !os.IsNotExist(err) {
		t.Errorf("%s left behind (%v)", ha.root, err)
	}
	for _, pid := range append(pids, ha.etcd.Pid()) {
		if comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err == nil {
			t.Errorf("process %d (%s) left running", pid, strings.TrimSpace(string(comm)))
		}
	}
	for _, node := range ha.Nodes {
		if !node.Proc.Exited() {
			t.Errorf("patroni %s left running", node.Name)
		}
	}
}

// A node that cannot start is reported while the harness waits for the leader, with the
// reason from its log: here Postgres refuses a setting of its patroni.yml, and Patroni gives
// up the bootstrap.
func TestPostgresHAReportsANodeThatCannotStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and a Patroni node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ha, err := newPostgresHA(ctx, t.TempDir(), DefaultPatroniTiming, false, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer ha.stop(0)
	n := ha.Nodes[0]
	b, err := os.ReadFile(n.config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	pg := cfg["postgresql"].(map[string]any)
	pg["parameters"].(map[string]any)["shared_preload_libraries"] = "stocksvc_no_such_library"
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.config, b, 0o644); err != nil {
		t.Fatal(err)
	}

	err = ha.bootstrap(ctx)
	if !errors.Is(err, errNodeFailed) {
		t.Fatalf("bootstrap: %v, want errNodeFailed", err)
	}
	// Patroni dies of the failed bootstrap: its exit, or its traceback, whichever is seen
	// first, is reported, with Postgres's reason.
	for _, want := range []string{"pg1", `could not access file "stocksvc_no_such_library"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("bootstrap: %v\nwant the reason from the log: %q", err, want)
		}
	}
}
