package stock

import (
	"crypto/sha256"
	"encoding/binary"
)

// restockFingerprint identifies a restock request's meaning: the product and the quantity.
func restockFingerprint(productID, quantity int64) []byte {
	var buf [16]byte
	binary.BigEndian.PutUint64(buf[:8], uint64(productID))
	binary.BigEndian.PutUint64(buf[8:], uint64(quantity))
	sum := sha256.Sum256(append([]byte("restock\x00"), buf[:]...))
	return sum[:]
}

// requestFingerprint identifies a request's meaning: the same customer buying the same items,
// in whatever order they were listed.
func requestFingerprint(customerID string, sortedItems []Item) []byte {
	h := sha256.New()
	h.Write([]byte(customerID))
	h.Write([]byte{0})
	var buf [16]byte
	for _, it := range sortedItems {
		binary.BigEndian.PutUint64(buf[:8], uint64(it.ProductID))
		binary.BigEndian.PutUint64(buf[8:], uint64(it.Quantity))
		h.Write(buf[:])
	}
	return h.Sum(nil)
}
