// Package redisserver starts redis-server processes of one's own on loopback ports: for the
// integration tests that stop, pause, restart or cluster Redis (through testenv), for the load
// harness's fault drills and Redlock nodes, and for the lock benchmarks that reset and read a
// server's statistics. A shared server must never be put through any of that.
//
// A server keeps nothing on disk (no RDB, no AOF), so a restart comes back empty, as a cache
// without disks does after a crash. The kernel kills it if the process that started it dies
// (Pdeathsig), so that no server outlives a crashed test or harness.
//
// It imports no testing package, so that the harness and the benchmarks, which are programs,
// can use it; testenv wraps it for tests.
package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configure a server. The zero value of each field is documented beside it.
type Options struct {
	// Dir is the server's working directory, where its log (redis.log) and any config file
	// live. Required; it must exist.
	Dir string
	// Port is the loopback port to listen on; 0 picks a free one.
	Port int
	// ConfigFile, when set, is given to redis-server before the arguments (redis-server
	// wants its config file first): Sentinel needs one, which it rewrites.
	ConfigFile string
	// Args are extra arguments, for example "--cluster-enabled", "yes".
	Args []string
	// StartTimeout bounds how long Start waits for the first PONG; 0 means 10 s.
	StartTimeout time.Duration
}

// Server is a running redis-server (or one that was killed and may be started again on the
// same port). Its methods are safe for one goroutine at a time.
type Server struct {
	opts Options

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// ErrNotInstalled is returned by Start when no redis-server binary is on PATH.
var ErrNotInstalled = errors.New("redisserver: redis-server is not installed")

// Start starts redis-server with opts and waits until it answers PING. The caller must Kill
// or Close it. It returns ErrNotInstalled when there is no redis-server to run, and an error
// carrying the server's log when it exits or stays silent at start.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotInstalled, err)
	}
	if opts.Dir == "" {
		return nil, errors.New("redisserver: Options.Dir is required")
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 10 * time.Second
	}
	if opts.Port != 0 {
		s := &Server{opts: opts}
		if err := s.Start(ctx); err != nil {
			return nil, err
		}
		return s, nil
	}
	var last error
	for range 3 { // a free port can be taken between finding and binding it
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		o := opts
		o.Port = port
		s := &Server{opts: o}
		if last = s.Start(ctx); last == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

// Start starts the server again on its port after Kill: empty, since nothing was saved. It
// waits until the server answers PING, and returns an error if it does not.
func (s *Server) Start(ctx context.Context) error {
	var argv []string
	if s.opts.ConfigFile != "" {
		argv = append(argv, s.opts.ConfigFile)
	}
	argv = append(argv,
		"--port", strconv.Itoa(s.opts.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.opts.Dir, "--logfile", s.LogPath(), "--daemonize", "no")
	argv = append(argv, s.opts.Args...)
	cmd := exec.Command("redis-server", argv...)
	// A process group of its own: a terminal's Ctrl-C goes to the program that started the
	// server, which decides when the server stops (the harness stops its replicas first).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return s.waitUp(ctx, done)
}

// waitUp waits until the server answers PING, it exits, ctx ends or the start timeout passes.
func (s *Server) waitUp(ctx context.Context, done <-chan struct{}) error {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(s.opts.StartTimeout)
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := rdb.Ping(pingCtx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(s.LogPath())
			return fmt.Errorf("redis-server on %s exited at start: %s", s.Addr(), log)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Kill()
			return fmt.Errorf("redis-server on %s not answering (see %s): %w", s.Addr(), s.LogPath(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.opts.Port)) }

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Port is the server's loopback port.
func (s *Server) Port() int { return s.opts.Port }

// Dir is the server's working directory.
func (s *Server) Dir() string { return s.opts.Dir }

// LogPath is the server's log file.
func (s *Server) LogPath() string { return filepath.Join(s.opts.Dir, "redis.log") }

func (s *Server) current() (*exec.Cmd, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd, s.done
}

// Kill ends the server at once (SIGKILL), losing everything in memory, and waits until it
// has exited. A paused server is continued first, so that it can die. Killing a server that
// is not running does nothing.
func (s *Server) Kill() {
	cmd, done := s.current()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	<-done
}

// Restart kills the server and starts a new, empty one on the same port: what a Redis
// without persistence looks like after a crash.
func (s *Server) Restart(ctx context.Context) error {
	s.Kill()
	return s.Start(ctx)
}

// Pause stops the process (SIGSTOP): it keeps its connections but answers nothing, and its
// keys' TTLs run on by the wall clock.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP, "pause") }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT, "resume") }

func (s *Server) signal(sig syscall.Signal, what string) error {
	cmd, _ := s.current()
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("%s redis-server on %s: not started", what, s.Addr())
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s redis-server on %s: %w", what, s.Addr(), err)
	}
	return nil
}

// Stop asks the server to shut down (SIGTERM) and kills it if it has not within grace.
// It returns an error when the server had to be killed.
func (s *Server) Stop(grace time.Duration) error {
	cmd, done := s.current()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot act on SIGTERM
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(grace):
		s.Kill()
		return fmt.Errorf("redis-server on %s did not stop within %v and was killed", s.Addr(), grace)
	}
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
