package keyspace

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Owner is the database a key space belongs to.
type Owner struct {
	// ID identifies the database: two owners are the same database when their IDs are equal.
	ID string
	// Name says which database it is, for people: its name and server.
	Name string
}

func (o Owner) String() string { return fmt.Sprintf("%s (%s)", o.Name, o.ID) }

// ErrForeign is the error of a key space bound to another database.
var ErrForeign = errors.New("keyspace: bound to another database")

// ErrUnchecked is the error of a command refused because its client's key space has not been
// checked yet, on a client whose connections do not check it themselves (see Options).
var ErrUnchecked = errors.New("keyspace: the key space's binding has not been checked yet")

// ForeignError says which database a key space is bound to. It matches ErrForeign.
type ForeignError struct {
	// Prefix is the key space's prefix, Key its binding's key.
	Prefix, Key string
	// Owner is the database of this replica, Bound the one the key space is bound to (its ID
	// empty when the key holds something this package did not write), since Since.
	Owner, Bound Owner
	Since        time.Time
}

func (e *ForeignError) Error() string {
	bound := "something else (the key " + e.Key + " was not written by stocksvc)"
	if e.Bound.ID != "" {
		bound = fmt.Sprintf("another database, %s, since %s", e.Bound, e.Since.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("keyspace: the redis keys under %q belong to %s; this replica's database is %s", e.Prefix, bound, e.Owner)
}

func (e *ForeignError) Is(target error) bool { return target == ErrForeign }

// record is what a binding's key holds, as JSON.
type record struct {
	Database string    `json:"database"` // Owner.ID
	Name     string    `json:"name"`     // Owner.Name
	Space    string    `json:"space"`    // the lock space's token
	Since    time.Time `json:"since"`
}

// Options tune a Binding. The zero value suits a client without OnConnect.
type Options struct {
	// PerConnection says that the Binding's OnConnect is installed on the client (the
	// Options.OnConnect of go-redis): every connection checks the key space before its first
	// command, so commands may go ahead before any other check. Without it — a Cluster client,
	// whose connections reach one node each while the binding lives on one of them — commands
	// are refused with ErrUnchecked until Check has found the key space this owner's.
	PerConnection bool
}

// Binding binds the key space under a prefix, on one Redis server (or Sentinel-monitored
// primary, or Cluster), to its owner, and keeps the client it hooks from using a key space that
// is another's. It is safe for concurrent use.
type Binding struct {
	prefix, key string
	owner       Owner
	opts        Options
	state       atomic.Pointer[status]
}

// status is what the last check found.
type status struct {
	space   string        // the lock space's token, when the key space is the owner's
	foreign *ForeignError // when it is another's
}

// New returns the binding of the key space under prefix to owner. Its key is prefix +
// "database".
func New(prefix string, owner Owner, opts Options) *Binding {
	b := &Binding{prefix: prefix, key: prefix + "database", owner: owner, opts: opts}
	b.state.Store(&status{})
	return b
}

// Key returns the Redis key the binding is kept in.
func (b *Binding) Key() string { return b.key }

// Space returns the token of the lock space the last check found, "" when no check has found
// the key space this owner's.
func (b *Binding) Space() string { return b.state.Load().space }

// Foreign returns what the last check found when the key space is another database's, nil
// otherwise.
func (b *Binding) Foreign() *ForeignError { return b.state.Load().foreign }

// Check binds the key space to the owner if it is bound to nobody (one SET NX GET, so that of
// two owners that find it empty at once exactly one binds it), and returns the token of its
// lock space. It goes through the Binding's own hook whatever the state. Errors:
// *ForeignError (ErrForeign) when the key space is another's, the Redis error wrapped when it
// could not be asked.
func (b *Binding) Check(ctx context.Context, c redis.StringCmdable) (space string, err error) {
	mine := record{Database: b.owner.ID, Name: b.owner.Name, Space: rand.Text(), Since: time.Now().UTC()}
	value, err := json.Marshal(mine)
	if err != nil {
		return "", fmt.Errorf("keyspace: %w", err)
	}
	old, err := c.SetArgs(context.WithValue(ctx, checking{}, true), b.key, value, redis.SetArgs{Mode: "NX", Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil): // nothing was there: bound now
		b.state.Store(&status{space: mine.Space})
		return mine.Space, nil
	case err != nil:
		return "", fmt.Errorf("keyspace: check %s: %w", b.key, err)
	}
	var bound record
	if err := json.Unmarshal([]byte(old), &bound); err != nil || bound.Space == "" {
		bound = record{} // not a binding: whatever it is, the key space is not this owner's
	}
	if bound.Database != b.owner.ID {
		f := &ForeignError{Prefix: b.prefix, Key: b.key, Owner: b.owner, Bound: Owner{ID: bound.Database, Name: bound.Name}, Since: bound.Since}
		b.state.Store(&status{foreign: f})
		return "", f
	}
	b.state.Store(&status{space: bound.Space})
	return bound.Space, nil
}

// OnConnect checks the key space on a new connection before anything else is sent on it
// (install it as the client's Options.OnConnect, and set Options.PerConnection): a Redis that
// restarted empty, or a failover to a replica that had not received the binding, drops every
// connection, and the new ones bind the key space again — or find that another database has.
// A connection to a key space that is another's fails with *ForeignError.
//
// go-redis runs a Sentinel failover client's OnConnect on its connections to the sentinels
// too, which hold no keys and know no SET: those are let through unchecked.
func (b *Binding) OnConnect(ctx context.Context, cn *redis.Conn) error {
	_, err := b.Check(ctx, cn)
	if redis.HasErrorPrefix(err, "unknown command") {
		return nil
	}
	return err
}

// checking marks the context of a binding's own command, which its hook lets through.
type checking struct{}

// refusal is the error a command of the hooked client gets instead of being sent, nil when it
// may go. The state is read first: it is one atomic load on every command, and the context is
// only looked into (a walk up its chain) for a command that would be refused.
func (b *Binding) refusal(ctx context.Context) error {
	st := b.state.Load()
	var err error
	switch {
	case st.foreign != nil:
		err = st.foreign
	case st.space == "" && !b.opts.PerConnection:
		err = ErrUnchecked
	default:
		return nil
	}
	if ctx.Value(checking{}) != nil {
		return nil
	}
	return err
}

var _ redis.Hook = (*Binding)(nil)

// DialHook implements redis.Hook: dials are left alone (OnConnect checks each connection).
func (b *Binding) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: a command of a client whose key space is another
// database's, or has not been checked (see Options), fails without being sent.
func (b *Binding) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := b.refusal(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook as ProcessHook does, for pipelines and
// transactions.
func (b *Binding) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := b.refusal(ctx); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}
