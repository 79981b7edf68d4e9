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
	root    string // the temporary directory, owned by postgres: the server's working directory
	dataDir string // root/data
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

// postgresUser is the account the harness runs Postgres (and Patroni) as: Postgres and
// initdb refuse root.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres refuses to run as root and needs a postgres user: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres user's uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres user's gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// runDir makes a temporary directory (pattern as in os.MkdirTemp) owned by cred's user, mode
// 0700: the working directory of the processes run as that user, and the parent of their data
// directories, since the harness's own working directory may be closed to them.
func runDir(pattern string, cred *syscall.Credential) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("hand %s to uid %d: %w", dir, cred.Uid, err)
	}
	return dir, nil
}

// startPostgres makes and starts a cluster of the run's own, its log in logDir. initdb and the
// postmaster run in a directory of their own, the data directory's parent.
func startPostgres(ctx context.Context, sup *Supervisor, logDir string) (*Postgres, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	cred, err := postgresUser()
	if err != nil {
		return nil, err
	}
	root, err := runDir("stocksvc-drill-pg-", cred)
	if err != nil {
		return nil, err
	}
	ports, err := FreePorts(1)
	if err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	c := &Postgres{sup: sup, bin: bin, root: root, dataDir: filepath.Join(root, "data"), port: ports[0],
		log: filepath.Join(logDir, "postgres.log"), cred: cred}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", c.dataDir, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	initdb.Dir = root
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		c.remove()
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
	p, err := c.sup.StartAs("postgres", c.log, c.root, c.cred, nil, filepath.Join(c.bin, "postgres"), "-D", c.dataDir,
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
		if p.Exited() {
			return fmt.Errorf("postgres on %s exited at start (%v); the end of %s:\n%s", c.addr(), p.Err(), c.log, p.tail(tailLines))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
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

func (c *Postgres) remove() { os.RemoveAll(c.root) }
