package cluster

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The topology comes up with a synchronous standby, the multi-host URL reaches whichever node
// leads, a crashed primary's synchronous standby takes over with the commits acknowledged
// before, and stop leaves no process and no file behind.
func TestPostgresHAFailsOverAndCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and three Patroni nodes (about 30 s)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ha, err := startPostgresHA(ctx, t.TempDir(), DefaultPatroniTiming, false, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			ha.stop()
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
	ha.stop()
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
