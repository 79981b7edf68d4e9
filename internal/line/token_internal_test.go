package line

import (
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"
)

func testKey(id uint8) Key {
	secret := make([]byte, KeySize)
	_, _ = rand.Read(secret)
	return Key{ID: id, Secret: secret}
}

// TestTokensVerifyOnlyAsSigned: a ticket and a pass say what they were signed with; any byte
// changed, the other kind, another key or a truncation is refused; a key rotated in signs
// the new tokens while the old ones still verify.
func TestTokensVerifyOnlyAsSigned(t *testing.T) {
	t.Parallel()
	var k keyring
	old := testKey(1)
	k.set([]Key{old})
	until := time.UnixMicro(time.Now().Add(time.Minute).UnixMicro())
	ticket := k.sign(claims{kind: kindTicket, product: 7, ticket: 42, customer: "cust-ä"})
	pass := k.sign(claims{kind: kindPass, product: 7, ticket: 42, until: until, customer: "cust-ä"})
	if c, err := k.verify(ticket, kindTicket); err != nil || c.product != 7 || c.ticket != 42 || c.customer != "cust-ä" {
		t.Fatalf("ticket = %+v, %v", c, err)
	}
	if c, err := k.verify(pass, kindPass); err != nil || !c.until.Equal(until) || c.customer != "cust-ä" {
		t.Fatalf("pass = %+v, %v", c, err)
	}
	if _, err := k.verify(ticket, kindPass); !errors.Is(err, ErrInvalidTicket) {
		t.Errorf("a ticket as a pass: %v", err)
	}
	if _, err := k.verify(pass, kindTicket); !errors.Is(err, ErrInvalidTicket) {
		t.Errorf("a pass as a ticket: %v", err)
	}
	for i := range len(pass) {
		b := []byte(pass)
		b[i] = "AB"[map[bool]int{true: 1}[b[i] == 'A']]
		if _, err := k.verify(string(b), kindPass); err == nil {
			t.Fatalf("the pass with character %d changed verified", i)
		}
	}
	for _, bad := range []string{"", "x", pass[:len(pass)-1], pass + "A", strings.Repeat("A", 10_000), "not base64!"} {
		if _, err := k.verify(bad, kindPass); err == nil {
			t.Errorf("%.20q verified", bad)
		}
	}
	// Another service's key: its tokens are unknown here.
	var other keyring
	other.set([]Key{testKey(2)})
	if _, err := k.verify(other.sign(claims{kind: kindTicket, product: 7, ticket: 42, customer: "c"}), kindTicket); !errors.Is(err, errUnknownKey) {
		t.Errorf("a token of an unknown key: %v", err)
	}
	// Same id, another secret: a forgery.
	var forger keyring
	forger.set([]Key{testKey(1)})
	if _, err := k.verify(forger.sign(claims{kind: kindTicket, product: 7, ticket: 42, customer: "c"}), kindTicket); !errors.Is(err, ErrInvalidTicket) {
		t.Errorf("a forged token: %v", err)
	}
	// Rotation.
	k.set([]Key{old, testKey(2)})
	fresh := k.sign(claims{kind: kindTicket, product: 7, ticket: 43, customer: "c"})
	if _, err := k.verify(fresh, kindTicket); err != nil {
		t.Errorf("a token of the new key: %v", err)
	}
	var oldOnly keyring
	oldOnly.set([]Key{old})
	if _, err := oldOnly.verify(fresh, kindTicket); !errors.Is(err, errUnknownKey) {
		t.Errorf("the new key's token was signed with the old one: %v", err)
	}
	if _, err := k.verify(ticket, kindTicket); err != nil {
		t.Errorf("an old token after the rotation: %v", err)
	}
}
