package identity

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// header is what the pre-checks read of a token's protected header, decoded once: the key it
// names and the algorithm it claims.
type header struct {
	kid string
	alg string
}

// parseHeader checks a token's shape — three base64url segments, the first two not empty —
// and reads its header, before any key or signature is looked at. Errors: ErrMalformed (not
// the shape of a compact JWS, a header that is not a JSON object, no kid, or a header
// parameter this service does not implement: crit, b64); ErrBadSignature (no alg, or an
// empty signature).
func parseHeader(token string) (header, error) {
	first := strings.IndexByte(token, '.')
	last := strings.LastIndexByte(token, '.')
	if strings.Count(token, ".") != 2 || first == 0 || last == first+1 {
		return header{}, fmt.Errorf("%w: not three dot-separated segments", ErrMalformed)
	}
	if i := strings.IndexFunc(token, func(r rune) bool { return r != '.' && !isBase64URL(r) }); i >= 0 {
		return header{}, fmt.Errorf("%w: a character outside base64url at %d", ErrMalformed, i)
	}
	raw, err := base64.RawURLEncoding.DecodeString(token[:first])
	if err != nil {
		return header{}, fmt.Errorf("%w: header: %w", ErrMalformed, err)
	}
	// Into a map, not a struct: encoding/json would match "Crit" to a crit field, and what
	// is asked here is whether the header holds a parameter exactly so named.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return header{}, fmt.Errorf("%w: the header is not a JSON object", ErrMalformed)
	}
	// RFC 7515 §4.1.11: a recipient that does not understand every extension crit lists
	// must refuse the JWS; this service implements none. b64 (RFC 7797) changes what is
	// signed, and a compact JWT never uses it.
	for _, name := range []string{"crit", "b64"} {
		if _, ok := fields[name]; ok {
			return header{}, fmt.Errorf("%w: header parameter %q is not supported", ErrMalformed, name)
		}
	}
	var h header
	if err := json.Unmarshal(fields["kid"], &h.kid); err != nil || h.kid == "" {
		return header{}, fmt.Errorf("%w: no key id (kid) in the header", ErrMalformed)
	}
	if err := json.Unmarshal(fields["alg"], &h.alg); err != nil || h.alg == "" {
		return header{}, fmt.Errorf("%w: no algorithm (alg) in the header", ErrBadSignature)
	}
	if last == len(token)-1 {
		return header{}, fmt.Errorf("%w: no signature", ErrBadSignature)
	}
	return h, nil
}

func isBase64URL(r rune) bool {
	return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_'
}

// keyring is a key set as the pre-checks use it: each key by its kid, with the algorithms it
// may verify. It is built once per key set, so that a token costs map lookups, not jwx calls,
// before its signature.
type keyring struct {
	set   jwk.Set
	byKid map[string]ringKey
}

// ringKey is one verification key and the algorithms a token signed with it may claim.
type ringKey struct {
	key  jwk.Key
	algs map[string]jwa.SignatureAlgorithm
}

func newKeyring(set jwk.Set) *keyring {
	r := &keyring{set: set, byKid: make(map[string]ringKey, set.Len())}
	for i := range set.Len() {
		key, _ := set.Key(i)
		kid, _ := key.KeyID()
		if _, dup := r.byKid[kid]; dup || kid == "" {
			continue // a token names its key by kid: the first of a kid is the one LookupKeyID finds
		}
		r.byKid[kid] = ringKey{key: key, algs: algorithmsFor(key)}
	}
	return r
}

// algorithmsFor returns the asymmetric signature algorithms key may verify: its own alg when
// the set names one, else those its type and curve sign with (RFC 7518 §3.1). The token's
// header never adds to them: an alg of none, HS256 or another family is refused before
// anything is verified.
func algorithmsFor(key jwk.Key) map[string]jwa.SignatureAlgorithm {
	var names []string
	if alg, ok := key.Algorithm(); ok {
		names = []string{alg.String()}
	} else {
		switch key.KeyType().String() {
		case "RSA":
			names = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
		case "EC":
			if ec, ok := key.(jwk.ECDSAPublicKey); ok {
				crv, _ := ec.Crv()
				names = map[string][]string{"P-256": {"ES256"}, "P-384": {"ES384"}, "P-521": {"ES512"}, "secp256k1": {"ES256K"}}[crv.String()]
			}
		case "OKP":
			names = []string{"EdDSA", "Ed25519"}
		}
	}
	algs := map[string]jwa.SignatureAlgorithm{}
	for _, name := range names {
		if alg, ok := jwa.LookupSignatureAlgorithm(name); ok && !alg.IsSymmetric() && alg != jwa.NoSignature() {
			algs[name] = alg
		}
	}
	return algs
}
