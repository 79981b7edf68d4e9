package cluster

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
)

// Drills that crash Postgres do it to a server of their own, on a free loopback port: the
// machine's shared servers are everyone's and are never touched.

// Postgres is a Postgres cluster the harness made with initdb in a temporary directory,
// running as the postgres user, listening on 127.0.0.1 only, with trust authentication.
type Postgres struct {
	sup     *Supervisor
	bin     string
	dataDir string
	port    int
	log     string
	cred    *syscall.Credential
	proc    *Proc
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

// startPostgres makes and starts a cluster of the run's own, its log in logDir.
func startPostgres(ctx context.Context, sup *Supervisor, logDir string) (*Postgres, error) {
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
	ports, err := FreePorts(1)
	if err != nil {
		os.RemoveAll(data)
		return nil, err
	}
	c := &Postgres{sup: sup, bin: bin, dataDir: data, port: ports[0], log: filepath.Join(logDir, "postgres.log"), cred: cred}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(data)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	if err := c.Start(ctx); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

// URL is the URL of database on the cluster.
func (c *Postgres) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, database)
}

func (c *Postgres) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// Start runs the postmaster in the foreground (again, after Crash). fsync is off: the drills crash the server
// process, never the machine, so the operating system keeps every write a commit made.
func (c *Postgres) Start(ctx context.Context) error {
	p, err := c.sup.StartAs("postgres", c.log, nil, c.cred, filepath.Join(c.bin, "postgres"), "-D", c.dataDir,
		"-p", strconv.Itoa(c.port), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+c.dataDir,
		"-c", "fsync=off", "-c", "max_connections=60", "-c", "shared_buffers=32MB")
	if err != nil {
		return err
	}
	c.proc = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		if p.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("postgres on %s did not answer (see %s): %w", c.addr(), c.log, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Crash stops the server the way `pg_ctl stop -m immediate` does (SIGQUIT to the
// postmaster): no checkpoint, every connection cut, crash recovery on the next start.
func (c *Postgres) Crash() {
	if c.proc.cmd.Process != nil {
		_ = c.proc.cmd.Process.Signal(syscall.SIGQUIT)
	}
	select {
	case <-c.proc.done:
	case <-time.After(10 * time.Second):
		c.proc.Signal(syscall.SIGKILL)
		<-c.proc.done
	}
}

// stop shuts the server down fast and removes its files.
func (c *Postgres) stop() {
	if c.proc != nil && !c.proc.Exited() {
		_ = c.proc.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-c.proc.done:
		case <-time.After(15 * time.Second):
			c.proc.Signal(syscall.SIGKILL)
			<-c.proc.done
		}
	}
	c.remove()
}

func (c *Postgres) remove() { os.RemoveAll(c.dataDir) }
