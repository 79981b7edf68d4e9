package lock

import "strings"

// keysFor returns the Redis keys of the lock named name and of its fencing counter. Both carry
// the same Redis Cluster hash tag so that one script can touch both: the name's own tag when it
// has one ("lock:product:{42}"), otherwise the whole name becomes the tag ("{name}"). Names are
// therefore not all distinct keys: "x" and "{x}" are the same lock, and a name must not end in
// ":fence" if the name without that suffix is also locked.
func keysFor(name string) (lockKey, fenceKey string) {
	if hasHashTag(name) {
		return name, name + ":fence"
	}
	tagged := "{" + name + "}"
	return tagged, tagged + ":fence"
}

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
