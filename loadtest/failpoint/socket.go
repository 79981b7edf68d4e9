package failpoint

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// OwnsLocalPort reports whether process pid has a TCP socket whose local port is port: the
// socket inodes among its file descriptors, looked up in the kernel's TCP tables.
func OwnsLocalPort(pid, port int) bool {
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 {
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			p, err := strconv.ParseInt(hexPort, 16, 32)
			if ok && err == nil && int(p) == port && inodes[fields[9]] {
				f.Close()
				return true
			}
		}
		f.Close()
	}
	return false
}
