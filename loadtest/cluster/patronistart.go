package cluster

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// A node that cannot start is reported while the harness waits for it, at once, with the
// reason in its log's own words: waiting out the minute for a leader that never comes says
// nothing of why (issue #34).

// errNodeFailed is the error of a Patroni node that cannot start, or whose agent (or the etcd
// they share) ended without the harness ending it.
var errNodeFailed = errors.New("cluster: a node of the patroni topology failed")

// nodeFailure returns, wrapped in errNodeFailed, why a node failed, given the members Patroni
// reports (nil if none answered): etcd or its agent ended though nothing stopped it, or, until
// Patroni first reports its Postgres running, its log shows a process that died (scanLog). A
// node reported running is no longer read: Patroni logs the exceptions it handles, and a
// drill's faults cause some.
func (ha *PostgresHA) nodeFailure(ms []Member) error {
	if ha.etcd.Exited() {
		return fmt.Errorf("%w: etcd exited (%v); the end of %s:\n%s", errNodeFailed, ha.etcd.Err(), ha.etcd.Log, ha.etcd.tail(tailLines))
	}
	running := map[string]bool{}
	for _, m := range ms {
		// Patroni 3.0 says "running" of a standby too; later versions say "streaming".
		if m.State == "running" || m.State == "streaming" {
			running[m.Name] = true
		}
	}
	for _, n := range ha.Nodes {
		if n.Proc == nil || n.killed {
			continue
		}
		exited := n.Proc.Exited()
		if !exited && (!n.starting || running[n.Name]) {
			n.starting = false
			continue
		}
		log, err := n.startLog()
		if err != nil {
			return err
		}
		crash, errs := scanLog(log)
		switch {
		case exited:
			return n.failed(fmt.Sprintf("patroni %s exited (%v)", n.Name, n.Proc.Err()), log, errs)
		case crash != "":
			return n.failed(fmt.Sprintf("%s cannot start: %s", n.Name, crash), log, errs)
		}
	}
	return nil
}

// startLog is what n's agent, and what it ran, wrote to its log since it last started.
func (n *PatroniNode) startLog() (string, error) {
	b, err := os.ReadFile(n.log)
	if err != nil {
		return "", fmt.Errorf("read %s's log: %w", n.Name, err)
	}
	return string(b[min(n.Proc.logFrom, int64(len(b))):]), nil
}

// failed is errNodeFailed, with what happened and why in the log's words: its last error
// lines, or its last lines when it has none.
func (n *PatroniNode) failed(what, log string, errs []string) error {
	why, lines := "its last errors", errs
	if len(errs) == 0 {
		why, lines = "its last lines", strings.Split(strings.TrimRight(log, "\n"), "\n")
	}
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return fmt.Errorf("%w: %s; %s, in %s:\n    %s", errNodeFailed, what, why, n.log, strings.Join(lines, "\n    "))
}

// startingLogs is, for a wait's timeout, the end of the log of each node not yet reported
// running.
func (ha *PostgresHA) startingLogs() string {
	var b strings.Builder
	for _, n := range ha.Nodes {
		if n.Proc != nil && n.starting {
			fmt.Fprintf(&b, "\n%s has not started; the end of %s:\n%s", n.Name, n.log, n.Proc.tail(tailLines))
		}
	}
	return b.String()
}

// patroniRecord matches the start of a record in Patroni's log format (its default,
// "%(asctime)s %(levelname)s: %(message)s"), anywhere in a line: the output of the programs
// Patroni runs (initdb, postgres) shares the file, and the two may meet in one line.
var patroniRecord = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ([A-Z]+): (.*)`)

// exceptionLine matches the line that ends a traceback: the exception's (dotted) class name,
// then its message, if any ("PermissionError: [Errno 13] ...").
var exceptionLine = regexp.MustCompile(`^[A-Za-z_][\w.]*(:|$)`)

// Python's words around an exception: its traceback's first line, and the lines that chain
// one exception's traceback to the next.
const (
	tracebackStart = "Traceback (most recent call last):"
	chainCause     = "The above exception was the direct cause of the following exception:"
	chainContext   = "During handling of the above exception, another exception occurred:"
)

// errorLine matches a line that reports an error: Postgres's (severity ERROR, FATAL or PANIC)
// or Patroni's (ERROR or CRITICAL).
var errorLine = regexp.MustCompile(`\b(ERROR|FATAL|PANIC|CRITICAL): `)

// scanLog reads Patroni's log, log, for a process that died, and returns why in one line
// (crash, "" for none): a CRITICAL record (Patroni's last words before it exits), or the
// exception that ends a Python traceback not introduced by an ERROR record. Patroni logs the
// exceptions it handles, their traceback after an ERROR record of its own; any other is
// an uncaught exception, a process that died of it — such as the child Patroni spawns to start
// Postgres when it cannot enter its working directory. A traceback not yet whole (no
// exception line) is not reported yet. errs are the lines that report an error (errorLine),
// and every traceback's exception, in order.
func scanLog(log string) (crash string, errs []string) {
	inTrace, handled := false, false
	prev := "" // the last line that is not blank
	for line := range strings.SplitSeq(log, "\n") {
		record := patroniRecord.FindStringSubmatch(line)
		switch {
		case strings.Contains(line, tracebackStart):
			if prev != chainCause && prev != chainContext {
				// Patroni's logger.exception writes an ERROR record (DEBUG at that level)
				// and its traceback in one go.
				r := patroniRecord.FindStringSubmatch(prev)
				handled = r != nil && (r[1] == "ERROR" || r[1] == "DEBUG")
			}
			inTrace = true
		case inTrace && exceptionLine.MatchString(line):
			// Other lines may come in between, in records of Patroni's or Postgres's: other
			// processes write to the same file.
			inTrace = false
			errs = append(errs, line)
			if !handled && crash == "" {
				crash = line
			}
		case errorLine.MatchString(line):
			errs = append(errs, line)
			if record != nil && record[1] == "CRITICAL" && crash == "" {
				crash = record[2]
			}
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	return crash, errs
}
