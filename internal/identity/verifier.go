package identity

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/prometheus/client_golang/prometheus"
)

// MaxTokenLen bounds the tokens Verify reads: a customer token is a few hundred bytes, and
// anything much longer is refused before any parsing is spent on it.
const MaxTokenLen = 8 << 10

// Config configures a Verifier. Zero fields take the defaults documented on each.
type Config struct {
	// Issuer is the iss every token must carry. Required.
	Issuer string
	// Audience must be among every token's aud. Required.
	Audience string
	// JWKSFile is a file holding the JWKS (RFC 7517 key set) whose keys sign tokens. It is
	// looked at again at most every FileCheck, and at once when a token names a key it does
	// not hold; when its modification time, size or inode has changed it is read again, so a
	// rotation needs no restart. Replace it by renaming a new file over it, so that it is
	// never read half written. Exactly one of JWKSFile and JWKSURL is required.
	JWKSFile string
	// JWKSURL is an https URL serving the JWKS (plain http only from a loopback host, or
	// with AllowHTTP). It is fetched before NewVerifier returns, again every Refresh, and at
	// once (at most once per FileCheck) when a token names a key the last fetch did not hold.
	JWKSURL string
	// AllowHTTP accepts a plain-http JWKSURL on a host other than loopback: anyone on the
	// path could then replace the keys, and sign any customer's tokens. Development only.
	AllowHTTP bool
	// Refresh is how often JWKSURL is fetched again. Default 5m.
	Refresh time.Duration
	// FileCheck is the least time between two looks at the keys' source outside the regular
	// refresh: at the file's metadata, or, for a token naming an unknown key, a fetch of the
	// URL. It bounds what a flood of tokens with made-up key ids can cost. Default 1s.
	FileCheck time.Duration
	// Leeway is the clock skew allowed on exp, nbf and iat. Zero allows none.
	Leeway time.Duration
	// HTTPClient fetches JWKSURL. Default: jwx's fetch client (time-outs, bounded redirects).
	HTTPClient *http.Client
	// OnError receives the failures of a reload or refresh, after which the keys last read
	// stay in use. Nil drops them. It must not block.
	OnError func(error)
	// Now is the clock tokens are judged by. Default time.Now.
	Now func() time.Time
	// Remember bounds the verified tokens remembered (the least recently used go first).
	// Default DefaultRemember.
	Remember int
	// RememberRefused bounds the refused tokens remembered, apart from the verified ones.
	// Default DefaultRememberRefused.
	RememberRefused int
	// Registerer receives the Verifier's metrics (stocksvc_customer_token*). Nil registers
	// them nowhere.
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	if c.Refresh <= 0 {
		c.Refresh = 5 * time.Minute
	}
	if c.FileCheck <= 0 {
		c.FileCheck = time.Second
	}
	if c.OnError == nil {
		c.OnError = func(error) {}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Remember <= 0 {
		c.Remember = DefaultRemember
	}
	if c.RememberRefused <= 0 {
		c.RememberRefused = DefaultRememberRefused
	}
	return c
}

// Validate reports what is missing or wrong in c. Errors: ErrConfig.
func (c Config) Validate() error {
	var errs []error
	if c.Issuer == "" {
		errs = append(errs, errors.New("an issuer is required"))
	}
	if c.Audience == "" {
		errs = append(errs, errors.New("an audience is required"))
	}
	switch {
	case c.JWKSFile == "" && c.JWKSURL == "":
		errs = append(errs, errors.New("a JWKS file or URL is required"))
	case c.JWKSFile != "" && c.JWKSURL != "":
		errs = append(errs, errors.New("a JWKS file and a JWKS URL are both set; choose one"))
	case c.JWKSURL != "":
		if err := CheckJWKSURL(c.JWKSURL); err != nil {
			errs = append(errs, err)
		} else if err := CheckJWKSTransport(c.JWKSURL, c.AllowHTTP); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Leeway < 0 {
		errs = append(errs, errors.New("the leeway must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// CheckJWKSURL reports why raw cannot be a JWKS URL: it must be an absolute http or https URL
// with a host. Errors: plain errors saying which rule.
func CheckJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("JWKS URL %q: %w", raw, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("JWKS URL %q: the scheme must be http or https", raw)
	case u.Host == "":
		return fmt.Errorf("JWKS URL %q: no host", raw)
	}
	return nil
}

// CheckJWKSTransport reports why the JWKS URL raw (one CheckJWKSURL accepts) may not be
// fetched: plain http to a host other than loopback (127.0.0.0/8, ::1 or localhost), unless
// allowHTTP. Whoever is on the path of a plain-http fetch can serve keys of their own, and
// sign tokens for any customer; on loopback nobody is. Errors: ErrPlainHTTP.
func CheckJWKSTransport(raw string, allowHTTP bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || allowHTTP {
		return nil
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); host == "localhost" || err == nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: the JWKS URL's host %s is not loopback; use https", ErrPlainHTTP, host)
}

// ErrPlainHTTP is a JWKS URL that would be fetched over plain http from another host.
var ErrPlainHTTP = errors.New("identity: plain-http JWKS URL")

// ErrConfig is a Config that cannot make a Verifier.
var ErrConfig = errors.New("identity: bad verifier configuration")

// Verifier verifies customer tokens: compact JWS-signed JWTs whose key id names a key of the
// configured JWKS (symmetric keys are refused: a key set is published, a shared secret must
// not be), whose alg is one that key verifies, whose header has no crit (or b64), whose iss
// and aud are the configured ones, whose exp is present and not past and whose nbf is not to
// come (with the leeway), and whose sub is a valid customer id. It is safe for concurrent use;
// Close stops its background refresh.
//
// It remembers its judgements, so that a token costs one signature check, not one per request
// (design.md, "Customer identity"): a verified token is accepted from memory until its exp; a
// refused one is refused from memory until it could become valid — never, for a bad
// signature, an expiry, a wrong issuer, audience or subject; at its nbf for a token not valid
// yet — and everything is forgotten when the keys change. What is cheaper to check again than
// to remember (a token's size, shape and header, its kid and alg) is checked before anything
// else, and never remembered: a flood of made-up tokens cannot fill the memory.
type Verifier struct {
	cfg     Config
	keys    keySource
	metrics *metrics
	memory  *memory

	ringMu sync.Mutex
	ring   *keyring // the keys as last seen, for the pre-checks; guarded by ringMu
}

// NewVerifier reads the keys (the file, or a first fetch of the URL bounded by ctx) and
// returns a Verifier over them. Errors: ErrConfig; a failure to read, fetch or parse the keys.
func NewVerifier(ctx context.Context, cfg Config) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var (
		keys keySource
		err  error
	)
	if cfg.JWKSFile != "" {
		keys, err = newFileKeys(cfg.JWKSFile, cfg.FileCheck, cfg.Now, cfg.OnError)
	} else {
		keys, err = newURLKeys(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	m := newMetrics(cfg.Registerer)
	return &Verifier{cfg: cfg, keys: keys, metrics: m, memory: newMemory(cfg.Remember, cfg.RememberRefused, m)}, nil
}

// Close stops the background refresh of a JWKS URL and waits for it; a file's Verifier has
// nothing to stop. Verify must not be called after Close.
func (v *Verifier) Close() error { return v.keys.close() }

// Verify returns the customer a token names: its subject, once everything Verifier's doc lists
// holds. Errors (each also ErrInvalidToken and ErrUnauthenticated): ErrMalformed,
// ErrUnknownKey, ErrBadSignature, ErrExpired, ErrNotYetValid, ErrWrongIssuer,
// ErrWrongAudience, ErrInvalidCustomer; ErrNoCredential for an empty token;
// ErrKeysUnavailable when the keys could not be had (not a judgement of the token).
func (v *Verifier) Verify(ctx context.Context, token string) (string, error) {
	sum, ring, err := v.prepare(ctx, token)
	if err != nil {
		return "", err
	}
	if j, ok := v.memory.recall(sum, ring, v.cfg.Now()); ok {
		return v.answer(sourceMemory, j)
	}
	h, err := parseHeader(token)
	if err != nil {
		v.metrics.judged(sourcePrecheck, outcomeRefused)
		return "", err
	}
	rk, ring, err := v.key(ctx, ring, h.kid)
	if err != nil {
		return "", err
	}
	alg, ok := rk.algs[h.alg]
	if !ok {
		// Never remembered: the header says it, and reading it again costs less than a
		// memory of every made-up combination would.
		v.metrics.judged(sourcePrecheck, outcomeRefused)
		return "", fmt.Errorf("%w: alg %q is not one key %q verifies", ErrBadSignature, h.alg, h.kid)
	}
	j, r := v.check(token, rk.key, alg)
	if j.err == nil {
		v.memory.accept(sum, accepted{customer: j.customer, until: r.until, ring: ring})
	} else if r.remember {
		v.memory.refuse(sum, refused{err: j.err, until: r.until, ring: ring})
	}
	return v.answer(sourceSignature, j)
}

// Remembered returns what Verify concluded of token before, without verifying anything: the
// customer of a token verified before (and not expired since), or the refusal of one refused
// before (that still holds). The transport asks it first, to know what a request will cost
// before it pays for a signature. Errors: ErrNotRemembered when Verify has no judgement of
// token that still holds (it would check the token now); the refusals Verify returns;
// ErrKeysUnavailable.
func (v *Verifier) Remembered(ctx context.Context, token string) (string, error) {
	sum, ring, err := v.prepare(ctx, token)
	if err != nil {
		return "", err
	}
	if j, ok := v.memory.recall(sum, ring, v.cfg.Now()); ok {
		return v.answer(sourceMemory, j)
	}
	return "", ErrNotRemembered
}

// ErrNotRemembered is Remembered's answer for a token the Verifier has no judgement of: one
// it has not seen, or whose judgement no longer holds. Not ErrUnauthenticated.
var ErrNotRemembered = errors.New("identity: token not remembered")

// prepare refuses what is refused by its size alone, and returns what the token is
// remembered by and the keys as they are now.
func (v *Verifier) prepare(ctx context.Context, token string) (tokenSum, *keyring, error) {
	switch {
	case token == "":
		return tokenSum{}, nil, ErrNoCredential
	case len(token) > MaxTokenLen:
		v.metrics.judged(sourcePrecheck, outcomeRefused)
		return tokenSum{}, nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxTokenLen)
	}
	set, err := v.keys.current(ctx)
	if err != nil {
		return tokenSum{}, nil, fmt.Errorf("%w: %w", ErrKeysUnavailable, err)
	}
	return sha256.Sum256([]byte(token)), v.keyring(set), nil
}

// keyring returns the keyring of set, building it (and forgetting every judgement made with
// the keys before) when the keys changed.
func (v *Verifier) keyring(set jwk.Set) *keyring {
	v.ringMu.Lock()
	defer v.ringMu.Unlock()
	if v.ring != nil && v.ring.set == set {
		return v.ring
	}
	if v.ring != nil {
		v.memory.forget()
	}
	v.ring = newKeyring(set)
	return v.ring
}

// key returns the key kid names, looking at the keys' source again (rate-limited) when the
// keys at hand do not hold it, and the keyring it was found in. Errors: ErrUnknownKey,
// ErrKeysUnavailable.
func (v *Verifier) key(ctx context.Context, ring *keyring, kid string) (ringKey, *keyring, error) {
	if rk, ok := ring.byKid[kid]; ok {
		return rk, ring, nil
	}
	// A key the issuer has just started signing with: look again before turning the
	// customer away.
	set, err := v.keys.lookAgain(ctx)
	if err != nil {
		return ringKey{}, nil, fmt.Errorf("%w: %w", ErrKeysUnavailable, err)
	}
	ring = v.keyring(set)
	if rk, ok := ring.byKid[kid]; ok {
		return rk, ring, nil
	}
	v.metrics.judged(sourcePrecheck, outcomeRefused)
	return ringKey{}, nil, fmt.Errorf("%w: kid %q", ErrUnknownKey, kid)
}

// recollection says whether, and until when, a judgement is remembered.
type recollection struct {
	remember bool
	until    time.Time // zero: until the keys change
}

// check verifies token's signature with key and alg, then its claims.
func (v *Verifier) check(token string, key jwk.Key, alg jwa.SignatureAlgorithm) (judgement, recollection) {
	// Validation apart from parsing, so that a token refused for its times is at hand to
	// say when it could become valid.
	tok, err := jwt.Parse([]byte(token), jwt.WithKey(alg, key), jwt.WithValidate(false))
	if err != nil {
		// A signature that does not verify stays bad until the keys change; so does a
		// signed payload that is not a JWT.
		return judgement{err: refusal(err)}, recollection{remember: true}
	}
	err = jwt.Validate(tok,
		jwt.WithIssuer(v.cfg.Issuer),
		jwt.WithAudience(v.cfg.Audience),
		jwt.WithRequiredClaim(jwt.ExpirationKey),
		jwt.WithAcceptableSkew(v.cfg.Leeway),
		jwt.WithClock(jwt.ClockFunc(v.cfg.Now)),
	)
	if err != nil {
		err = refusal(err)
		if errors.Is(err, ErrNotYetValid) {
			// Valid from its nbf (or iat), less the leeway: remembered until then.
			nbf, _ := tok.NotBefore()
			iat, _ := tok.IssuedAt()
			from := nbf
			if iat.After(from) {
				from = iat
			}
			return judgement{err: err}, recollection{remember: !from.IsZero(), until: from.Add(-v.cfg.Leeway)}
		}
		// Expired, or claims that a signature fixed: refused for as long as the keys hold.
		return judgement{err: err}, recollection{remember: true}
	}
	sub, _ := tok.Subject()
	if err := CheckCustomer(sub); err != nil {
		return judgement{err: fmt.Errorf("token subject: %w", err)}, recollection{remember: true}
	}
	exp, _ := tok.Expiration() // required, and checked above
	return judgement{customer: sub}, recollection{until: exp.Add(v.cfg.Leeway)}
}

// answer counts a judgement by where it came from, and returns it.
func (v *Verifier) answer(source string, j judgement) (string, error) {
	if j.err != nil {
		v.metrics.judged(source, outcomeRefused)
		return "", j.err
	}
	v.metrics.judged(source, outcomeAccepted)
	return j.customer, nil
}

// refusal turns jwx's reason for refusing a token into this package's sentinel for it.
func refusal(err error) error {
	var sentinel error
	switch {
	case errors.Is(err, jwt.TokenExpiredError()):
		sentinel = ErrExpired
	case errors.Is(err, jwt.MissingRequiredClaimError()):
		sentinel = ErrExpired // exp is the one claim required by presence
	case errors.Is(err, jwt.TokenNotYetValidError()), errors.Is(err, jwt.InvalidIssuedAtError()):
		sentinel = ErrNotYetValid
	case errors.Is(err, jwt.InvalidIssuerError()):
		sentinel = ErrWrongIssuer
	case errors.Is(err, jwt.InvalidAudienceError()):
		sentinel = ErrWrongAudience
	case errors.Is(err, jws.VerifyError()), errors.Is(err, jws.VerificationError()):
		sentinel = ErrBadSignature
	default:
		sentinel = ErrMalformed
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}
