package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// A highly available Postgres of the run's own (issue #22), from Debian's packages: one etcd
// member and three Patroni nodes — a primary and two standbys — with synchronous replication
// that refuses to acknowledge a commit no standby has (synchronous_mode_strict). Everything
// listens on 127.0.0.1, on free ports; the data directories live in one temporary directory
// owned by postgres, removed when the topology stops, and every process runs in its own
// directory there (issue #34: the harness's working directory may be closed to postgres). The
// failover manager is Patroni: nothing here decides who is primary, it only asks Patroni's
// REST API who is.

// agentGrace is how long an agent is given to stop its Postgres and itself.
const agentGrace = 20 * time.Second

// PatroniTiming is Patroni's timing (its dynamic configuration), in seconds: the leader key
// lives TTL after its last renewal, each node's loop runs every LoopWait, and a node gives up
// on etcd or Postgres after RetryTimeout. Patroni wants TTL ≥ LoopWait + 2×RetryTimeout.
type PatroniTiming struct {
	TTL, LoopWait, RetryTimeout int
}

// DefaultPatroniTiming is short, for drills on one machine whose etcd and nodes never lose
// each other for real; Patroni's own defaults are 30, 10 and 10.
var DefaultPatroniTiming = PatroniTiming{TTL: 10, LoopWait: 1, RetryTimeout: 4}

func (t PatroniTiming) String() string {
	return fmt.Sprintf("ttl %ds, loop_wait %ds, retry_timeout %ds", t.TTL, t.LoopWait, t.RetryTimeout)
}

// PostgresHA is the run's Patroni topology. Its methods are for one goroutine at a time.
type PostgresHA struct {
	Nodes  []*PatroniNode
	Timing PatroniTiming

	sup      *Supervisor // Patroni's agents and etcd: stopped by stop, after the replicas
	root     string      // the temporary directory, owned by postgres
	logDir   string
	cred     *syscall.Credential
	patroni  string
	etcd     *Proc
	etcdPort int
	http     *http.Client
}

// PatroniNode is one Patroni agent and the Postgres it manages.
type PatroniNode struct {
	Name    string
	Port    int // Postgres
	API     int // Patroni's REST API
	dir     string
	config  string
	log     string
	Proc    *Proc // the agent; Postgres runs in a session of its own (Patroni starts it so)
	dataDir string

	starting bool // started, and not yet reported running by Patroni: its log is watched
	killed   bool // ended by KillNode: its agent's exit is no failure
}

// Member is one node as Patroni's GET /cluster describes it.
type Member struct {
	Name     string `json:"name"`
	Role     string `json:"role"` // leader, sync_standby or replica
	State    string `json:"state"`
	Port     int    `json:"port"`
	Timeline int    `json:"timeline"`
}

// startPostgresHA starts etcd, then the first Patroni node (which bootstraps the cluster with
// initdb), then the two others (which clone it with pg_basebackup), and waits until the
// primary has a synchronous standby and both standbys stream. progress gets the package
// installation's output, if patroni or etcd is missing. A node that cannot start ends it at
// once, with the reason from its log (errNodeFailed).
func startPostgresHA(ctx context.Context, logDir string, timing PatroniTiming, fsync bool, progress io.Writer) (*PostgresHA, error) {
	ha, err := newPostgresHA(ctx, logDir, timing, fsync, progress)
	if err != nil {
		return nil, err
	}
	if err := ha.bootstrap(ctx); err != nil {
		ha.stop(0)
		return nil, err
	}
	return ha, nil
}

// newPostgresHA lays the topology out and starts etcd: a temporary directory owned by
// postgres, mode 0700, holding etcd's data directory and one directory per node (its
// patroni.yml, its data directory, its socket), each process's working directory. Nothing
// they run needs the harness's working directory, which may be closed to postgres; their
// logs are files the harness opens in logDir.
func newPostgresHA(ctx context.Context, logDir string, timing PatroniTiming, fsync bool, progress io.Writer) (_ *PostgresHA, err error) {
	patroni, err := FindTool(ctx, "patroni", "patroni", progress)
	if err != nil {
		return nil, err
	}
	etcd, err := FindTool(ctx, "etcd", "etcd-server", progress)
	if err != nil {
		return nil, err
	}
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	cred, err := postgresUser()
	if err != nil {
		return nil, err
	}
	root, err := runDir("stocksvc-ha-", cred)
	if err != nil {
		return nil, err
	}
	ha := &PostgresHA{Timing: timing, sup: &Supervisor{}, root: root, logDir: logDir, patroni: patroni,
		cred: cred, http: &http.Client{Timeout: 3 * time.Second}}
	defer func() {
		if err != nil {
			ha.stop(0)
		}
	}()
	ports, err := FreePorts(2 + 3*2)
	if err != nil {
		return nil, err
	}
	ha.etcdPort = ports[0]
	etcdDir := filepath.Join(root, "etcd")
	if err := os.Mkdir(etcdDir, 0o700); err != nil {
		return nil, err
	}
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	client := fmt.Sprintf("http://127.0.0.1:%d", ha.etcdPort)
	if ha.etcd, err = ha.sup.StartAs("etcd", filepath.Join(logDir, "etcd.log"), etcdDir, nil, nil, etcd, "--name", "e1", "--data-dir", etcdDir,
		"--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer, "--initial-cluster", "e1="+peer, "--initial-cluster-state", "new",
		"--logger", "zap", "--log-level", "warn"); err != nil {
		return nil, err
	}
	if err := WaitReady(ctx, ha.etcd, client+"/health", 30*time.Second); err != nil {
		return nil, err
	}
	scope := fmt.Sprintf("stocksvc-%d", time.Now().UnixNano())
	for i := range 3 {
		n := &PatroniNode{Name: "pg" + strconv.Itoa(i+1), Port: ports[2+2*i], API: ports[3+2*i]}
		n.dir = filepath.Join(root, n.Name)
		n.dataDir = filepath.Join(n.dir, "data")
		n.config = filepath.Join(n.dir, "patroni.yml")
		n.log = filepath.Join(logDir, "patroni-"+n.Name+".log")
		if err := os.Mkdir(n.dir, 0o700); err != nil {
			return nil, err
		}
		if err := os.Chown(n.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
		if err := os.WriteFile(n.config, patroniConfig(scope, n, bin, client, timing, fsync), 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", n.config, err)
		}
		ha.Nodes = append(ha.Nodes, n)
	}
	return ha, nil
}

// bootstrap starts the first node alone, so that it is the one that bootstraps (the others
// clone it), then the others, and waits until the topology is whole.
func (ha *PostgresHA) bootstrap(ctx context.Context) error {
	if err := ha.StartNode(ha.Nodes[0]); err != nil {
		return err
	}
	if _, err := ha.waitLeader(ctx, "", false, 60*time.Second); err != nil {
		return err
	}
	for _, n := range ha.Nodes[1:] {
		if err := ha.StartNode(n); err != nil {
			return err
		}
	}
	return ha.WaitHealthy(ctx, 90*time.Second)
}

// patroniConfig is node n's patroni.yml (JSON, which YAML reads). Authentication is trust on
// loopback, as on the harness's other Postgres servers. Without fsync, fsync is off as there:
// the drills kill processes, never the machine, so the operating system keeps every write a
// commit made, and a synchronous standby's flush is still a round trip to it; a benchmark of
// what a commit costs turns it on.
func patroniConfig(scope string, n *PatroniNode, bin, etcd string, t PatroniTiming, fsync bool) []byte {
	onOff := map[bool]string{true: "on", false: "off"}
	addr := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	user := map[string]string{"username": "postgres"}
	cfg := map[string]any{
		"scope": scope, "namespace": "/stocksvc/", "name": n.Name,
		"log":     map[string]any{"level": "INFO"},
		"restapi": map[string]any{"listen": addr(n.API), "connect_address": addr(n.API)},
		"etcd3":   map[string]any{"hosts": []string{strings.TrimPrefix(etcd, "http://")}, "protocol": "http"},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl": t.TTL, "loop_wait": t.LoopWait, "retry_timeout": t.RetryTimeout,
				// An acknowledged commit is on a standby, and with no standby nothing is
				// acknowledged: Patroni never drops synchronous replication to keep writing.
				"synchronous_mode": true, "synchronous_mode_strict": true, "synchronous_node_count": 1,
				// A crashed primary is not restarted in place: Patroni fails over at once to the
				// synchronous standby, which has every acknowledged commit.
				"primary_start_timeout":   0,
				"maximum_lag_on_failover": 1 << 20,
				"postgresql": map[string]any{
					// No replication slots: Patroni 3.0 makes the members' slots on a new leader
					// only at its first loops after the promotion, and refuses a standby its
					// stream until then — seconds during which strict synchronous mode has no
					// standby and acknowledges nothing. wal_keep_size keeps the WAL instead.
					"use_pg_rewind": true, "use_slots": false,
					"parameters": map[string]any{
						"max_connections": 100, "shared_buffers": "32MB", "fsync": onOff[fsync],
						"wal_keep_size": "128MB", "max_wal_senders": 10, "max_replication_slots": 10,
						// A standby that finds no slot on a just-promoted leader (Patroni makes
						// the slots on its next loop) tries again after this, not after the
						// default 5 s: with one standby left, commits wait for it.
						"wal_retrieve_retry_interval": "500ms",
					},
				},
			},
			"initdb": []any{map[string]string{"encoding": "UTF8"}, "no-sync"},
		},
		"postgresql": map[string]any{
			"listen": addr(n.Port), "connect_address": addr(n.Port),
			"data_dir": n.dataDir, "bin_dir": bin, "pgpass": filepath.Join(n.dir, "pgpass"),
			"authentication": map[string]any{"superuser": user, "replication": user, "rewind": user},
			"pg_hba": []string{"local all all trust", "host all all 127.0.0.1/32 trust",
				"host replication all 127.0.0.1/32 trust"},
			"parameters": map[string]any{"unix_socket_directories": n.dir},
		},
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return b
}

// StartNode starts n's Patroni agent (again, after KillNode), as the postgres user, in n's
// directory. Until Patroni reports its Postgres running, the waits watch its start
// (nodeFailure).
func (ha *PostgresHA) StartNode(n *PatroniNode) error {
	p, err := ha.sup.StartAs("patroni-"+n.Name, n.log, n.dir, ha.cred, []string{"HOME=" + n.dir}, ha.patroni, n.config)
	if err != nil {
		return err
	}
	n.Proc, n.starting, n.killed = p, true, false
	return nil
}

// URL is the service's connection string for database: every node, of which pgx takes the
// one that accepts writes (target_session_attrs=read-write), giving up on each after 2 s.
func (ha *PostgresHA) URL(database string) string {
	hosts := make([]string, len(ha.Nodes))
	for i, n := range ha.Nodes {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(n.Port)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		strings.Join(hosts, ","), database)
}

// NodeURL is the connection string for database on node n alone.
func (n *PatroniNode) NodeURL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", n.Port, database)
}

// Node returns the node named name, or nil.
func (ha *PostgresHA) Node(name string) *PatroniNode {
	for _, n := range ha.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Members asks the nodes' REST APIs, in turn until one answers, for the cluster as Patroni sees
// it (from etcd).
func (ha *PostgresHA) Members(ctx context.Context) ([]Member, error) {
	var errs []error
	for _, n := range ha.Nodes {
		var out struct {
			Members []Member `json:"members"`
		}
		if err := ha.get(ctx, n, "/cluster", &out); err != nil {
			errs = append(errs, err)
			continue
		}
		return out.Members, nil
	}
	return nil, fmt.Errorf("no patroni REST API answered: %w", errors.Join(errs...))
}

func (ha *PostgresHA) get(ctx context.Context, n *PatroniNode, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", n.API, path), nil)
	if err != nil {
		return err
	}
	res, err := ha.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s GET %s: status %d", n.Name, path, res.StatusCode)
	}
	return json.NewDecoder(res.Body).Decode(out)
}

// Roles returns the leader's and the synchronous standby's names ("" for none).
func (ha *PostgresHA) Roles(ctx context.Context) (leader, sync string, err error) {
	ms, err := ha.Members(ctx)
	if err != nil {
		return "", "", err
	}
	leader, sync = roles(ms)
	return leader, sync, nil
}

// roles names, among ms, the leader with Postgres running and the synchronous standby ("" for
// none).
func roles(ms []Member) (leader, sync string) {
	for _, m := range ms {
		switch m.Role {
		case "leader":
			if m.State == "running" {
				leader = m.Name
			}
		case "sync_standby":
			sync = m.Name
		}
	}
	return leader, sync
}

// waitLeader waits until a node other than not leads, with Postgres running and (withSync) a
// synchronous standby named, and returns its name. It returns errNodeFailed, at once, when a
// node cannot start (nodeFailure).
func (ha *PostgresHA) waitLeader(ctx context.Context, not string, withSync bool, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		ms, err := ha.Members(ctx)
		leader, sync := roles(ms)
		if err == nil && leader != "" && leader != not && (!withSync || sync != "") {
			return leader, nil
		}
		if err := ha.nodeFailure(ms); err != nil {
			return "", err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("no new patroni leader within %v (last: leader %q, sync %q, %v); see %s%s", timeout, leader, sync, err, ha.logDir, ha.startingLogs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitLeader waits until a node other than not leads with a synchronous standby, so that it can
// acknowledge a commit again, and returns the leader's name. Like WaitPrimary and
// WaitHealthy, it fails at once, with the reason from the node's log, when a node fails
// (nodeFailure): a restarted one that cannot start, an agent or etcd that ended by itself.
func (ha *PostgresHA) WaitLeader(ctx context.Context, not string, timeout time.Duration) (string, error) {
	return ha.waitLeader(ctx, not, true, timeout)
}

// WaitPrimary waits until a node other than not leads, with Postgres running, and returns its
// name; it may not have a synchronous standby yet, and then acknowledges no commit.
func (ha *PostgresHA) WaitPrimary(ctx context.Context, not string, timeout time.Duration) (string, error) {
	return ha.waitLeader(ctx, not, false, timeout)
}

// WaitHealthy waits until the leader's Postgres streams to every other node, one of them
// synchronously, and Patroni names that one sync_standby. It fails at once when a node fails
// (nodeFailure).
func (ha *PostgresHA) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ms, err := ha.Members(ctx)
		ok, why := ha.healthy(ctx, ms, err)
		if ok {
			return nil
		}
		if err := ha.nodeFailure(ms); err != nil {
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("patroni cluster not healthy within %v: %s; see %s%s", timeout, why, ha.logDir, ha.startingLogs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// healthy reports whether the topology is whole, given the members (or the error asking for
// them), and what it lacks if not.
func (ha *PostgresHA) healthy(ctx context.Context, ms []Member, err error) (bool, string) {
	leader, sync := roles(ms)
	if err != nil || leader == "" || sync == "" {
		return false, fmt.Sprintf("leader %q, sync standby %q (%v)", leader, sync, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, ha.Node(leader).NodeURL("postgres"))
	if err != nil {
		return false, err.Error()
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, _ := conn.Query(ctx, `SELECT application_name, sync_state FROM pg_stat_replication WHERE state = 'streaming'`)
	streaming := map[string]string{}
	var name, state string
	if _, err := pgx.ForEachRow(rows, []any{&name, &state}, func() error { streaming[name] = state; return nil }); err != nil {
		return false, err.Error()
	}
	if len(streaming) != len(ha.Nodes)-1 || streaming[sync] != "sync" {
		return false, fmt.Sprintf("leader %s streams to %v, sync standby %s", leader, streaming, sync)
	}
	return true, ""
}

// Switchover asks the leader's Patroni to hand over to candidate (a planned switchover:
// Patroni stops the old primary cleanly, promotes the candidate, and restarts the old primary
// as a standby); it returns once Patroni says it is done.
func (ha *PostgresHA) Switchover(ctx context.Context, leader, candidate string) error {
	body, _ := json.Marshal(map[string]string{"leader": leader, "candidate": candidate})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/switchover", ha.Node(leader).API), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 60 * time.Second} // Patroni answers once the switchover is over
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("patroni switchover: %w", err)
	}
	defer res.Body.Close()
	text, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("patroni switchover: status %d: %s", res.StatusCode, bytes.TrimSpace(text))
	}
	return nil
}

// KillPostgres SIGKILLs node n's postmaster and every process it started, at once, as a crash
// of the server would end them; the agent lives on. It returns the postmaster's pid.
func (ha *PostgresHA) KillPostgres(n *PatroniNode) (int, error) {
	pid, err := postmasterPid(n.dataDir)
	if err != nil {
		return 0, err
	}
	for _, p := range append([]int{pid}, childrenOf(pid)...) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return pid, nil
}

// KillNode SIGKILLs node n whole: its Patroni agent, then its Postgres, as if the machine were
// gone. StartNode brings the agent back, which restarts Postgres as a standby.
func (ha *PostgresHA) KillNode(n *PatroniNode) {
	n.killed, n.starting = true, false
	n.Proc.Signal(syscall.SIGKILL)
	<-n.Proc.Done()
	_, _ = ha.KillPostgres(n)
}

// postmasterPid reads the postmaster's pid from dataDir/postmaster.pid, and checks that it
// runs.
func postmasterPid(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("postgres in %s is not running: %w", dataDir, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s/postmaster.pid: no pid (%q)", dataDir, first)
	}
	if syscall.Kill(pid, 0) != nil {
		return 0, fmt.Errorf("postgres in %s is not running (pid %d is gone)", dataDir, pid)
	}
	return pid, nil
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// stop stops the agents (each stops its Postgres, fast), each within grace, kills any Postgres
// an agent left behind (one killed with KillNode, or that did not stop in time), stops etcd,
// and removes the temporary directory. Safe to call twice. A topology that failed to start
// has nothing to keep and is stopped with no grace: an agent whose bootstrap hangs (it waits
// for a postmaster that never came) ignores SIGTERM.
func (ha *PostgresHA) stop(grace time.Duration) {
	var agents []*Proc
	for _, n := range ha.Nodes {
		if n.Proc != nil {
			agents = append(agents, n.Proc)
		}
	}
	done := make(chan struct{})
	go func() {
		for _, p := range agents {
			go func() { _ = p.Stop(grace) }()
		}
		for _, p := range agents {
			<-p.Done()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace + 10*time.Second):
	}
	for _, n := range ha.Nodes {
		if pid, err := postmasterPid(n.dataDir); err == nil && isPostgres(pid) {
			_, _ = ha.KillPostgres(n)
		}
	}
	_ = ha.sup.StopAll(10 * time.Second)
	_ = os.RemoveAll(ha.root)
}

// isPostgres reports whether pid is a postgres process: a pid file may outlive its server,
// and the pid be reused.
func isPostgres(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.HasPrefix(strings.TrimSpace(string(comm)), "postgres")
}
