package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/identity/identitytest"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestMaskDSN(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    string
		secrets []string // each must be hidden, and reported for scrubbing
	}{
		// Postgres URLs.
		{"postgres password", "postgres://shop:pg-Pa55word@db.example:5432/shop?sslmode=disable",
			"postgres://shop:xxxxx@db.example:5432/shop?sslmode=disable", []string{"pg-Pa55word"}},
		{"postgresql scheme", "postgresql://shop:pg-Pa55word@db.example/shop", "postgresql://shop:xxxxx@db.example/shop", []string{"pg-Pa55word"}},
		{"password query parameter", "postgres://shop@db.example/shop?password=pg-Query-Secret&sslmode=disable",
			"postgres://shop@db.example/shop?password=xxxxx&sslmode=disable", []string{"pg-Query-Secret"}},
		{"encoded parameter name", "postgres://shop@db/shop?pass%77ord=pg-Enc-Secret", "postgres://shop@db/shop?pass%77ord=xxxxx", []string{"pg-Enc-Secret"}},
		{"sslpassword parameter", "postgres://shop@db/shop?sslmode=verify-full&sslpassword=key-Secret-1",
			"postgres://shop@db/shop?sslmode=verify-full&sslpassword=xxxxx", []string{"key-Secret-1"}},
		{"percent-encoded password", "postgres://shop:p%40ss%2Fw0rd-X@db/shop", "postgres://shop:xxxxx@db/shop", []string{"p%40ss%2Fw0rd-X", "p@ss/w0rd-X"}},
		{"unescaped @ in password", "postgres://shop:p@ss-W0rd@db:5432/shop", "postgres://shop:xxxxx@db:5432/shop", []string{"p@ss-W0rd"}},
		{"several hosts", "postgres://shop:multi-Secret@db1:5432,db2:5432/shop?target_session_attrs=read-write",
			"postgres://shop:xxxxx@db1:5432,db2:5432/shop?target_session_attrs=read-write", []string{"multi-Secret"}},
		{"user without password", "postgres://shop@db.example/shop", "postgres://shop@db.example/shop", nil},
		{"no user", "postgres://db.example/shop", "postgres://db.example/shop", nil},
		{"invalid port stays readable", "postgres://shop:port-Secret@db.example:port/shop", "postgres://shop:xxxxx@db.example:port/shop", []string{"port-Secret"}},

		// The key=value form.
		{"keyword/value", "host=127.0.0.1 port=5432 user=postgres password=s3cret-kv dbname=x",
			"host=127.0.0.1 port=5432 user=postgres password=xxxxx dbname=x", []string{"s3cret-kv"}},
		{"spaces around =", "host=db password = spaced-Secret dbname=x", "host=db password = xxxxx dbname=x", []string{"spaced-Secret"}},
		{"quoted with spaces", "host=db password='a b c-Secret' dbname=x", "host=db password=xxxxx dbname=x", []string{"'a b c-Secret'", "a b c-Secret"}},
		{"quoted with escapes", `user=u password='it\'s s3cret\\' host=h`, "user=u password=xxxxx host=h", []string{`'it\'s s3cret\\'`, `it's s3cret\`}},
		{"unquoted with escape", `password=ab\ cd-Secret host=h`, "password=xxxxx host=h", []string{`ab\ cd-Secret`, "ab cd-Secret"}},
		{"tabs and newlines", "host=db\tpassword=tab-Secret\nuser=u", "host=db\tpassword=xxxxx\nuser=u", []string{"tab-Secret"}},
		{"sslpassword setting", "host=db sslpassword=keyfile-Secret sslkey=/etc/key.pem", "host=db sslpassword=xxxxx sslkey=/etc/key.pem", []string{"keyfile-Secret"}},
		{"empty password", "host=db password='' user=u", "host=db password='' user=u", nil},
		{"missing =: the rest is hidden", "host=db password hidden-Secret", "host=db xxxxx", []string{"hidden-Secret"}},
		{"unterminated quote", "host=db password='open-Secret dbname=x", "host=db xxxxx", []string{"open-Secret"}},
		{"not a connection string", "notaurl", "xxxxx", nil},

		// Redis URLs.
		{"redis password only", "redis://:redis-Only-Password@cache.example:6379/1", "redis://:xxxxx@cache.example:6379/1", []string{"redis-Only-Password"}},
		{"redis user and password", "redis://default:redis-Pa55word@cache.example:6379/0", "redis://default:xxxxx@cache.example:6379/0", []string{"redis-Pa55word"}},
		{"rediss", "rediss://app:tls-Pa55word@cache.example:6380/0?skip_verify=false", "rediss://app:xxxxx@cache.example:6380/0?skip_verify=false", []string{"tls-Pa55word"}},
		{"sentinel with addr parameters", "redis://:sentinel-Pa55@s1:26379?master_name=mymaster&addr=s2:26379&addr=s3:26379&sentinel_password=sent-Other",
			"redis://:xxxxx@s1:26379?master_name=mymaster&addr=s2:26379&addr=s3:26379&sentinel_password=xxxxx", []string{"sentinel-Pa55", "sent-Other"}},
		{"cluster with addr parameters", "redis://app:cluster-Pa55@n1:7000?addr=n2:7000&addr=n3:7000&dialer_retries=2",
			"redis://app:xxxxx@n1:7000?addr=n2:7000&addr=n3:7000&dialer_retries=2", []string{"cluster-Pa55"}},
		{"unix socket with password parameter", "unix:///run/redis.sock?db=2&password=sock-Pa55", "unix:///run/redis.sock?db=2&password=xxxxx", []string{"sock-Pa55"}},
		{"redis without secrets", "redis://localhost:6379/0", "redis://localhost:6379/0", nil},
		// An "@" after the host hides more than it must, never less.
		{"@ in a query value", "redis://cache:6379/0?client_name=a@b", "redis://cache:xxxxx@b", nil},

		// The wrong scheme stays readable: only the password goes.
		{"mysql URL", "mysql://root:my-Pa55word@db.example:3306/shop", "mysql://root:xxxxx@db.example:3306/shop", []string{"my-Pa55word"}},
		{"http URL", "http://127.0.0.1:6379", "http://127.0.0.1:6379", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := parseDSN(tt.in)
			if d.masked != tt.want {
				t.Errorf("maskDSN(%q)\n got %q\nwant %q", tt.in, d.masked, tt.want)
			}
			for _, s := range tt.secrets {
				if strings.Contains(d.masked, s) {
					t.Errorf("secret %q shown in %q", s, d.masked)
				}
				if !slices.Contains(d.secrets, s) {
					t.Errorf("secret %q not reported for scrubbing: %q", s, d.secrets)
				}
			}
		})
	}
}

func TestRedactHandler(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-Secret"
	var buf bytes.Buffer
	log := slog.New(redactHandler{next: slog.NewJSONHandler(&buf, nil), r: newRedactor([]string{secret, "ab"})})
	log = log.With(slog.String("bound", "with "+secret))
	log.Info("message names "+secret,
		slog.String("plain", "a "+secret+" b"),
		slog.Any("error", fmt.Errorf("connect: %w", errors.New("dial postgres://u:"+secret+"@db"))),
		slog.Group("nested", slog.String("deep", secret)),
		slog.Any("valuer", secretValuer(secret)),
		slog.Int("count", 3),
		slog.Any("clean_error", errors.New("no secret here, ab")),
	)
	line := buf.String()
	if strings.Contains(line, secret) {
		t.Fatalf("secret in log line: %s", line)
	}
	for _, want := range []string{`"msg":"message names xxxxx"`, `"bound":"with xxxxx"`, `"plain":"a xxxxx b"`,
		`"error":"connect: dial postgres://u:xxxxx@db"`, `"nested":{"deep":"xxxxx"}`, `"valuer":"value xxxxx"`,
		`"count":3`, `"clean_error":"no secret here, ab"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %s: %s", want, line)
		}
	}
}

type secretValuer string

func (s secretValuer) LogValue() slog.Value { return slog.StringValue("value " + string(s)) }

func TestRedactorScrubError(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("base")
	err := fmt.Errorf("open tok-Secret-9: %w", sentinel)
	got := newRedactor([]string{"tok-Secret-9"}).scrubError(err)
	if got.Error() != "open xxxxx: base" || !errors.Is(got, sentinel) {
		t.Errorf("scrubError = %q (Is sentinel: %v), want the secret hidden and the chain kept", got, errors.Is(got, sentinel))
	}
	clean := errors.New("nothing to hide")
	if got := newRedactor([]string{"tok-Secret-9"}).scrubError(clean); got != clean {
		t.Errorf("scrubError changed an error without secrets: %v", got)
	}
}

// TestConfigSecretsInPlainSight checks that a password also written openly in its connection
// string (the common postgres:postgres) is masked in the configuration line but not scrubbed
// from every other line, which would garble each mention of the database.
func TestConfigSecretsInPlainSight(t *testing.T) {
	t.Parallel()
	c, _, err := loadConfig(nil, envOf(map[string]string{
		"DATABASE_URL":         "postgres://postgres:postgres@127.0.0.1:5432/stocksvc?sslmode=disable",
		"STOCKSVC_ADMIN_TOKEN": "tok-Secret-77-8faab3cccff97e5a",
	}), io.Discard)
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if got := c.secrets(); !slices.Equal(got, []string{"tok-Secret-77-8faab3cccff97e5a"}) {
		t.Errorf("secrets() = %q, want only the admin token", got)
	}
	var buf bytes.Buffer
	log := newLogger(c, &buf, newRedactor(c.secrets()))
	log.Info("starting", c.logAttrs()...)
	log.Warn("waiting for dependency", slog.String("dependency", "postgres"))
	if out := buf.String(); !strings.Contains(out, `"database_url":"postgres://postgres:xxxxx@127.0.0.1:5432/stocksvc?sslmode=disable"`) ||
		!strings.Contains(out, `"dependency":"postgres"`) {
		t.Errorf("log garbled or unmasked:\n%s", out)
	}
}

// writeSecret writes content to a file of the test's own and returns its path.
func writeSecret(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("write secret: %v", err)
	}
	return path
}

func TestLoadConfigSecretFiles(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL_FILE":         writeSecret(t, "postgres://shop:file-Pa55@db.example/shop\n"),
		"REDIS_URL_FILE":            writeSecret(t, "  redis://:file-Redis@cache.example:6379/2\r\n"),
		"STOCKSVC_ADMIN_TOKEN_FILE": writeSecret(t, "file-admin-token-8faab3cccff97e5a\n"),
	}
	c, _, err := loadConfig(nil, envOf(env), io.Discard)
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if c.DatabaseURL != "postgres://shop:file-Pa55@db.example/shop" || c.RedisURL != "redis://:file-Redis@cache.example:6379/2" || c.AdminToken != "file-admin-token-8faab3cccff97e5a" {
		t.Errorf("from files: database %q, redis %q, token %q", c.DatabaseURL, c.RedisURL, c.AdminToken)
	}
	line, _ := logLine(t, c)
	for _, s := range []string{"file-Pa55", "file-Redis", "file-admin-token-8faab3cccff97e5a"} {
		if strings.Contains(line, s) {
			t.Errorf("secret %q read from a file appears in the start-up line: %s", s, line)
		}
	}

	// A flag still wins over both.
	c, _, err = loadConfig([]string{"-admin-token", "flag-token-5f0c1e2d3b4a6978"}, envOf(map[string]string{"STOCKSVC_ADMIN_TOKEN_FILE": "/nonexistent/token"}), io.Discard)
	if err != nil || c.AdminToken != "flag-token-5f0c1e2d3b4a6978" {
		t.Errorf("flag over an unreadable file: token %q, err %v; want the flag's value", c.AdminToken, err)
	}

	empty := writeSecret(t, " \n")
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"both set", map[string]string{"DATABASE_URL": "postgres://a@b/c", "DATABASE_URL_FILE": env["DATABASE_URL_FILE"]}, "DATABASE_URL and DATABASE_URL_FILE are both set"},
		{"both set for the token", map[string]string{"STOCKSVC_ADMIN_TOKEN": "t", "STOCKSVC_ADMIN_TOKEN_FILE": env["STOCKSVC_ADMIN_TOKEN_FILE"]}, "STOCKSVC_ADMIN_TOKEN and STOCKSVC_ADMIN_TOKEN_FILE are both set"},
		{"missing file", map[string]string{"REDIS_URL_FILE": "/nonexistent/redis-url"}, "REDIS_URL_FILE: open /nonexistent/redis-url"},
		{"empty file", map[string]string{"STOCKSVC_ADMIN_TOKEN_FILE": empty}, "STOCKSVC_ADMIN_TOKEN_FILE: " + empty + " is empty"},
	}
	for _, tt := range tests {
		_, _, err := loadConfig(nil, envOf(tt.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: loadConfig = %v, want an error containing %q", tt.name, err, tt.want)
		}
		if tt.name == "both set" && !errors.Is(err, errBothSet) {
			t.Errorf("both set: %v is not errBothSet", err)
		}
	}
}

// TestLoadConfigBadURLs checks that connection strings that cannot be right are refused while
// the configuration is read, before anything is dialled, with the value shown masked.
func TestLoadConfigBadURLs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		env    map[string]string
		want   []string
		secret string
	}{
		{"not a connection string", map[string]string{"DATABASE_URL": "notaurl"},
			[]string{`DATABASE_URL "xxxxx": neither a postgres:// URL nor key=value settings (unreadable from character 1 on)`}, "notaurl"},
		{"wrong scheme", map[string]string{"DATABASE_URL": "mysql://root:my-Pa55word@db.example:3306/shop"},
			[]string{`DATABASE_URL "mysql://root:xxxxx@db.example:3306/shop": scheme "mysql" is not postgres:// or postgresql://`}, "my-Pa55word"},
		{"invalid port", map[string]string{"DATABASE_URL": "postgres://shop:port-Secret@db.example:port/shop"},
			[]string{`DATABASE_URL "postgres://shop:xxxxx@db.example:port/shop": `, "port"}, "port-Secret"},
		{"unknown sslmode", map[string]string{"DATABASE_URL": "host=db password='kv Secret' sslmode=sometimes"},
			[]string{`DATABASE_URL "host=db password=xxxxx sslmode=sometimes": `, "sslmode"}, "kv Secret"},
		{"broken key=value", map[string]string{"DATABASE_URL": "host=db password"},
			[]string{`DATABASE_URL "host=db xxxxx": neither a postgres:// URL nor key=value settings (unreadable from character 9 on)`}, ""},
		{"redis scheme", map[string]string{"REDIS_URL": "http://:http-Secret@127.0.0.1:6379"},
			[]string{`REDIS_URL "http://:xxxxx@127.0.0.1:6379": parse REDIS_URL: redis: invalid URL scheme: http`}, "http-Secret"},
		{"redis not a URL", map[string]string{"REDIS_URL": "localhost:6379"},
			[]string{`REDIS_URL "xxxxx": not a URL`}, ""},
		{"redis database number", map[string]string{"REDIS_URL": "redis://:db-Secret@cache:6379/zero"},
			[]string{`REDIS_URL "redis://:xxxxx@cache:6379/zero": parse REDIS_URL: redis: invalid database number`}, "db-Secret"},
		{"redis port", map[string]string{"REDIS_URL": "redis://:port-Secret-R@cache:port/0"},
			[]string{`REDIS_URL "redis://:xxxxx@cache:port/0": `}, "port-Secret-R"},
		{"sentinel without master", map[string]string{"STOCKSVC_REDIS_MODE": "sentinel", "REDIS_URL": "redis://:s-Secret-1@s1:26379?addr=s2:26379"},
			[]string{`REDIS_URL "redis://:xxxxx@s1:26379?addr=s2:26379": parse REDIS_URL for sentinel: no ?master_name=`}, "s-Secret-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := loadConfig(nil, envOf(tt.env), io.Discard)
			if err == nil {
				t.Fatalf("loadConfig(%v) accepted it", tt.env)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tt.secret != "" && strings.Contains(err.Error(), tt.secret) {
				t.Errorf("error shows the secret %q: %v", tt.secret, err)
			}
		})
	}
}

// TestRunRefusesMalformedURLAtOnce runs the program with a connection string that cannot be
// parsed and a start-up timeout far longer than the test allows: run must return the parse
// error, not wait for a dependency that can never be reached.
func TestRunRefusesMalformedURLAtOnce(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{
		{"DATABASE_URL": "notaurl"},
		{"REDIS_URL": "redis://cache:6379/notanumber"},
	} {
		env["STOCKSVC_STARTUP_TIMEOUT"] = "10m"
		env["STOCKSVC_ADDR"] = "127.0.0.1:0"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var stderr bytes.Buffer
		err := run(ctx, func() {}, nil, envOf(env), stdio{stdout: io.Discard, stderr: &stderr})
		cancel()
		if err == nil || !strings.Contains(err.Error(), "_URL") {
			t.Errorf("run with %v = %v, want the parse error at once; output:\n%s", env, err, stderr.String())
		}
		if stderr.Len() != 0 {
			t.Errorf("run with %v logged before giving up:\n%s", env, stderr.String())
		}
	}
}

// TestBinaryMalformedURLExitsAtOnce runs the real binary with DATABASE_URL=notaurl: exit 1 with
// the cause, long before the start-up timeout.
func TestBinaryMalformedURLExitsAtOnce(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{"DATABASE_URL=notaurl", "STOCKSVC_STARTUP_TIMEOUT=10m", "STOCKSVC_ADDR=127.0.0.1:0"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || ctx.Err() != nil {
		t.Fatalf("stocksvc with DATABASE_URL=notaurl: %v (context: %v), want exit status 1; output:\n%s", err, ctx.Err(), out)
	}
	if want := "stocksvc: DATABASE_URL \"xxxxx\": neither a postgres:// URL nor key=value settings"; !strings.HasPrefix(string(out), want) {
		t.Errorf("output %q, want it to start with %q", out, want)
	}
}

// withPassword returns the test database URL with password in its user information, and the
// same connection as key=value settings. The test servers trust loopback connections (CI) or
// check the password (testcontainers); either way a start attempt runs and logs.
func withPassword(t *testing.T, password string) (urlForm, keywordForm func(quoted bool) string) {
	t.Helper()
	u, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatalf("parse test database URL: %v", err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	host, port := u.Hostname(), u.Port()
	db := strings.TrimPrefix(u.Path, "/")
	return func(query bool) string {
			if !query {
				return u.String()
			}
			v := *u
			v.User = url.User(u.User.Username())
			q := v.Query()
			q.Set("password", password)
			v.RawQuery = q.Encode()
			return v.String()
		}, func(quoted bool) string {
			pw := password
			if quoted {
				pw = "'" + strings.ReplaceAll(password, "'", `\'`) + "'"
			}
			return fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s sslmode=disable", host, port, u.User.Username(), pw, db)
		}
}

// TestRunLogsNoSecrets makes real start attempts with secrets in every connection string form
// and checks every line written, up to readiness and shutdown or to the failure, for them. The
// attempts that reach Postgres serve and stop — without Redis when it is not listening,
// logging its driver's error in the warning that says so —; the others fail after a short
// start-up timeout, logging the drivers' own errors on the way.
func TestRunLogsNoSecrets(t *testing.T) {
	t.Parallel()
	redisAddr := strings.TrimPrefix(strings.TrimPrefix(testenv.RedisURL(t), "redis://"), "//")
	redisAddr, _, _ = strings.Cut(redisAddr, "/")
	if i := strings.LastIndexByte(redisAddr, '@'); i >= 0 {
		redisAddr = redisAddr[i+1:] // the test server's own credentials are not what this test hides
	}
	closed := func() string { return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) }

	tests := []struct {
		name      string
		env       func(pgPass, redisPass string) map[string]string
		wantReady bool // with servers that trust loopback, as CI's do
	}{
		{"URL password, redis password", func(pg, rp string) map[string]string {
			u, _ := withPassword(t, pg)
			return map[string]string{"DATABASE_URL": u(false), "REDIS_URL": "redis://:" + rp + "@" + redisAddr + "/0"}
		}, true},
		{"password query parameter, redis user and password", func(pg, rp string) map[string]string {
			u, _ := withPassword(t, pg)
			return map[string]string{"DATABASE_URL": u(true), "REDIS_URL": "redis://default:" + rp + "@" + redisAddr + "/0"}
		}, true},
		{"key=value, redis password", func(pg, rp string) map[string]string {
			_, kv := withPassword(t, pg)
			return map[string]string{"DATABASE_URL": kv(false), "REDIS_URL": "redis://:" + rp + "@" + redisAddr + "/0?client_name=stocksvc"}
		}, true},
		// Not rediss to the plain test server: go-redis's background redial would then wait
		// for a TLS handshake that never comes, past the test.
		{"quoted key=value, rediss, nothing listening", func(pg, rp string) map[string]string {
			_, kv := withPassword(t, pg+" with spaces")
			return map[string]string{"DATABASE_URL": kv(true), "REDIS_URL": "rediss://app:" + rp + "@" + closed() + "/0"}
		}, true},
		{"sentinel URL with addr parameters, nothing listening", func(pg, rp string) map[string]string {
			u, _ := withPassword(t, pg)
			return map[string]string{"DATABASE_URL": u(false), "STOCKSVC_REDIS_MODE": "sentinel",
				"REDIS_URL": "redis://:" + rp + "@" + closed() + "?master_name=mymaster&addr=" + closed() + "&password=" + rp + "-master"}
		}, true},
		{"cluster URL with addr parameters, nothing listening", func(pg, rp string) map[string]string {
			u, _ := withPassword(t, pg)
			return map[string]string{"DATABASE_URL": u(false), "STOCKSVC_REDIS_MODE": "cluster",
				"REDIS_URL": "redis://app:" + rp + "@" + closed() + "?addr=" + closed()}
		}, true},
		{"postgres not listening", func(pg, rp string) map[string]string {
			return map[string]string{"DATABASE_URL": "postgres://shop:" + pg + "@" + closed() + "/shop?sslmode=disable&connect_timeout=1"}
		}, false},
		{"wrong scheme", func(pg, rp string) map[string]string {
			return map[string]string{"DATABASE_URL": "mysql://root:" + pg + "@" + closed() + "/shop"}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pgPass, redisPass, token := "Pg-"+randomHex(t, 6), "Rd-"+randomHex(t, 6), "Tok-"+randomHex(t, 16)
			env := serveEnv(t, testenv.KeyPrefix(t), tt.env(pgPass, redisPass))
			env["STOCKSVC_ADMIN_TOKEN"] = token
			env["STOCKSVC_STARTUP_TIMEOUT"] = "1s"
			env["STOCKSVC_SHUTDOWN_DELAY"] = "0s"
			in := launch(t, env)
			wctx, cancel := context.WithTimeout(context.Background(), startTimeout)
			_, readyErr := in.Logs.wait(wctx, in.done, "ready")
			cancel()
			runErr := in.stop(t)
			output := in.Logs.String()
			if runErr != nil {
				output += "\nrun: " + runErr.Error()
			}
			for _, s := range []string{pgPass, redisPass, token} {
				if strings.Contains(output, s) {
					t.Errorf("secret %q written during start-up:\n%s", s, output)
				}
			}
			if tt.name == "wrong scheme" {
				if runErr == nil || !strings.Contains(runErr.Error(), `"mysql://root:xxxxx@127.0.0.1:`) {
					t.Errorf("run = %v, want the wrong scheme shown without its password", runErr)
				}
				return
			}
			starting, ok := in.Logs.find("starting")
			if !ok || starting["database_url"] != maskDSN(env["DATABASE_URL"]) || !strings.Contains(fmt.Sprint(starting["database_url"]), "127.0.0.1") {
				t.Errorf("starting line %v, want the database URL masked and otherwise readable; run: %v", starting, runErr)
			}
			if trustingServers(t) && tt.wantReady != (readyErr == nil) {
				t.Errorf("ready = %v (%v), want %v; logs:\n%s", readyErr == nil, readyErr, tt.wantReady, output)
			}
			if !tt.wantReady && runErr == nil {
				t.Errorf("run succeeded, want a start-up failure; logs:\n%s", output)
			}
		})
	}
}

// trustingServers reports whether the test servers take connections without a password, as
// CI's do: then any password in a URL is ignored, and a start with one must become ready.
func trustingServers(t *testing.T) bool {
	t.Helper()
	for _, raw := range []string{testenv.DatabaseURL(t), testenv.RedisURL(t)} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("parse %q: %v", raw, err)
		}
		if _, set := u.User.Password(); set {
			return false
		}
	}
	return true
}

func TestMigratorURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://u:p@h:5432/db?sslmode=disable", "postgres://u:p@h:5432/db?sslmode=disable"},
		{"host=h port=5432 user=u password='a b' dbname=shop sslmode=disable",
			"postgres:///shop?dbname=shop&host=h&password=a+b&port=5432&sslmode=disable&user=u"},
		{"host=h user=u", "postgres:///?host=h&user=u"},
		{"host=h password", "host=h password"}, // unreadable: left for the parser to refuse
	}
	for _, tt := range tests {
		if got := migratorURL(tt.in); got != tt.want {
			t.Errorf("migratorURL(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
}

// TestMaskHTTPURL: the JWKS URL is shown with its whole user information and every query
// value hidden, the rest readable; the hidden values are reported for scrubbing, but for a
// short one under a name that says nothing of a credential.
func TestMaskHTTPURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		want     string
		secrets  []string // each must be hidden, and reported for scrubbing
		shownNot []string // hidden, and not scrubbed from other text
	}{
		{"plain", "https://id.example/.well-known/jwks.json", "https://id.example/.well-known/jwks.json", nil, nil},
		{"user and password", "https://jwks-user:jwks-Pa55@id.example:8443/jwks", "https://xxxxx@id.example:8443/jwks", []string{"jwks-user", "jwks-Pa55", "jwks-user:jwks-Pa55"}, nil},
		{"a token as the user", "https://ghp-Token-0123456789@id.example/jwks", "https://xxxxx@id.example/jwks", []string{"ghp-Token-0123456789"}, nil},
		{"percent-encoded password", "https://u:p%40ss-W0rd-X@id.example/jwks", "https://xxxxx@id.example/jwks", []string{"p%40ss-W0rd-X", "p@ss-W0rd-X"}, nil},
		{"access_token", "https://id.example/jwks?access_token=at-Secret-42", "https://id.example/jwks?access_token=xxxxx", []string{"at-Secret-42"}, nil},
		{"any query value", "https://bucket.example/jwks.json?X-Amz-Credential=AKIA0123456789%2F2026&X-Amz-Signature=0f1e2d3c4b5a6978&format=json",
			"https://bucket.example/jwks.json?X-Amz-Credential=xxxxx&X-Amz-Signature=xxxxx&format=xxxxx",
			[]string{"AKIA0123456789%2F2026", "AKIA0123456789/2026", "0f1e2d3c4b5a6978"}, []string{"json"}},
		{"a bare parameter", "https://id.example/jwks?bare-Secret-77", "https://id.example/jwks?xxxxx", []string{"bare-Secret-77"}, nil},
		{"short value named as a credential", "https://id.example/jwks?api_key=ab12&sig=cd34&v=k1", "https://id.example/jwks?api_key=xxxxx&sig=xxxxx&v=xxxxx", []string{"ab12", "cd34"}, []string{"k1"}},
		{"everything", "http://svc:basic-Pa55@127.0.0.1:9999/keys?token=tok-Query-9&v=2", "http://xxxxx@127.0.0.1:9999/keys?token=xxxxx&v=xxxxx",
			[]string{"basic-Pa55", "tok-Query-9"}, []string{"2"}},
		{"not a URL", "id.example/jwks?access_token=x", "xxxxx", []string{"id.example/jwks?access_token=x"}, nil},
		{"empty", "", "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := parseHTTPURL(tt.in)
			if d.masked != tt.want {
				t.Errorf("parseHTTPURL(%q)\n got %q\nwant %q", tt.in, d.masked, tt.want)
			}
			for _, s := range tt.secrets {
				if strings.Contains(d.masked, s) {
					t.Errorf("secret %q shown in %q", s, d.masked)
				}
				if !slices.Contains(d.secrets, s) {
					t.Errorf("secret %q not reported for scrubbing: %q", s, d.secrets)
				}
			}
			for _, s := range tt.shownNot {
				if slices.Contains(d.secrets, s) {
					t.Errorf("%q reported for scrubbing: it would garble every line that spells it", s)
				}
			}
		})
	}
}

// TestJWKSURLSecrets: the JWKS URL's credentials are masked in the configuration line and
// scrubbed from every other line, and an error that quotes the URL whole, as jwx, httprc and
// net/http do, shows it masked.
func TestJWKSURLSecrets(t *testing.T) {
	t.Parallel()
	raw := "https://jwks-user:jwks-Pa55-0@id.example/jwks?access_token=at-Secret-42&format=json"
	c, _, err := loadConfig(nil, envOf(map[string]string{"STOCKSVC_JWKS_URL": raw}), io.Discard)
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	for _, s := range []string{"jwks-user", "jwks-Pa55-0", "at-Secret-42"} {
		if !slices.Contains(c.secrets(), s) {
			t.Errorf("secrets() = %q, want %q among them", c.secrets(), s)
		}
	}
	var buf bytes.Buffer
	log := newLogger(c, &buf, newRedactor(c.secrets()))
	log.Info("starting", c.logAttrs()...)
	log.Warn("customer keys not reloaded", slog.Any("error", fmt.Errorf("JWKS URL refresh: %w",
		errors.New(`Get "https://jwks-user:***@id.example/jwks?access_token=at-Secret-42&format=json": dial tcp: connection refused`))))
	out := buf.String()
	for _, s := range []string{"jwks-user", "jwks-Pa55-0", "at-Secret-42"} {
		if strings.Contains(out, s) {
			t.Errorf("%q in the log:\n%s", s, out)
		}
	}
	if !strings.Contains(out, `"jwks_url":"https://xxxxx@id.example/jwks?access_token=xxxxx&format=xxxxx"`) || !strings.Contains(out, `&format=json`) {
		t.Errorf("the configuration line is not masked and otherwise readable:\n%s", out)
	}

	sentinel := errors.New("first fetch failed")
	hidden := parseHTTPURL(raw).hideError(fmt.Errorf("customer keys: JWKS URL %s: %w; fetching %q", raw, sentinel, raw), raw)
	const want = `customer keys: JWKS URL https://xxxxx@id.example/jwks?access_token=xxxxx&format=xxxxx: first fetch failed; fetching "https://xxxxx@id.example/jwks?access_token=xxxxx&format=xxxxx"`
	if hidden.Error() != want || !errors.Is(hidden, sentinel) {
		t.Errorf("hideError = %q (Is the cause: %v)\nwant %q with the chain kept", hidden, errors.Is(hidden, sentinel), want)
	}
}

// TestLoadConfigBadJWKSURL: a JWKS URL refused while the configuration is read is shown
// masked in the error run prints, before any log exists to scrub it.
func TestLoadConfigBadJWKSURL(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"ftp://jwks-user:jwks-Pa55-0@id.example/jwks?access_token=at-Secret-42",
		"https://jwks-user:jwks-Pa55-0@id example/jwks?access_token=at-Secret-42",
		"https://jwks-user:jwks-Pa55-0@/jwks?access_token=at-Secret-42",
	} {
		_, _, err := loadConfig(nil, envOf(map[string]string{"STOCKSVC_JWKS_URL": raw}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "STOCKSVC_JWKS_URL") {
			t.Errorf("loadConfig with STOCKSVC_JWKS_URL=%s = %v, want it refused", raw, err)
			continue
		}
		for _, s := range []string{"jwks-user", "jwks-Pa55-0", "at-Secret-42"} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("error shows %q: %v", s, err)
			}
		}
	}
}

// TestRunLogsNoJWKSURLSecrets serves in token mode with credentials in STOCKSVC_JWKS_URL (a
// user and password, an access_token, a signature) against a key server of the test's own,
// and checks every line written, and run's error, for them: when the first fetch fails (the
// `exiting` line), when nothing listens, and when a refresh fails after a good start (the
// warning that the keys read before stay in use). jwx, httprc and net/http quote the URL in
// their errors.
func TestRunLogsNoJWKSURLSecrets(t *testing.T) {
	t.Parallel()
	is, err := identitytest.NewIssuer("https://id.test", "shop")
	if err != nil {
		t.Fatal(err)
	}
	user, password, token, sig := "ku-"+randomHex(t, 6), "Kp-"+randomHex(t, 6), "At-"+randomHex(t, 6), "Sg-"+randomHex(t, 6)
	var broken atomic.Bool
	keys := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		if broken.Load() || u != user || p != password || r.URL.Query().Get("access_token") != token || r.URL.Query().Get("sig") != sig {
			http.Error(w, "no keys for you", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(is.JWKS())
	}))
	t.Cleanup(keys.Close)
	withCredentials := func(base string) string {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(user, password)
		u.Path = "/jwks"
		u.RawQuery = url.Values{"access_token": {token}, "sig": {sig}}.Encode()
		return u.String()
	}
	secrets := []string{user, password, token, sig}

	tests := []struct {
		name      string
		url       string
		breakKeys bool // the first fetch fails
		wantWarn  bool // start, then fail a refresh
	}{
		{name: "first fetch refused", url: withCredentials(keys.URL), breakKeys: true},
		{name: "nothing listening", url: withCredentials(fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)))},
		{name: "refresh fails", url: withCredentials(keys.URL), wantWarn: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: the cases share the key server's state.
			broken.Store(tt.breakKeys)
			_, prefix := testenv.Redis(t)
			env := serveEnv(t, prefix, map[string]string{
				"STOCKSVC_CUSTOMER_AUTH":   "token",
				"STOCKSVC_JWKS_URL":        tt.url,
				"STOCKSVC_JWKS_REFRESH":    "1s",
				"STOCKSVC_JWT_ISSUER":      "https://id.test",
				"STOCKSVC_JWT_AUDIENCE":    "shop",
				"STOCKSVC_STARTUP_TIMEOUT": "3s",
				"STOCKSVC_SHUTDOWN_DELAY":  "0s",
			})
			in := launch(t, env)
			wctx, cancel := context.WithTimeout(context.Background(), startTimeout)
			defer cancel()
			if tt.wantWarn {
				if _, err := in.Logs.wait(wctx, in.done, "customer identity"); err != nil {
					t.Fatalf("%v; logs:\n%s", err, in.Logs)
				}
				broken.Store(true)
				if _, err := in.Logs.wait(wctx, in.done, "customer keys not reloaded; the keys read before stay in use"); err != nil {
					t.Fatalf("%v; logs:\n%s", err, in.Logs)
				}
			} else if _, err := in.Logs.wait(wctx, in.done, "exiting"); err != nil {
				t.Fatalf("%v; logs:\n%s", err, in.Logs)
			}
			runErr := in.stop(t)
			output := in.Logs.String()
			if runErr != nil {
				output += "\nrun: " + runErr.Error()
			}
			for _, s := range secrets {
				if strings.Contains(output, s) {
					t.Errorf("secret %q written:\n%s", s, output)
				}
			}
			if rec, ok := in.Logs.find("customer identity"); !ok || !strings.Contains(fmt.Sprint(rec["jwks_url"]), "xxxxx@127.0.0.1:") {
				t.Errorf("customer identity line %v, want the JWKS URL masked and otherwise readable", rec)
			}
			if tt.wantWarn == (runErr != nil) {
				t.Errorf("run = %v; want an error only when start-up failed; logs:\n%s", runErr, output)
			}
		})
	}
}
