package main

import (
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/stocksvc/stocksvc/internal/ratelimit"
)

// defaultLimits are the limits' settings by default (docs/configuration.md, "Rate limits").
var defaultLimits = limitConfig{LimitCustomerRate: 5, LimitCustomerBurst: 20, LimitAddressRate: 20, LimitAddressBurst: 100, LimitAdminFailures: 10}

// TestLoadConfigLimits: the limits' settings become the API's limits; the admin failures are
// shared through Redis.
func TestLoadConfigLimits(t *testing.T) {
	t.Parallel()
	c, _, err := loadConfig(nil, envOf(map[string]string{
		"STOCKSVC_LIMIT_CUSTOMER_RATE": "3", "STOCKSVC_LIMIT_CUSTOMER_BURST": "7",
		"STOCKSVC_LIMIT_ADDRESS_RATE":   "0",
		"STOCKSVC_LIMIT_ADMIN_FAILURES": "4",
		"STOCKSVC_TRUSTED_PROXIES":      "127.16.0.0/12, 127.0.2.7,::1/128",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	l := c.limits(nil)
	if want := (ratelimit.Limit{Events: 3, Per: time.Second, Burst: 7}); l.Customer != want {
		t.Errorf("customer limit %v, want %v", l.Customer, want)
	}
	if !l.Address.Off() {
		t.Errorf("address limit %v, want off", l.Address)
	}
	if want := (ratelimit.Limit{Events: 4, Per: time.Minute, Burst: 4}); l.AdminFailures != want || l.Shared == nil {
		t.Errorf("admin failures %v (shared %v), want %v across replicas", l.AdminFailures, l.Shared, want)
	}
	want := []netip.Prefix{netip.MustParsePrefix("127.16.0.0/12"), netip.MustParsePrefix("127.0.2.7/32"), netip.MustParsePrefix("::1/128")}
	if diff := cmp.Diff(want, l.TrustedProxies, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("trusted proxies (-want +got):\n%s", diff)
	}
	_, rec := logLine(t, c)
	if rec["limit_customer"] != "3/1s, burst 7" || rec["limit_address"] != "off" || rec["trusted_proxies"] != "127.16.0.0/12, 127.0.2.7,::1/128" {
		t.Errorf("start-up line: %v", rec)
	}
	if off := (config{}).limits(nil); !off.AdminFailures.Off() || off.Shared != nil {
		t.Errorf("admin failures off: %+v, want no shared limiter", off)
	}
}

func TestLoadConfigLimitsInvalid(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"negative rate", map[string]string{"STOCKSVC_LIMIT_CUSTOMER_RATE": "-1"}, []string{"STOCKSVC_LIMIT_CUSTOMER_RATE", `"-1"`}},
		{"no burst", map[string]string{"STOCKSVC_LIMIT_ADDRESS_BURST": "0"}, []string{"STOCKSVC_LIMIT_ADDRESS_BURST", "at least 1"}},
		{"a proxy that is no address", map[string]string{"STOCKSVC_TRUSTED_PROXIES": "127.16.0.0/12,nginx"}, []string{"STOCKSVC_TRUSTED_PROXIES", `"nginx"`}},
		{"plain-http JWKS URL", map[string]string{"STOCKSVC_JWKS_URL": "http://keys.example/jwks.json"}, []string{"STOCKSVC_JWKS_URL", "keys.example", "STOCKSVC_JWKS_ALLOW_HTTP=1"}},
	} {
		_, _, err := loadConfig(nil, envOf(tt.env), io.Discard)
		if err == nil {
			t.Errorf("%s: accepted", tt.name)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tt.name, err, w)
			}
		}
	}
	for name, env := range map[string]map[string]string{
		"loopback":      {"STOCKSVC_JWKS_URL": "http://127.0.0.1:8000/jwks.json"},
		"allowed":       {"STOCKSVC_JWKS_URL": "http://keys.example/jwks.json", "STOCKSVC_JWKS_ALLOW_HTTP": "1"},
		"https":         {"STOCKSVC_JWKS_URL": "https://keys.example/jwks.json"},
		"limits off":    {"STOCKSVC_LIMIT_CUSTOMER_RATE": "0", "STOCKSVC_LIMIT_CUSTOMER_BURST": "0"},
		"admin limit 0": {"STOCKSVC_LIMIT_ADMIN_FAILURES": "0"},
	} {
		if _, _, err := loadConfig(nil, envOf(env), io.Discard); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
