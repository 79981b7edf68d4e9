package cluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// initdb and the postmaster run as postgres in a directory of their own, from a working
// directory postgres may not enter (issue #34): they change back into theirs at start, and
// say so in the log when they cannot.
func TestOwnPostgresRunsInADirectoryOfItsOwn(t *testing.T) {
	if testing.Short() {
		t.Skip("runs initdb and a Postgres server")
	}
	t.Chdir(t.TempDir()) // mode 0700, the harness's user's
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logDir := t.TempDir()
	c, err := startPostgres(ctx, &Supervisor{}, logDir)
	if err != nil {
		t.Fatal(err)
	}
	c.stop()
	log, err := os.ReadFile(c.log)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), "could not change directory") {
		t.Errorf("postgres could not enter its working directory:\n%s", log)
	}
	if _, err := os.Stat(c.root); !os.IsNotExist(err) {
		t.Errorf("%s left behind (%v)", c.root, err)
	}
}
