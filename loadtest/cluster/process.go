package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a child process the harness started and must stop.
type Proc struct {
	Name    string
	Log     string // the file its output goes to
	logFrom int64  // the log's size when the process started: what follows is this run's
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // set before done is closed
}

// Supervisor owns every child process. StopAll stops those still running, together; it is
// deferred by the harness, so children are stopped on every way out, Ctrl-C included.
type Supervisor struct {
	mu     sync.Mutex
	procs  []*Proc
	others []func(grace time.Duration) error // stops what was started elsewhere (redis-servers)
}

// Adopt makes StopAll stop, with the supervisor's own processes, something started by
// another package: stop must end it within grace.
func (s *Supervisor) Adopt(stop func(grace time.Duration) error) {
	s.mu.Lock()
	s.others = append(s.others, stop)
	s.mu.Unlock()
}

// Start runs argv with env (added to the harness's own environment) in a process group of its
// own, in the harness's working directory, its output appended to logPath. The child is killed
// if the harness dies (Pdeathsig).
func (s *Supervisor) Start(name, logPath string, env []string, argv ...string) (*Proc, error) {
	return s.StartAs(name, logPath, "", nil, env, argv...)
}

// StartAs is Start with the child running in dir (the harness's working directory when "") and
// as another user (cred), or as the harness's own user when cred is nil: Postgres refuses to
// run as root. A child of another user needs a dir that user may enter: the harness's working
// directory may be a checkout only root can enter (under /root, in a mktemp -d folder), and
// Postgres, initdb and Python's multiprocessing change back into theirs, and fail there. The
// child's PWD names dir. The log is opened by the harness, so logPath need not be writable
// by the child's user.
func (s *Supervisor) StartAs(name, logPath, dir string, cred *syscall.Credential, env []string, argv ...string) (*Proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", name, err)
	}
	logFrom, err := logFile.Seek(0, io.SeekEnd) // a restart appends to the log of the last run
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("open log for %s: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	// Environ, with Env still nil, is the harness's environment with PWD set to Dir.
	cmd.Env = append(cmd.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, logFrom: logFrom, cmd: cmd, done: make(chan struct{})}
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

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process's whole group.
func (p *Proc) Signal(sig syscall.Signal) {
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// Stop asks the process to end (SIGTERM) and kills it if it has not within grace.
func (p *Proc) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not stop within %v and was killed", p.Name, grace)
	}
	return nil
}

// Wait blocks until the process ends and returns its exit error.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, once Done is closed (nil before).
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// tail is the last n lines the process wrote to its log, indented, for an error message: why
// it failed, in its own words.
func (p *Proc) tail(n int) string { return logTail(p.Log, p.logFrom, n) }

// tailLines is how many of a log's last lines an error quotes.
const tailLines = 12

// logTailBytes bounds how much of a log logTail reads: enough for a traceback.
const logTailBytes = 16 << 10

// logTail is the last n lines of the file at path after byte offset from (within its last
// logTailBytes), each indented, or a note of why there are none.
func logTail(path string, from int64, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	from = max(from, info.Size()-logTailBytes)
	b, err := io.ReadAll(io.NewSectionReader(f, from, info.Size()-from))
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	text := strings.TrimRight(string(b), "\n")
	if text == "" {
		return "    (nothing)"
	}
	lines := strings.Split(text, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// StopAll stops every process still running, all at once: a replica spends its shutdown
// delay with readiness failing before it drains, and one after another they would add up.
func (s *Supervisor) StopAll(grace time.Duration) error {
	s.mu.Lock()
	procs, others := slices.Clone(s.procs), slices.Clone(s.others)
	s.mu.Unlock()
	errs := make([]error, len(procs)+len(others))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.Stop(grace) })
	}
	for i, stop := range others {
		wg.Go(func() { errs[len(procs)+i] = stop(grace) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
