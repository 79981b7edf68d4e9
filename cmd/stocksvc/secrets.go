package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
)

// mask stands in for a secret wherever one would be shown.
const mask = "xxxxx"

// dsn is a connection string (DATABASE_URL, REDIS_URL) taken apart just enough to show it
// without its secrets: the password in a URL's user information, query parameters that name a
// password, and password settings of the key=value form Postgres also accepts. Everything else
// stays as it was written, so that a wrong scheme, host or port can still be seen.
type dsn struct {
	masked  string
	secrets []string // the hidden values, as written and decoded, for scrubbing other text
	// malformedAt is the byte offset where key=value syntax broke, or -1. Everything from there
	// on is hidden: where the syntax is lost, so is the certainty about what is a password.
	malformedAt int
	scheme      string // the URL scheme, "" for key=value
	// settings are the key=value form's settings, decoded, in order.
	settings [][2]string
}

// parseDSN takes s apart. It never fails: text it cannot read is hidden, not shown.
func parseDSN(s string) dsn {
	if scheme, rest, ok := cutScheme(s); ok {
		d := maskURL(rest)
		d.scheme = scheme
		d.masked = scheme + "://" + d.masked
		return d
	}
	return maskKeywordValue(s)
}

// cutScheme splits "scheme://rest" when s starts with a valid URL scheme (RFC 3986: a letter,
// then letters, digits, "+", "-" or ".").
func cutScheme(s string) (scheme, rest string, ok bool) {
	scheme, rest, ok = strings.Cut(s, "://")
	if !ok || scheme == "" {
		return "", "", false
	}
	for i := 0; i < len(scheme); i++ {
		switch c := scheme[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return "", "", false
		}
	}
	return scheme, rest, true
}

// maskURL hides the password of "userinfo@host/path?query" (what follows "scheme://") and the
// values of query parameters that name a secret.
//
// The user information ends at the last "@", as net/url and pgx read it. A password written
// with an unescaped "/", "?" or "#" would end a stricter parser's authority early and show its
// tail; taking the last "@" of the whole string instead errs the other way: an "@" after the
// host (in a query value, say) hides the host too, but never shows a secret.
func maskURL(rest string) dsn {
	d := dsn{malformedAt: -1}
	var b strings.Builder
	after := rest
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, password, hasPassword := strings.Cut(rest[:at], ":")
		b.WriteString(user)
		if hasPassword {
			b.WriteString(":")
			if password != "" {
				b.WriteString(mask)
				d.addSecret(password, url.PathUnescape)
			}
		}
		b.WriteString("@")
		after = rest[at+1:]
	}
	base, query, hasQuery := strings.Cut(after, "?")
	b.WriteString(base)
	if hasQuery {
		b.WriteString("?")
		d.maskQuery(&b, query, func(name, _ string) bool { return isSecretKey(name) }, func(string, string) bool { return true })
	}
	d.masked = b.String()
	return d
}

// maskQuery writes query to b with the value of each parameter that hide selects, by its
// decoded name and its value, replaced by the mask (a parameter without "=" is all value, under
// an empty name); scrub says which of the hidden values to remember as secrets.
func (d *dsn) maskQuery(b *strings.Builder, query string, hide, scrub func(name, value string) bool) {
	for i, param := range strings.Split(query, "&") {
		if i > 0 {
			b.WriteString("&")
		}
		key, value, hasValue := strings.Cut(param, "=")
		if !hasValue {
			key, value = "", param
		}
		name, err := url.QueryUnescape(key)
		if err != nil {
			name = key
		}
		if value == "" || !hide(name, value) {
			b.WriteString(param)
			continue
		}
		if hasValue {
			b.WriteString(key + "=")
		}
		b.WriteString(mask)
		if scrub(name, value) {
			d.addSecret(value, url.QueryUnescape)
		}
	}
}

// parseHTTPURL takes apart an http(s) URL the service fetches (STOCKSVC_JWKS_URL), as
// parseDSN does a connection string, but hides more: the whole user information, since the
// user name of a URL fetched over HTTP is as often a token as a name, and the value of every
// query parameter, since what a key server takes as a credential (access_token, api_key, a
// signed URL's signature) is not always named as one. The scheme, host, port and path stay
// readable. Text that is not such a URL is hidden whole.
func parseHTTPURL(s string) dsn {
	d := dsn{malformedAt: -1}
	if s == "" {
		return d
	}
	scheme, rest, ok := cutScheme(s)
	if !ok {
		d.hideFrom(new(strings.Builder), s, 0)
		d.masked = mask
		return d
	}
	d.scheme = scheme
	var b strings.Builder
	b.WriteString(scheme + "://")
	// The user information ends at the last "@", as for maskURL: more hidden, never less.
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		userinfo := rest[:at]
		user, password, _ := strings.Cut(userinfo, ":")
		b.WriteString(mask + "@")
		d.addSecret(userinfo, url.PathUnescape)
		d.addSecret(user, url.PathUnescape)
		d.addSecret(password, url.PathUnescape)
		rest = rest[at+1:]
	}
	base, query, hasQuery := strings.Cut(rest, "?")
	b.WriteString(base)
	if hasQuery {
		b.WriteString("?")
		// Every value is hidden, a bare parameter whole (it may be the credential itself).
		// Scrubbed from other text: a value whose name says credential, and any long enough to
		// be one; a short value under another name (format=json) is masked here but not
		// scrubbed, where it would garble every word it spells.
		d.maskQuery(&b, query, func(string, string) bool { return true }, func(name, value string) bool {
			return isCredentialParam(name) || len(value) >= minScrubbedQuery
		})
	}
	d.masked = b.String()
	return d
}

// minScrubbedQuery is the shortest value of a query parameter not named as a credential that
// parseHTTPURL has scrubbed from free text: any credential worth the name is longer.
const minScrubbedQuery = 8

// isCredentialParam reports whether a query parameter of a URL fetched over HTTP is named as a
// credential: what isSecretKey finds, and any key, signature, credential, auth or session.
func isCredentialParam(name string) bool {
	n := strings.ToLower(name)
	return isSecretKey(n) || slices.ContainsFunc([]string{"key", "sig", "cred", "auth", "session"}, func(w string) bool { return strings.Contains(n, w) })
}

// maskHTTPURL returns the URL s with its user information and query values hidden.
func maskHTTPURL(s string) string { return parseHTTPURL(s).masked }

// hide replaces raw, the value d was parsed from, wherever text quotes it, by the masked form,
// then scrubs the secrets left: errors and log lines of the libraries that use a URL quote it
// whole, as written or with Go's quoting.
func (d dsn) hide(text, raw string) string {
	if raw != "" {
		quoted := strconv.Quote(raw)
		text = strings.ReplaceAll(text, quoted[1:len(quoted)-1], d.masked)
		text = strings.ReplaceAll(text, raw, d.masked)
	}
	return newRedactor(d.secrets).scrub(text)
}

// hideError is hide for an error's text; errors.Is and errors.As still see err's chain.
func (d dsn) hideError(err error, raw string) error {
	if err == nil {
		return nil
	}
	if text := d.hide(err.Error(), raw); text != err.Error() {
		return scrubbedError{err: err, text: text}
	}
	return err
}

// maskKeywordValue hides the secret settings of the key=value form: "host=db password=s3cret"
// or "password='a b'". It follows libpq's rules: spaces may surround "=", a value is either
// single-quoted (with \' and \\ escapes) or runs to the next space (with \ escaping the next
// character).
func maskKeywordValue(s string) dsn {
	d := dsn{malformedAt: -1}
	var b strings.Builder
	i := 0
	for {
		start := i
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		b.WriteString(s[start:i])
		if i == len(s) {
			break
		}
		tokenStart := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[tokenStart:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if key == "" || i == len(s) || s[i] != '=' {
			d.hideFrom(&b, s, tokenStart)
			break
		}
		i++ // '='
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		valueStart := i
		value, end, ok := readValue(s, i)
		if !ok {
			d.hideFrom(&b, s, tokenStart)
			break
		}
		i = end
		d.settings = append(d.settings, [2]string{key, value})
		if isSecretKey(key) && value != "" {
			b.WriteString(s[tokenStart:valueStart] + mask)
			d.addSecret(s[valueStart:end], nil)
			d.addSecret(value, nil)
			continue
		}
		b.WriteString(s[tokenStart:end])
	}
	d.masked = b.String()
	return d
}

// readValue reads one key=value value starting at i: the decoded value, where it ends, and
// whether it was well formed (a quote left open is not).
func readValue(s string, i int) (string, int, bool) {
	var v strings.Builder
	if i < len(s) && s[i] == '\'' {
		for i++; i < len(s); i++ {
			switch s[i] {
			case '\\':
				if i+1 == len(s) {
					return "", i, false
				}
				i++
				v.WriteByte(s[i])
			case '\'':
				return v.String(), i + 1, true
			default:
				v.WriteByte(s[i])
			}
		}
		return "", i, false
	}
	for ; i < len(s) && !isSpace(s[i]); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		v.WriteByte(s[i])
	}
	return v.String(), i, true
}

// hideFrom writes the mask in place of s[from:] and remembers the hidden text as secrets: whole,
// word by word, and what follows each "=" without its quotes, since any of them may be the
// password that a parser quotes back.
func (d *dsn) hideFrom(b *strings.Builder, s string, from int) {
	d.malformedAt = from
	b.WriteString(mask)
	d.addSecret(s[from:], nil)
	for _, word := range strings.Fields(s[from:]) {
		d.addSecret(word, nil)
		if _, value, ok := strings.Cut(word, "="); ok {
			d.addSecret(strings.Trim(value, "'"), nil)
		}
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// addSecret remembers a hidden value as written and, when decode gives something else, as
// decoded: either may turn up in another program's message.
func (d *dsn) addSecret(raw string, decode func(string) (string, error)) {
	// As written, and as a URL query would carry it (migratorURL puts it there).
	d.secrets = append(d.secrets, raw)
	if e := url.QueryEscape(raw); e != raw {
		d.secrets = append(d.secrets, e)
	}
	if decode == nil {
		return
	}
	if v, err := decode(raw); err == nil && v != raw {
		d.secrets = append(d.secrets, v)
	}
}

// isSecretKey reports whether a query parameter or key=value setting holds a secret: password,
// sslpassword, sentinel_password, passfile (a path, but no business of a log either), and any
// token or secret.
func isSecretKey(key string) bool {
	k := strings.ToLower(key)
	return strings.Contains(k, "pass") || k == "pwd" || strings.Contains(k, "secret") || strings.Contains(k, "token")
}

// migratorURL returns the database URL golang-migrate needs. pgx also accepts key=value
// settings, and golang-migrate only a URL; pgx reads every setting from a URL's query too, so
// the settings go there, with the database name also in the path, where golang-migrate takes
// it from to name its advisory lock (the same lock as the URL form's).
func migratorURL(databaseURL string) string {
	d := parseDSN(databaseURL)
	if d.scheme != "" || d.malformedAt >= 0 {
		return databaseURL
	}
	q := url.Values{}
	u := url.URL{Scheme: "postgres", Path: "/"}
	for _, kv := range d.settings {
		q.Set(kv[0], kv[1])
		if kv[0] == "dbname" {
			u.Path = "/" + kv[1]
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// maskDSN returns s with its secrets hidden.
func maskDSN(s string) string { return parseDSN(s).masked }

// minScrubbed is the shortest secret that scrubbing replaces in free text. A shorter one would
// garble every message that happens to contain those few characters; such values are still
// masked wherever the configuration itself is shown.
const minScrubbed = 4

// redactor hides known secret values in free text: driver errors, URLs quoted by parsers,
// anything a dependency might echo. It is the backstop behind masking the configuration line.
type redactor struct {
	replacer *strings.Replacer // nil when there is nothing to hide
}

// newRedactor returns a redactor for secrets. Longer secrets are replaced first, so a secret
// that contains another is hidden whole.
func newRedactor(secrets []string) redactor {
	var keep []string
	for _, s := range secrets {
		if len(s) >= minScrubbed && !slices.Contains(keep, s) {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return redactor{}
	}
	slices.SortFunc(keep, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(keep))
	for _, s := range keep {
		pairs = append(pairs, s, mask)
	}
	return redactor{replacer: strings.NewReplacer(pairs...)}
}

func (r redactor) scrub(s string) string {
	if r.replacer == nil {
		return s
	}
	return r.replacer.Replace(s)
}

// redactHandler is a slog.Handler that scrubs known secrets from every message and attribute
// before the next handler formats them.
type redactHandler struct {
	next slog.Handler
	r    redactor
}

func (h redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.scrub(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	scrubbed := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		scrubbed[i] = h.attr(a)
	}
	return redactHandler{next: h.next.WithAttrs(scrubbed), r: h.r}
}

func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{next: h.next.WithGroup(name), r: h.r}
}

// attr scrubs one attribute. A value whose text holds no secret is passed on as it is, so that
// numbers stay numbers and errors stay errors; one that does becomes its scrubbed text.
func (h redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.scrub(v.String()))
	case slog.KindGroup:
		group := v.Group()
		scrubbed := make([]slog.Attr, len(group))
		for i, g := range group {
			scrubbed[i] = h.attr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(scrubbed...)}
	case slog.KindAny:
		text := fmt.Sprint(v.Any())
		if err, ok := v.Any().(error); ok {
			text = err.Error()
		}
		if s := h.r.scrub(text); s != text {
			return slog.String(a.Key, s)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// scrubbedError is an error whose text has had known secrets hidden; errors.Is and errors.As
// still see the original chain.
type scrubbedError struct {
	err  error
	text string
}

func (e scrubbedError) Error() string { return e.text }
func (e scrubbedError) Unwrap() error { return e.err }

// scrubError hides known secrets in err's text, for errors printed outside the log.
func (r redactor) scrubError(err error) error {
	if err == nil {
		return nil
	}
	if text := r.scrub(err.Error()); text != err.Error() {
		return scrubbedError{err: err, text: text}
	}
	return err
}

// readSecretFile reads a secret from the file a *_FILE variable names, the convention of
// container secrets (Docker and Compose secrets, Kubernetes volumes): the value without
// surrounding white space, which editors and `echo` leave behind.
func readSecretFile(variable, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", variable, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s: %s is empty", variable, path)
	}
	return v, nil
}

// errBothSet is returned when a setting comes from its variable and from its *_FILE at once:
// which one was meant cannot be guessed, and a silent choice hides a stale secret.
var errBothSet = errors.New("set one or the other, not both")
