package stockhttp

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// checkNames refuses the first member name of body, in the order written, that is not exactly
// the name of a field of t (the type decodeJSON decodes into) where it stands, or that appears
// twice in one object. The problem names it as the dotted path decodeError uses for a field
// ("items.quantity").
//
// encoding/json matches a name to a field regardless of case, under Unicode's simple folding —
// "Quantity" and "QUANTITY" are quantity, "itemſ" (U+017F, long s) is items, "\u212a" (the
// Kelvin sign) is k — and keeps the last value of a field named twice, however each was
// spelled. A proxy, a log, a filter in front of the service, or the client's own code would
// read such a body otherwise than the service: `{"items": [{"product_id": 1, "quantity": 1,
// "Quantity": 2}]}` would buy two, and `{"items": [...], "Items": [...]}` the second list. RFC
// 8259 leaves an object with a name twice open to any reading; names are compared after their
// escapes are decoded, as JSON defines them ("\u0071uantity" is quantity).
//
// Only the objects whose fields t declares are held to exact names: a value that decodes
// itself (time.Time) or a map is the decoder's; one that decodes as another type (optional[T],
// shaped) is held to that type's. Request types embed no struct: an
// embedded struct's fields would be refused here as unknown. body must be JSON that
// decodeJSON is about to decode: whatever the tokenizer stops at is that decode's to report.
func checkNames(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // numbers are only skipped here: no need to parse them
	root := shapeOf(t, map[reflect.Type]*jsonShape{})
	var stack []*jsonFrame
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil
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
			if err := top.member(name); err != nil {
				return err
			}
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			f := &jsonFrame{array: tok == json.Delim('['), shape: root}
			switch {
			case top == nil:
			case top.array:
				f.path, f.shape = top.path, top.shape.elem
			default:
				f.path, f.shape = memberPath(top.path, top.key), top.shape.fields[top.key]
			}
			if f.shape == nil {
				f.shape = &jsonShape{} // a value of another kind than t's: the decode says so
			}
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

// jsonShape is what checkNames knows of the JSON a Go type reads: a struct's fields by their
// exact names, or a slice's or an array's elements. The zero value checks no name inside the
// value (a scalar, a map, a type that decodes itself).
type jsonShape struct {
	fields map[string]*jsonShape // a struct
	elem   *jsonShape            // a slice or an array
}

// shapeOf returns t's shape; seen holds the shapes begun, for a type that contains itself.
func shapeOf(t reflect.Type, seen map[reflect.Type]*jsonShape) *jsonShape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s, ok := seen[t]; ok {
		return s
	}
	s := &jsonShape{}
	seen[t] = s
	if p := reflect.PointerTo(t); p.Implements(reflect.TypeFor[shaped]()) {
		// Read as another type (optional[T]: T, or null): that type's names.
		*s = *shapeOf(reflect.New(t).Interface().(shaped).shapedAs(), seen)
		return s
	}
	if p := reflect.PointerTo(t); p.Implements(reflect.TypeFor[json.Unmarshaler]()) || p.Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return s
	}
	switch t.Kind() {
	case reflect.Struct:
		s.fields = map[string]*jsonShape{}
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if !f.IsExported() || tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if name == "" {
				name = f.Name
			}
			s.fields[name] = shapeOf(f.Type, seen)
		}
	case reflect.Slice, reflect.Array:
		s.elem = shapeOf(t.Elem(), seen)
	}
	return s
}

// shaped is a type that decodes itself as another type does (optional[T]), whose names
// checkNames holds to that type's.
type shaped interface{ shapedAs() reflect.Type }

// jsonFrame is an object or array that checkNames is inside of.
type jsonFrame struct {
	array     bool
	shape     *jsonShape          // what the type decoded into expects here
	path      string              // the container's dotted path; an array's objects share it
	seen      map[string]struct{} // objects: the names read so far
	key       string              // objects: the last name read
	expectKey bool                // objects: the next token is a name
}

// member checks the name just read in the object f and makes it the current one.
func (f *jsonFrame) member(name string) error {
	if f.shape.fields != nil {
		if _, known := f.shape.fields[name]; !known {
			return unknownName(f.path, name, f.shape.fields)
		}
	}
	if _, dup := f.seen[name]; dup {
		path := memberPath(f.path, name)
		return &requestError{code: "malformed-json", detail: fmt.Sprintf("field %s appears twice in one object", path), field: path}
	}
	f.seen[name] = struct{}{}
	f.key, f.expectKey = name, false
	return nil
}

// unknownName is the problem of a name that is no field of its object; one that a field's name
// matches but for case (what encoding/json would have read as that field) is told so.
func unknownName(path, name string, fields map[string]*jsonShape) error {
	detail := fmt.Sprintf("unknown field %q", name)
	for known := range fields {
		if strings.EqualFold(known, name) {
			detail += fmt.Sprintf(" (names are matched exactly, case included: the field is %q)", known)
			break
		}
	}
	path = memberPath(path, name)
	return &requestError{code: "malformed-json", detail: detail, field: path}
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
