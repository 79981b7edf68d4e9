package stockhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"
)

// decodeJSON reads the request body into dst, strictly: JSON only, exactly one object (not
// null, not an array), no name that is not exactly one of dst's fields, no name twice in one
// object, no trailing data, at most the server's body limit.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	// The plain value, which almost every client sends, needs no parsing (nor its map).
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		mediaType, params, err := mime.ParseMediaType(ct)
		if err != nil || mediaType != "application/json" {
			return badRequest("unsupported-media-type", "the body must be sent as Content-Type: application/json")
		}
		// JSON is UTF-8 (RFC 8259); a body declared in another charset would be read wrongly.
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
			return badRequest("unsupported-media-type", "the body must be UTF-8 JSON; charset "+cs+" is not accepted")
		}
	}
	if r.ContentLength > s.maxBody {
		return tooLarge(s.maxBody)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		return decodeError(err)
	}
	// encoding/json would quietly turn invalid UTF-8 into U+FFFD and store what was not sent.
	if !utf8.Valid(body) {
		return badRequest("malformed-json", "the body is not valid UTF-8")
	}
	// encoding/json accepts null for a struct and leaves it untouched; a missing object is
	// malformed, not an object with every field empty.
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) > 0 && trimmed[0] != '{' {
		if err := json.Unmarshal(body, new(any)); err != nil {
			return decodeError(err)
		}
		return badRequest("malformed-json", "the body must be a JSON object")
	}
	// The usual shape of a body that has one, read in one pass (orderjson.go); anything else,
	// and every error, the general way below.
	if f, ok := dst.(fastDecoder); ok && f.decodeFast(body) {
		return nil
	}
	return decodeGeneral(body, dst)
}

// decodeGeneral is decodeJSON's general path, for a body that is valid UTF-8: its names first
// (checkNames: encoding/json would read a name that is not exactly a field's, and keep the
// last of two), then encoding/json's decode, then nothing after the object.
func decodeGeneral(body []byte, dst any) error {
	if err := checkNames(body, reflect.TypeOf(dst)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	// checkNames refused every name that is not one of dst's fields; this stays a second
	// line behind it, should a type ever hold a field it cannot see into.
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("malformed-json", "the body must hold a single JSON object and nothing after it")
	}
	return nil
}

func decodeError(err error) error {
	var (
		syntax    *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
		tooBig    *http.MaxBytesError
		malformed = func(detail string) error {
			return &requestError{code: "malformed-json", detail: detail, err: err}
		}
	)
	switch {
	case errors.As(err, &tooBig):
		return tooLarge(tooBig.Limit)
	case errors.Is(err, io.EOF):
		return malformed("the body is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return malformed("the body ends in the middle of a JSON value")
	case errors.As(err, &syntax):
		return malformed(fmt.Sprintf("invalid JSON at byte %d: %v", syntax.Offset, syntax))
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return malformed(fmt.Sprintf("the body must be a JSON object, not %s", typeErr.Value))
		}
		e := malformed(fmt.Sprintf("field %s must be %s, not %s", field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value))
		e.(*requestError).field = field
		return e
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no typed error for this; the message format is stable.
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &requestError{code: "malformed-json", detail: fmt.Sprintf("unknown field %q", name), field: name, err: err}
	}
	return malformed("the body is not valid JSON: " + err.Error())
}

func tooLarge(limit int64) error {
	return badRequest("body-too-large", fmt.Sprintf("the body exceeds the %d-byte limit", limit))
}

func jsonKind(goKind string) string {
	switch {
	case strings.HasPrefix(goKind, "int"), strings.HasPrefix(goKind, "uint"), strings.HasPrefix(goKind, "float"):
		return "an integer"
	case goKind == "string":
		return "a string"
	case goKind == "slice":
		return "an array"
	case goKind == "struct", goKind == "map":
		return "an object"
	case goKind == "bool":
		return "a boolean"
	}
	return "a " + goKind
}
