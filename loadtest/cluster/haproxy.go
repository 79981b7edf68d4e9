package cluster

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// haproxyConfig spreads requests round-robin over the replicas and checks each one's /readyz
// four times a second: a replica that drains, dies or stops answering leaves the rotation
// within about half a second. Retries happen only when a connection could not be made — a
// request that reached a replica is never sent twice, so an order cannot be placed twice by
// the balancer. A client gets 5 s to send a request's headers (slowloris). Every answer a replica
// gives says which one it was (ServedBy), so that the drills' histories name it.
func haproxyConfig(frontPort, statsPort int, replicaPorts []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
    maxconn 4000

defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout http-request 5s
    timeout server 30s
    timeout http-keep-alive 30s
    option http-keep-alive
    retries 2
    retry-on conn-failure
    option redispatch

frontend flashsale
    bind 127.0.0.1:%d
    default_backend stocksvc

frontend stats
    bind 127.0.0.1:%d
    stats enable
    stats uri /stats

backend stocksvc
    balance roundrobin
    http-response set-header %s %%s
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 250ms fall 2 rise 2
`, frontPort, statsPort, ServedBy)
	for i, p := range replicaPorts {
		fmt.Fprintf(&b, "    server r%d 127.0.0.1:%d check\n", i+1, p)
	}
	return b.String()
}

// ServedBy is the header the balancer adds to each answer a replica gives: the replica's name in
// the balancer (r1, r2...).
const ServedBy = "X-Served-By"

// startHAProxy writes the configuration into dir and runs haproxy in the foreground.
func startHAProxy(sup *Supervisor, haproxy, dir string, frontPort, statsPort int, replicaPorts []int) (*Proc, error) {
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(haproxyConfig(frontPort, statsPort, replicaPorts)), 0o644); err != nil {
		return nil, fmt.Errorf("write haproxy config: %w", err)
	}
	return sup.Start("haproxy", filepath.Join(dir, "haproxy.log"), nil, haproxy, "-db", "-f", cfg)
}

// HAProxyRequests reads the balancer's per-server request counters ("req_tot", or sessions
// "stot" where HAProxy does not count requests) from its CSV statistics.
func HAProxyRequests(ctx context.Context, statsPort int) (map[string]int64, error) {
	rows, err := haproxyServers(ctx, statsPort)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, row := range rows {
		counter, ok := row["req_tot"]
		if !ok {
			counter = row["stot"]
		}
		n, _ := strconv.ParseInt(counter, 10, 64)
		out[row["svname"]] = n
	}
	return out, nil
}

// HAProxyStatus reads each replica's status in the balancer ("UP", "DOWN", "UP 1/2"...).
func HAProxyStatus(ctx context.Context, statsPort int) (map[string]string, error) {
	rows, err := haproxyServers(ctx, statsPort)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, row := range rows {
		out[row["svname"]] = row["status"]
	}
	return out, nil
}

// haproxyServers reads HAProxy's CSV statistics: one row per replica of the stocksvc backend,
// by column name.
func haproxyServers(ctx context.Context, statsPort int) ([]map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/stats;csv", statsPort), nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read haproxy stats: %w", err)
	}
	defer res.Body.Close()
	r := csv.NewReader(res.Body)
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil || len(rows) == 0 {
		return nil, fmt.Errorf("parse haproxy stats: %v", err)
	}
	var out []map[string]string
	for _, row := range rows[1:] {
		m := map[string]string{}
		for i, h := range rows[0] {
			if i < len(row) {
				m[strings.TrimPrefix(strings.TrimSpace(h), "# ")] = row[i]
			}
		}
		if m["pxname"] == "stocksvc" && strings.HasPrefix(m["svname"], "r") {
			out = append(out, m)
		}
	}
	return out, nil
}
