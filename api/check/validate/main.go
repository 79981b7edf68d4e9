// Command validate checks api/openapi.yaml with an OpenAPI implementation that the service's
// own tests do not use — pb33f/libopenapi and libopenapi-validator, where internal/http's
// contract tests use kin-openapi — so that the document is read as a tool nobody here wrote
// reads it:
//
//   - the document itself, against the OpenAPI 3.1 schema;
//   - every exchange internal/http's contract tests recorded (STOCKSVC_CONTRACT_TRAFFIC, one
//     JSON Lines file per test process): each request the test meant to be valid, and every
//     response, against the operation the document gives its method and path. This is what
//     a validating proxy in front of the service would see.
//
// It exits 1 on any finding. Usage: go run ./validate -doc ../openapi.yaml -traffic DIR
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"
)

// exchange is one request and response as internal/http/traffic_test.go records it.
type exchange struct {
	Method         string      `json:"method"`
	URL            string      `json:"url"`
	RequestHeader  http.Header `json:"request_header"`
	RequestBody    []byte      `json:"request_body"`
	Invalid        bool        `json:"invalid"`
	Status         int         `json:"status"`
	ResponseHeader http.Header `json:"response_header"`
	ResponseBody   []byte      `json:"response_body"`
}

func main() {
	docPath := flag.String("doc", "../openapi.yaml", "the OpenAPI document")
	trafficDir := flag.String("traffic", "", "a directory of recorded exchanges (*.jsonl); empty: the document only")
	flag.Parse()
	if err := run(*docPath, *trafficDir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "validate:", err)
		os.Exit(1)
	}
}

func run(docPath, trafficDir string, out io.Writer) error {
	raw, err := os.ReadFile(docPath)
	if err != nil {
		return err
	}
	doc, err := libopenapi.NewDocument(raw)
	if err != nil {
		return fmt.Errorf("read %s: %w", docPath, err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return fmt.Errorf("build a validator for %s: %w", docPath, errors.Join(errs...))
	}
	if ok, findings := v.ValidateDocument(); !ok {
		return report(out, docPath+" against the OpenAPI 3.1 schema", findings)
	}
	fmt.Fprintf(out, "%s is a valid OpenAPI 3.1 document (libopenapi-validator)\n", docPath)
	if trafficDir == "" {
		return nil
	}

	files, err := filepath.Glob(filepath.Join(trafficDir, "*.jsonl"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no recorded exchanges in %s: were the contract tests run with STOCKSVC_CONTRACT_TRAFFIC?", trafficDir)
	}
	var (
		checked, requests int
		failed            []string
	)
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
		for sc.Scan() {
			var e exchange
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", file, err)
			}
			checked++
			if !e.Invalid {
				requests++
			}
			if msg := check(v, e); msg != "" {
				failed = append(failed, msg)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		for _, msg := range failed {
			fmt.Fprintln(out, msg)
		}
		return fmt.Errorf("%d of %d recorded exchanges break %s", len(failed), checked, docPath)
	}
	fmt.Fprintf(out, "%d recorded exchanges (%d requests meant valid) hold to %s (libopenapi-validator)\n", checked, requests, docPath)
	return nil
}

// check validates one exchange and describes what is wrong with it, or returns "".
func check(v validator.Validator, e exchange) string {
	req, err := http.NewRequest(e.Method, e.URL, bytes.NewReader(e.RequestBody))
	if err != nil {
		return fmt.Sprintf("%s %s: %v", e.Method, e.URL, err)
	}
	req.Header = e.RequestHeader
	res := &http.Response{StatusCode: e.Status, Header: e.ResponseHeader, Request: req,
		Body: io.NopCloser(bytes.NewReader(e.ResponseBody)), ContentLength: int64(len(e.ResponseBody))}

	var findings []*verrors.ValidationError
	if e.Invalid {
		_, findings = v.ValidateHttpResponse(req, res)
	} else {
		_, findings = v.ValidateHttpRequestResponse(req, res)
	}
	if len(findings) == 0 {
		return ""
	}
	if unrouted(findings) {
		// A method or path the document has no operation for (the tests send them on
		// purpose): the document answers it in prose and in components.responses NotFound
		// and MethodNotAllowed (or Unavailable while a replica starts), so the answer must
		// be one of those, as a problem.
		ct := e.ResponseHeader.Get("Content-Type")
		switch {
		case ct != "application/problem+json":
		case e.Status == http.StatusNotFound, e.Status == http.StatusServiceUnavailable:
			return ""
		case e.Status == http.StatusMethodNotAllowed && e.ResponseHeader.Get("Allow") != "":
			return ""
		}
		return fmt.Sprintf("%s %s -> %d (%s): no operation in the document, and not answered as the document says (404 or 405 with Allow, or 503, as a problem)",
			e.Method, req.URL.Path, e.Status, ct)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s -> %d:", e.Method, req.URL.Path, e.Status)
	for _, f := range findings {
		fmt.Fprintf(&b, "\n    %s: %s", f.Message, f.Reason)
		for _, s := range f.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n      %s: %s", s.KeywordLocation, s.Reason)
		}
	}
	return b.String()
}

// unrouted reports whether the findings all say that the document has no operation for the
// request's method and path.
func unrouted(findings []*verrors.ValidationError) bool {
	for _, f := range findings {
		if !f.IsPathMissingError() && !f.IsOperationMissingError() {
			return false
		}
	}
	return true
}

// report prints findings about the document itself and returns an error naming them.
func report(out io.Writer, what string, findings []*verrors.ValidationError) error {
	for _, f := range findings {
		fmt.Fprintf(out, "%s: %s\n", f.Message, f.Reason)
		for _, s := range f.SchemaValidationErrors {
			fmt.Fprintf(out, "  %s: %s\n", s.KeywordLocation, s.Reason)
		}
	}
	return fmt.Errorf("%d findings in %s", len(findings), what)
}
