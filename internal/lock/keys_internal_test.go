package lock

import "testing"

func TestHasHashTag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  string
		want bool
	}{
		{key: "", want: false},
		{key: "plain", want: false},
		{key: "{x}", want: true},
		{key: "lock:product:{42}", want: true},
		{key: "a{b}c{d}", want: true},
		{key: "{}", want: false},    // empty tag: Redis hashes the whole key
		{key: "{}{x}", want: false}, // the first '{' and the first '}' after it decide
		{key: "x{}y}", want: false}, // likewise
		{key: "}{x}", want: true},   // a '}' before the first '{' does not count
		{key: "{{x}}", want: true},  // tag "{x"
		{key: "{", want: false},     // never closed
		{key: "a{b", want: false},   // never closed
		{key: "a}b", want: false},   // never opened
		{key: "stocksvc-test:ab12:lock:{7}", want: true},
	}
	for _, tt := range tests {
		if got := hasHashTag(tt.key); got != tt.want {
			t.Errorf("hasHashTag(%q) = %v, want %v", tt.key, got, tt.want)
		}
		// The oracle below follows the Redis Cluster specification independently.
		if got := clusterTag(tt.key) != tt.key; got != tt.want {
			t.Errorf("test table disagrees with the Redis Cluster rule for %q: tagged %v", tt.key, got)
		}
	}
}

func TestKeysFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		wantLock       string
		wantFence      string
		wantClusterTag string
	}{
		{name: "lock:product:{42}", wantLock: "lock:product:{42}", wantFence: "lock:product:{42}:fence", wantClusterTag: "42"},
		{name: "{x}", wantLock: "{x}", wantFence: "{x}:fence", wantClusterTag: "x"},
		{name: "plain", wantLock: "{plain}", wantFence: "{plain}:fence", wantClusterTag: "plain"},
		{name: "lock:product:42", wantLock: "{lock:product:42}", wantFence: "{lock:product:42}:fence", wantClusterTag: "lock:product:42"},
		{name: "{}", wantLock: "{{}}", wantFence: "{{}}:fence", wantClusterTag: "{"},
		{name: "a{b", wantLock: "{a{b}", wantFence: "{a{b}:fence", wantClusterTag: "a{b"},
	}
	for _, tt := range tests {
		k := keysFor(tt.name)
		if k.lock != tt.wantLock || k.fence != tt.wantFence || k.waiters != tt.wantLock+":waiters" {
			t.Errorf("keysFor(%q) = %+v; want lock %q, fence %q", tt.name, k, tt.wantLock, tt.wantFence)
		}
		if k.channel != channelPrefix+tt.name {
			t.Errorf("keysFor(%q).channel = %q, want %q", tt.name, k.channel, channelPrefix+tt.name)
		}
		// Every key must hash to one slot, so that a script may touch them together in a
		// cluster.
		for _, key := range k.all() {
			if got := clusterTag(key); got != tt.wantClusterTag {
				t.Errorf("cluster tag of %q = %q, want %q", key, got, tt.wantClusterTag)
			}
		}
	}
}

// clusterTag returns the part of key that Redis Cluster hashes to pick a slot: the bytes
// between the first '{' and the first '}' after it, when there are any; otherwise the key.
func clusterTag(key string) string {
	for open := 0; open < len(key); open++ {
		if key[open] != '{' {
			continue
		}
		for end := open + 1; end < len(key); end++ {
			if key[end] == '}' {
				if end == open+1 {
					return key
				}
				return key[open+1 : end]
			}
		}
		return key
	}
	return key
}
