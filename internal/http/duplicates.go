package stockhttp

import (
	"bytes"
	"encoding/json"
)

// duplicateKey returns the first member name that appears twice in one object of body, as the
// dotted path decodeError uses for a field ("items.quantity"), and whether there was one.
// encoding/json keeps the last of two equal names without a word, so `{"quantity": 1,
// "quantity": 1000}` would be read as what a proxy, a log or a filter in front of the
// service did not see; RFC 8259 leaves such an object's meaning open, so it is refused.
// body must be JSON that decodeJSON has already decoded: anything the tokenizer stops at is
// that decode's to report, and is not a duplicate.
func duplicateKey(body []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // numbers are only skipped here: no need to parse them
	var stack []*jsonFrame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *jsonFrame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && !top.array && top.expectKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				valueDone(stack)
				continue
			}
			name, _ := tok.(string)
			if _, dup := top.seen[name]; dup {
				return memberPath(top.path, name), true
			}
			top.seen[name] = struct{}{}
			top.key, top.expectKey = name, false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			path := ""
			switch {
			case top == nil:
			case top.array:
				path = top.path
			default:
				path = memberPath(top.path, top.key)
			}
			f := &jsonFrame{array: tok == json.Delim('['), path: path}
			if !f.array {
				f.seen, f.expectKey = map[string]struct{}{}, true
			}
			stack = append(stack, f)
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone(stack)
		default:
			valueDone(stack)
		}
	}
}

// jsonFrame is an object or array that duplicateKey is inside of.
type jsonFrame struct {
	array     bool
	path      string              // the container's dotted path; an array's objects share it
	seen      map[string]struct{} // objects: the names read so far
	key       string              // objects: the last name read
	expectKey bool                // objects: the next token is a name
}

// valueDone notes that a member's value ended: in an object, a name or '}' comes next.
func valueDone(stack []*jsonFrame) {
	if len(stack) > 0 && !stack[len(stack)-1].array {
		stack[len(stack)-1].expectKey = true
	}
}

func memberPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
