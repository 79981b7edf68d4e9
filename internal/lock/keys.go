package lock

import "strings"

// keys are the Redis keys and the channel of one lock name.
type keys struct {
	lock    string
	fence   string
	waiters string // the line of waiters, in the order they asked (see scripts.go)
	note    string // what the last holder left for the next (Lock.LeaveNote)
	channel string // where grants are announced, for waiters of any client
}

// channelPrefix starts every grant channel; a client subscribes to the pattern
// channelPrefix + namespace + "*".
const channelPrefix = "lock-released:"

// keysFor returns the keys of the lock called name. All carry the same Redis Cluster hash tag
// so that one script can touch them together: the name's own tag when it has one
// ("lock:product:{42}"), otherwise the whole name becomes the tag ("{name}"). Names are
// therefore not all distinct keys: "x" and "{x}" are the same lock (use one spelling), and a
// name must not end in ":fence", ":waiters" or ":note" if the name without that suffix is also
// locked.
func keysFor(name string) keys {
	tagged := name
	if !hasHashTag(name) {
		tagged = "{" + name + "}"
	}
	return keys{lock: tagged, fence: tagged + ":fence", waiters: tagged + ":waiters", note: tagged + ":note", channel: channelPrefix + name}
}

func (k keys) all() []string { return []string{k.lock, k.fence, k.waiters, k.note} }

// hasHashTag reports whether Redis Cluster would hash only part of key: a '{' followed later by
// a '}' with at least one byte between them (the first such pair decides).
func hasHashTag(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return false
	}
	closing := strings.IndexByte(key[open+1:], '}')
	return closing > 0
}
