package testenv

import (
	"os"
	"strconv"
	"strings"
)

// ProcStat is /proc/<pid>/stat's fields after the command name (the state first, so utime and
// stime are fields 11 and 12), or nil when the process is not on this machine. Benchmarks
// read the CPU time of the servers they drive from it.
func ProcStat(pid int) []string {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(raw)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}
