package failpoint

import (
	"encoding/binary"
	"strings"
	"testing"
)

// pgMessage encodes one backend message.
func pgMessage(typ byte, body string) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

// TestPGWatchFindsCommitPoints feeds the commit cut's protocol reader what Postgres answers
// for an explicit transaction, an implicit one, a read and a rollback, split at every byte:
// only the two commits of writes are commit points.
func TestPGWatchFindsCommitPoints(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		stream [][]byte
		want   bool
	}{
		{"explicit transaction", [][]byte{pgMessage('C', "BEGIN\x00"), pgMessage('Z', "T"), pgMessage('C', "UPDATE 1\x00"),
			pgMessage('Z', "T"), pgMessage('C', "INSERT 0 1\x00"), pgMessage('Z', "T"), pgMessage('C', "COMMIT\x00"), pgMessage('Z', "I")}, true},
		{"implicit transaction", [][]byte{pgMessage('1', ""), pgMessage('2', ""), pgMessage('D', "\x00\x01\x00\x00\x00\x015"),
			pgMessage('C', "UPDATE 1\x00"), pgMessage('Z', "I")}, true},
		{"read", [][]byte{pgMessage('T', strings.Repeat("x", 300)), pgMessage('D', "row"), pgMessage('C', "SELECT 1\x00"), pgMessage('Z', "I")}, false},
		{"rollback", [][]byte{pgMessage('C', "BEGIN\x00"), pgMessage('Z', "T"), pgMessage('C', "UPDATE 1\x00"), pgMessage('Z', "T"),
			pgMessage('C', "ROLLBACK\x00"), pgMessage('Z', "I")}, false},
		{"failed transaction", [][]byte{pgMessage('C', "UPDATE 1\x00"), pgMessage('Z', "T"), pgMessage('E', "SERROR\x00"), pgMessage('Z', "E"),
			pgMessage('C', "ROLLBACK\x00"), pgMessage('Z', "I")}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var all []byte
			for _, m := range c.stream {
				all = append(all, m...)
			}
			for split := 0; split <= len(all); split++ {
				var w pgWatch
				got := w.feed(all[:split])
				got = w.feed(all[split:]) || got
				if got != c.want {
					t.Fatalf("split at %d: commit point = %v, want %v", split, got, c.want)
				}
			}
			var w pgWatch
			if got := w.feed(all) || w.feed(all); got != c.want {
				t.Errorf("twice in one stream: commit point = %v, want %v", got, c.want)
			}
		})
	}
}
