package cluster

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestScanLogTellsACrashFromAHandledException(t *testing.T) {
	t.Parallel()
	lines := func(ls ...string) string { return strings.Join(ls, "\n") + "\n" }
	const (
		permission = "PermissionError: [Errno 13] Permission denied: '/root/stocksvc/loadtest'"
		handledErr = "2026-11-28 17:40:24,011 ERROR: Exception when called state_handler.last_operation()"
		connection = "patroni.exceptions.PostgresConnectionException: 'connection problems'"
		info       = "2026-11-28 17:36:55,068 INFO: bootstrap in progress"
	)
	for _, tc := range []struct {
		name      string
		log       string
		wantCrash string
		wantErrs  []string
	}{{
		// The child Patroni spawns to start Postgres cannot enter the harness's working
		// directory, and dies of it; Patroni logs "bootstrap in progress" on.
		name: "child that died",
		log: lines("2026-11-28 17:37:43,969 INFO: trying to bootstrap a new cluster",
			"Success. You can now start the database server using:",
			`could not change directory to "/root/stocksvc/loadtest": Permission denied`,
			"Traceback (most recent call last):",
			`  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 229, in prepare`,
			info, // the agent, between the child's lines
			"    os.chdir(data['dir'])",
			permission,
			info),
		wantCrash: permission,
		wantErrs:  []string{permission},
	}, {
		name:      "child that died after a record",
		log:       lines(info, "Traceback (most recent call last):", `  File "x.py", line 1, in f`, permission),
		wantCrash: permission,
		wantErrs:  []string{permission},
	}, {
		name: "exception Patroni handled",
		log: lines(handledErr,
			"Traceback (most recent call last):",
			`  File "/usr/lib/python3/dist-packages/patroni/ha.py", line 243, in update_lock`,
			connection,
			info),
		wantErrs: []string{handledErr, connection},
	}, {
		name: "chain of exceptions Patroni handled",
		log: lines(handledErr,
			"Traceback (most recent call last):",
			`  File "x.py", line 1, in f`,
			"psycopg2.OperationalError: connection refused",
			"",
			"During handling of the above exception, another exception occurred:",
			"",
			"Traceback (most recent call last):",
			`  File "y.py", line 2, in g`,
			connection),
		wantErrs: []string{handledErr, "psycopg2.OperationalError: connection refused", connection},
	}, {
		name: "traceback not yet whole",
		log: lines("could not change directory",
			"Traceback (most recent call last):",
			`  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 120, in spawn_main`),
	}, {
		name:      "critical record",
		log:       lines(info, "2026-11-28 17:40:13,644 CRITICAL: system ID mismatch, node pg2 belongs to a different cluster: 1 != 2"),
		wantCrash: "system ID mismatch, node pg2 belongs to a different cluster: 1 != 2",
		wantErrs:  []string{"2026-11-28 17:40:13,644 CRITICAL: system ID mismatch, node pg2 belongs to a different cluster: 1 != 2"},
	}, {
		// A standby's Postgres asks for a primary that is not there yet: it tries again.
		name: "postgres errors alone",
		log: lines(`2026-11-28 17:40:17.1 UTC [3124] FATAL:  could not connect to the primary server: connection refused`,
			"2026-11-28 17:40:18,874 INFO: bootstrapped from leader 'pg1'"),
		wantErrs: []string{`2026-11-28 17:40:17.1 UTC [3124] FATAL:  could not connect to the primary server: connection refused`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			crash, errs := scanLog(tc.log)
			if crash != tc.wantCrash {
				t.Errorf("crash %q, want %q", crash, tc.wantCrash)
			}
			if diff := cmp.Diff(tc.wantErrs, errs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}
