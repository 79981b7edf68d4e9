package stockhttp

import "testing"

func TestDuplicateKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body     string
		wantName string
		wantDup  bool
	}{
		{body: `{}`},
		{body: `{"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]}`},
		{body: `{"a": 1, "a": 2}`, wantName: "a", wantDup: true},
		{body: `{"a": {"b": 1, "c": [1, "b"], "b": 2}}`, wantName: "a.b", wantDup: true},
		{body: `{"items": [{"q": 1}, {"q": 1, "p": {}, "q": 2}]}`, wantName: "items.q", wantDup: true},
		{body: `{"items": [[{"q": 1, "q": 2}]]}`, wantName: "items.q", wantDup: true},
		// A name that is also a string value is not a duplicate.
		{body: `{"a": "b", "b": "a"}`},
		// Equal after decoding: encoding/json would keep the second.
		{body: `{"a": 1, "\u0061": 2}`, wantName: "a", wantDup: true},
		{body: `{"a": 1,`}, // not JSON: the decode reports it, not this
	}
	for _, tt := range tests {
		name, dup := duplicateKey([]byte(tt.body))
		if name != tt.wantName || dup != tt.wantDup {
			t.Errorf("duplicateKey(%s) = %q, %v; want %q, %v", tt.body, name, dup, tt.wantName, tt.wantDup)
		}
	}
}
