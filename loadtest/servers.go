package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stocksvc/stocksvc/internal/testenv/redisserver"
)

// Drills that pause or restart Redis or Postgres do it to servers of their own, on free
// loopback ports: the machine's shared servers are everyone's and are never touched.

// startRedis starts a redis-server of the run's own in dir (package redisserver: no
// persistence, so a restart comes back empty, as a crashed cache without disks would), which
// sup stops with everything else.
func startRedis(ctx context.Context, sup *supervisor, dir string) (*redisserver.Server, error) {
	r, err := redisserver.Start(ctx, redisserver.Options{Dir: dir})
	if err != nil {
		return nil, err
	}
	sup.adopt(r.Stop)
	return r, nil
}

// pgCluster is a Postgres cluster the harness made with initdb in a temporary directory,
// running as the postgres user, listening on 127.0.0.1 only, with trust authentication.
type pgCluster struct {
	sup     *supervisor
	bin     string
	dataDir string
	port    int
	log     string
	cred    *syscall.Credential
	proc    *proc
}

// postgresBin finds the newest installed server binaries.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no Postgres server binaries under /usr/lib/postgresql/*/bin")
}

func startPostgres(ctx context.Context, sup *supervisor, logDir string) (*pgCluster, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("initdb refuses root and needs a postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	data, err := os.MkdirTemp("", "stocksvc-drill-pg-")
	if err != nil {
		return nil, err
	}
	if err := os.Chown(data, uid, gid); err != nil {
		os.RemoveAll(data)
		return nil, fmt.Errorf("hand %s to postgres: %w", data, err)
	}
	ports, err := freePorts(1)
	if err != nil {
		os.RemoveAll(data)
		return nil, err
	}
	c := &pgCluster{sup: sup, bin: bin, dataDir: data, port: ports[0], log: filepath.Join(logDir, "postgres.log"), cred: cred}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(data)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	if err := c.start(ctx); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

func (c *pgCluster) url(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, database)
}

func (c *pgCluster) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// start runs the postmaster in the foreground. fsync is off: the drills crash the server
// process, never the machine, so the operating system keeps every write a commit made.
func (c *pgCluster) start(ctx context.Context) error {
	p, err := c.sup.startAs("postgres", c.log, nil, c.cred, filepath.Join(c.bin, "postgres"), "-D", c.dataDir,
		"-p", strconv.Itoa(c.port), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+c.dataDir,
		"-c", "fsync=off", "-c", "max_connections=60", "-c", "shared_buffers=32MB")
	if err != nil {
		return err
	}
	c.proc = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.url("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		if p.exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("postgres on %s did not answer (see %s): %w", c.addr(), c.log, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// crash stops the server the way `pg_ctl stop -m immediate` does (SIGQUIT to the
// postmaster): no checkpoint, every connection cut, crash recovery on the next start.
func (c *pgCluster) crash() {
	if c.proc.cmd.Process != nil {
		_ = c.proc.cmd.Process.Signal(syscall.SIGQUIT)
	}
	select {
	case <-c.proc.done:
	case <-time.After(10 * time.Second):
		c.proc.signal(syscall.SIGKILL)
		<-c.proc.done
	}
}

// stop shuts the server down fast and removes its files.
func (c *pgCluster) stop() {
	if c.proc != nil && !c.proc.exited() {
		_ = c.proc.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-c.proc.done:
		case <-time.After(15 * time.Second):
			c.proc.signal(syscall.SIGKILL)
			<-c.proc.done
		}
	}
	c.remove()
}

func (c *pgCluster) remove() { os.RemoveAll(c.dataDir) }
