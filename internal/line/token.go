package line

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"
	"sync"
	"time"
	"unicode/utf8"
)

// Tickets and passes are bearer tokens the service signs and any replica checks in
// microseconds, before anything else an order costs: a compact binary payload and its
// HMAC-SHA256, base64url without padding.
//
//	ticket: 't' | key id | product id (8) | ticket id (8) | customer id
//	pass:   'p' | key id | product id (8) | ticket id (8) | admitted until, Unix µs (8) | customer id
//
// Integers are big-endian. The key id names the signing key (Key), so that keys can be
// rotated: a replica signs with the newest key it knows and verifies with any it knows.

// Key is a key that signs tickets and passes.
type Key struct {
	ID     uint8
	Secret []byte
}

// KeySize is the size of a key's secret in bytes.
const KeySize = 32

const (
	kindTicket = 't'
	kindPass   = 'p'
	// macSize is the HMAC-SHA256's size: the whole of it.
	macSize    = sha256.Size
	ticketHead = 2 + 8 + 8
	passHead   = ticketHead + 8
	// maxCustomer bounds a signed customer id (stock.MaxCustomerIDLen, in bytes of UTF-8).
	maxCustomer = 4 * 64
)

// claims are what a ticket or a pass says.
type claims struct {
	kind     byte
	product  int64
	ticket   int64
	until    time.Time // passes only
	customer string
}

// strictBase64 reads a token only as it was written: the trailing bits that base64url leaves
// unused must be zero, so that a token has one spelling.
var strictBase64 = base64.RawURLEncoding.Strict()

// errUnknownKey is a token signed by a key this replica does not know (yet).
var errUnknownKey = errors.New("line: token signed by an unknown key")

// keyring holds the signing keys.
type keyring struct {
	mu      sync.RWMutex
	keys    map[uint8]*macKey
	current uint8
}

// macKey is a key with a pool of its HMACs: an HMAC's keyed state is set up once and reset to
// it, not computed again for every token (two SHA-256 blocks saved per check).
type macKey struct {
	pool sync.Pool
}

func newMACKey(secret []byte) *macKey {
	secret = append([]byte(nil), secret...)
	return &macKey{pool: sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }}}
}

// sum appends payload's HMAC-SHA256 to dst.
func (m *macKey) sum(dst, payload []byte) []byte {
	h := m.pool.Get().(hash.Hash)
	h.Reset()
	h.Write(payload)
	dst = h.Sum(dst)
	m.pool.Put(h)
	return dst
}

// set replaces the keys; the newest (highest id) signs.
func (k *keyring) set(keys []Key) {
	m := make(map[uint8]*macKey, len(keys))
	var current uint8
	for _, key := range keys {
		m[key.ID] = newMACKey(key.Secret)
		current = max(current, key.ID)
	}
	k.mu.Lock()
	k.keys, k.current = m, current
	k.mu.Unlock()
}

// sign returns c signed with the newest key.
func (k *keyring) sign(c claims) string {
	k.mu.RLock()
	id, key := k.current, k.keys[k.current]
	k.mu.RUnlock()
	head := ticketHead
	if c.kind == kindPass {
		head = passHead
	}
	b := make([]byte, head, head+len(c.customer)+macSize)
	b[0], b[1] = c.kind, id
	binary.BigEndian.PutUint64(b[2:], uint64(c.product))
	binary.BigEndian.PutUint64(b[10:], uint64(c.ticket))
	if c.kind == kindPass {
		binary.BigEndian.PutUint64(b[18:], uint64(c.until.UnixMicro()))
	}
	b = append(b, c.customer...)
	b = key.sum(b, b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// verify returns what token says if it is a token of kind signed by a key of the ring:
// ErrInvalidTicket if not, errUnknownKey when only its key is unknown. The MAC is compared in
// constant time.
func (k *keyring) verify(token string, kind byte) (claims, error) {
	head := ticketHead
	if kind == kindPass {
		head = passHead
	}
	if len(token) > base64.RawURLEncoding.EncodedLen(head+maxCustomer+macSize) {
		return claims{}, ErrInvalidTicket
	}
	b, err := strictBase64.DecodeString(token)
	if err != nil || len(b) < head+macSize || b[0] != kind {
		return claims{}, ErrInvalidTicket
	}
	k.mu.RLock()
	key, ok := k.keys[b[1]]
	k.mu.RUnlock()
	if !ok {
		return claims{}, errUnknownKey
	}
	payload, sum := b[:len(b)-macSize], b[len(b)-macSize:]
	var want [macSize]byte
	if !hmac.Equal(key.sum(want[:0], payload), sum) {
		return claims{}, ErrInvalidTicket
	}
	c := claims{kind: kind,
		product:  int64(binary.BigEndian.Uint64(payload[2:])),
		ticket:   int64(binary.BigEndian.Uint64(payload[10:])),
		customer: string(payload[head:]),
	}
	if kind == kindPass {
		c.until = time.UnixMicro(int64(binary.BigEndian.Uint64(payload[18:])))
	}
	if !utf8.ValidString(c.customer) {
		return claims{}, ErrInvalidTicket
	}
	return c, nil
}
