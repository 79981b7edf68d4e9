package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"
)

// proc is a child process the harness started and must stop.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// supervisor owns every child process. stopAll stops those still running, together; it is
// deferred by the harness, so children are stopped on every way out, Ctrl-C included.
type supervisor struct {
	mu     sync.Mutex
	procs  []*proc
	others []func(grace time.Duration) error // stops what was started elsewhere (redis-servers)
}

// adopt makes stopAll stop, with the supervisor's own processes, something started by
// another package: stop must end it within grace.
func (s *supervisor) adopt(stop func(grace time.Duration) error) {
	s.mu.Lock()
	s.others = append(s.others, stop)
	s.mu.Unlock()
}

// start runs argv with env (added to the harness's own environment) in a process group of its
// own, its output appended to logPath. The child is killed if the harness dies (Pdeathsig).
func (s *supervisor) start(name, logPath string, env []string, argv ...string) (*proc, error) {
	return s.startAs(name, logPath, env, nil, argv...)
}

// startAs is start with the child running as another user (cred), or as the harness's own
// user when cred is nil: Postgres refuses to run as root.
func (s *supervisor) startAs(name, logPath string, env []string, cred *syscall.Credential, argv ...string) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process's whole group.
func (p *proc) signal(sig syscall.Signal) {
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// stop asks the process to end (SIGTERM) and kills it if it has not within grace.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not stop within %v and was killed", p.name, grace)
	}
	return nil
}

// wait blocks until the process ends and returns its exit error.
func (p *proc) wait() error {
	<-p.done
	return p.err
}

// stopAll stops every process still running, all at once: a replica spends its shutdown
// delay with readiness failing before it drains, and one after another they would add up.
func (s *supervisor) stopAll(grace time.Duration) error {
	s.mu.Lock()
	procs, others := slices.Clone(s.procs), slices.Clone(s.others)
	s.mu.Unlock()
	errs := make([]error, len(procs)+len(others))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.stop(grace) })
	}
	for i, stop := range others {
		wg.Go(func() { errs[len(procs)+i] = stop(grace) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
