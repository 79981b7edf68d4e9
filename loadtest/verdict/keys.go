package verdict

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// Key reconciliation (issue #18 item 11): every Idempotency-Key a drill's clients sent with an
// order, against what Postgres stored under it. The Porcupine check reads a 429 as "nothing
// happened in this attempt", and so cannot see a refusal given for a key whose order had been
// sold: a buyer who believes it walks away from an order, one who retries without the key buys
// twice. What must hold, key by key:
//
//   - stored confirmed ⇒ the client was told 201, or never got a definitive answer: a key
//     every attempt of which was refused (429, 409, 422: the client was told, without
//     ambiguity, that nothing was sold) must not be stored confirmed;
//   - no refusal may come for a key after its confirmed record was stored — well after, by
//     the record's created_at (Postgres's now(), the start of the transaction that wrote it)
//     and refusalSlack, even if an earlier attempt of the key was left without an answer;
//   - told 201 ⇒ stored confirmed, naming the order the 201 named;
//   - stored confirmed ⇒ some client sent the key.
//
// Restocks keep their keys in the restocks table, which reconcileRestocks checks.

// refusalSlack is how long after a record's created_at a refusal of its key counts as given
// while the record was there. created_at is when the writing transaction began, not when it
// committed; a refusal decided while that transaction was still open, and received a little
// later, told the truth as the service could see it. A batch's transaction is one statement
// that takes milliseconds; half a second leaves room for a loaded machine, and is still short
// of the lock wait after which the refusals this check is for are given.
const refusalSlack = 500 * time.Millisecond

// sentKey is one Idempotency-Key a client sent with an order, and every answer it got.
type sentKey struct {
	key      string
	orderID  string          // the order a 201 named
	attempts []model.Attempt // in the order they were sent
	what     string          // the operation, as history.txt shows it
}

// storedKey is the idempotency record of a key.
type storedKey struct {
	outcome string // confirmed, sold_out or accepted
	orderID string // for confirmed
	created time.Duration
}

// keyFinding is one key that broke a rule.
type keyFinding struct {
	key    string
	detail string
}

// keyVerdict is what reconcileKeys found.
type keyVerdict struct {
	sent            int // keys sent with orders
	storedConfirmed int // of every key stored, those stored confirmed
	// unknownSold counts keys stored confirmed whose client never got a definitive answer
	// (no answer, a timeout, a 5xx): allowed, they may have happened.
	unknownSold int
	// refusedSold: keys stored confirmed every attempt of which was refused.
	refusedSold []keyFinding
	// refusedAfter: other keys stored confirmed with a refusal received more than refusalSlack
	// after the record's created_at.
	refusedAfter []keyFinding
	// notStored: keys told 201 that are not stored confirmed with that order.
	notStored []keyFinding
	// strangers: keys stored confirmed that no client sent.
	strangers []string
}

// definitiveAnswer reports whether an answer says what became of the request: a 2xx or a
// 4xx. No answer, a timeout, a transport error or a 5xx (the balancer's too) say nothing.
func definitiveAnswer(status int) bool { return status >= 200 && status < 500 }

// reconcileKeys checks sent against stored (times since the run's start on both sides).
func reconcileKeys(sent []sentKey, stored map[string]storedKey) keyVerdict {
	v := keyVerdict{sent: len(sent)}
	known := make(map[string]bool, len(sent))
	for _, s := range sent {
		known[s.key] = true
		rec, isStored := stored[s.key]
		confirmed := isStored && rec.outcome == recordOutcomeConfirmed
		var told201, allRefused bool
		allRefused = len(s.attempts) > 0
		var lateRefusal *model.Attempt
		for i, a := range s.attempts {
			switch {
			case a.Status == 201:
				told201 = true
				allRefused = false
			case !definitiveAnswer(a.Status):
				allRefused = false
			case a.Status >= 400:
				if confirmed && a.End > rec.created+refusalSlack && lateRefusal == nil {
					lateRefusal = &s.attempts[i]
				}
			default:
				allRefused = false // another 2xx: not a refusal
			}
		}
		switch {
		case told201 && (!confirmed || rec.orderID != s.orderID):
			got := "nothing"
			if isStored {
				got = rec.outcome
				if rec.orderID != "" {
					got += " order " + rec.orderID
				}
			}
			v.notStored = append(v.notStored, keyFinding{s.key, fmt.Sprintf("told 201 order %s, stored %s; %s", s.orderID, got, s.what)})
		case !confirmed || told201:
		case allRefused:
			v.refusedSold = append(v.refusedSold, keyFinding{s.key, fmt.Sprintf("stored confirmed at %.3fs (order %s); %s",
				rec.created.Seconds(), rec.orderID, s.what)})
		case lateRefusal != nil:
			v.refusedAfter = append(v.refusedAfter, keyFinding{s.key, fmt.Sprintf("stored confirmed at %.3fs (order %s), refused %d at %.3fs; %s",
				rec.created.Seconds(), rec.orderID, lateRefusal.Status, lateRefusal.End.Seconds(), s.what)})
		default:
			v.unknownSold++
		}
	}
	for key, rec := range stored {
		if rec.outcome != recordOutcomeConfirmed {
			continue
		}
		v.storedConfirmed++
		if !known[key] {
			v.strangers = append(v.strangers, key)
		}
	}
	return v
}

// recordOutcomeConfirmed is idempotency_keys.outcome for a confirmed order.
const recordOutcomeConfirmed = "confirmed"

// maxFindings is how many examples of each broken rule the verdict names.
const maxFindings = 3

func examples(fs []keyFinding) string {
	var parts []string
	for _, f := range fs[:min(len(fs), maxFindings)] {
		parts = append(parts, "key "+f.key+": "+f.detail)
	}
	if len(fs) > maxFindings {
		parts = append(parts, fmt.Sprintf("and %d more", len(fs)-maxFindings))
	}
	return strings.Join(parts, " | ")
}

// invariants states the verdict as the drill's checks.
func (v keyVerdict) invariants() []Invariant {
	lies := fmt.Sprintf("%d keys sent, %d stored confirmed (%d of them with no definitive answer: allowed); "+
		"%d every attempt refused, %d refused more than %v after the sale was stored",
		v.sent, v.storedConfirmed, v.unknownSold, len(v.refusedSold), len(v.refusedAfter), refusalSlack)
	if ex := examples(append(v.refusedSold, v.refusedAfter...)); ex != "" {
		lies += ": " + ex
	}
	told := fmt.Sprintf("%d told 201 but not stored confirmed with that order, %d stored confirmed that no client sent", len(v.notStored), len(v.strangers))
	if ex := examples(v.notStored); ex != "" {
		told += ": " + ex
	}
	if len(v.strangers) > 0 {
		told += fmt.Sprintf(" (e.g. %s)", v.strangers[0])
	}
	return []Invariant{
		{Name: "every key stored confirmed was told 201 or never answered (no refusal for a sold key)",
			OK: len(v.refusedSold) == 0 && len(v.refusedAfter) == 0, Detail: lies},
		{Name: "every key told 201 is stored with its order, every stored key was sent",
			OK: len(v.notStored) == 0 && len(v.strangers) == 0, Detail: told},
	}
}

// sentKeys gathers the keys of the order operations.
func sentKeys(ops []*model.Op) []sentKey {
	var out []sentKey
	for _, p := range ops {
		if p.In.Kind != model.KindOrder || p.Key == "" {
			continue
		}
		out = append(out, sentKey{key: p.Key, orderID: p.OrderID, attempts: p.Attempts, what: p.DescribeAttempts()})
	}
	return out
}

// readStoredKeys reads every idempotency record, its creation time relative to start.
func readStoredKeys(ctx context.Context, pool *pgxpool.Pool, start time.Time) (map[string]storedKey, error) {
	rows, _ := pool.Query(ctx, `SELECT key, outcome, coalesce(order_id::text, ''), created_at FROM idempotency_keys`)
	stored := map[string]storedKey{}
	var key string
	var rec storedKey
	var created time.Time
	if _, err := pgx.ForEachRow(rows, []any{&key, &rec.outcome, &rec.orderID, &created}, func() error {
		rec.created = created.Sub(start)
		stored[key] = rec
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read idempotency keys: %w", err)
	}
	return stored, nil
}

// Keys reconciles the keys of ops with the run's idempotency records.
func Keys(ctx context.Context, pool *pgxpool.Pool, ops []*model.Op, start time.Time) ([]Invariant, error) {
	stored, err := readStoredKeys(ctx, pool, start)
	if err != nil {
		return nil, err
	}
	return reconcileKeys(sentKeys(ops), stored).invariants(), nil
}
