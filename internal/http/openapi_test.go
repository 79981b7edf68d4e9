package stockhttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-chi/chi/v5"

	"github.com/stocksvc/stocksvc/api"
	stockhttp "github.com/stocksvc/stocksvc/internal/http"
)

// This file holds the service to api/openapi.yaml: send validates every request a test means
// to be valid, and every response, against it.

// contract is the loaded OpenAPI document and a router over its paths.
type contract struct {
	doc    *openapi3.T
	router routers.Router
}

// loadContract loads api/openapi.yaml once for the whole package; the document is only read
// after that.
var loadContract = sync.OnceValues(func() (*contract, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("load api/openapi.yaml: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("validate api/openapi.yaml: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route api/openapi.yaml: %w", err)
	}
	return &contract{doc: doc, router: router}, nil
})

// check validates one exchange. The request is validated unless the test marked it invalid;
// the response always is: its status, headers and body must be documented for the route, and
// a request that matches no route must get the document's NotFound or MethodNotAllowed answer.
func (c *contract) check(ctx context.Context, req request, body []byte, header http.Header, res response) error {
	// HEAD is answered as GET without a body (chi's GetHead); the document has a head
	// operation beside every get, so HEAD is routed and checked as itself.
	method := req.Method
	hr, err := http.NewRequestWithContext(ctx, method, req.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hr.Header = header.Clone()
	err = record(exchange{Method: req.Method, URL: req.URL, RequestHeader: hr.Header, RequestBody: body,
		Invalid: req.Invalid, Status: res.Status, ResponseHeader: res.Header, ResponseBody: res.Body})
	if err != nil {
		return err
	}

	route, params, err := c.router.FindRoute(hr)
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		route = c.fallback(hr, "NotFound", http.StatusNotFound)
	case errors.Is(err, routers.ErrMethodNotAllowed):
		route = c.fallback(hr, "MethodNotAllowed", http.StatusMethodNotAllowed)
	case err != nil:
		return fmt.Errorf("route %s %s: %w", method, hr.URL.Path, err)
	case !req.Invalid:
		in := &openapi3filter.RequestValidationInput{Request: hr, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: bearerPresent, RejectWhenRequestBodyNotSpecified: true}}
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			return fmt.Errorf("request %s %s breaks api/openapi.yaml (mark it Invalid if that is the point): %w", req.Method, hr.URL.Path, err)
		}
	}
	hr.Body = http.NoBody

	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: hr, PathParams: params, Route: route},
		Status:                 res.Status,
		Header:                 res.Header,
		// kin-openapi decodes an application/yaml body into a value, while the document
		// describes GET /openapi.yaml's body as what it is, text; TestOpenAPIServed compares
		// that body with api/openapi.yaml byte for byte instead.
		Options: &openapi3filter.Options{IncludeResponseStatus: true,
			ExcludeResponseBody: req.Method == http.MethodHead || route.Operation.OperationID == "openapi"},
	}
	in.SetBodyBytes(res.Body)
	if err := openapi3filter.ValidateResponse(ctx, in); err != nil {
		return fmt.Errorf("response to %s %s breaks api/openapi.yaml: %w\n%s", req.Method, hr.URL.Path, err, res.Body)
	}
	// kin-openapi checks the documented headers only; an undocumented one is a gap in the
	// contract too.
	documented := route.Operation.Responses.Status(res.Status).Value.Headers
	for name := range res.Header {
		switch name {
		case "Content-Type", "Content-Length", "Date":
			continue // net/http's own, or the media type the document states as content
		}
		if !hasHeader(documented, name) {
			return fmt.Errorf("response to %s %s: header %s is not documented for status %d", req.Method, hr.URL.Path, name, res.Status)
		}
	}
	return nil
}

// fallback is a route for a request the document has no operation for: its answers are the
// named component response, or the 503 a starting replica gives every request.
func (c *contract) fallback(hr *http.Request, name string, status int) *routers.Route {
	op := openapi3.NewOperation()
	op.Responses = openapi3.NewResponses(
		openapi3.WithStatus(status, c.doc.Components.Responses[name]),
		openapi3.WithStatus(http.StatusServiceUnavailable, c.doc.Components.Responses["Unavailable"]))
	return &routers.Route{Spec: c.doc, Path: hr.URL.Path, Method: hr.Method, Operation: op}
}

// hasHeader finds a documented header whatever its case: net/http canonicalizes X-Request-ID
// to X-Request-Id.
func hasHeader(headers openapi3.Headers, name string) bool {
	for k := range headers {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// wantContract checks an exchange a test made without send: its response, and its request
// unless req is marked Invalid.
func wantContract(t testing.TB, req request, header http.Header, res response) {
	t.Helper()
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	body, _ := req.Body.([]byte)
	if err := c.check(context.Background(), req, body, header, res); err != nil {
		t.Error(err)
	}
}

// bearerPresent holds requests to the admin scheme's shape: a bearer token must be sent.
// Whether it is the right one is the service's to say (401 unauthorized), not the document's.
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme, token, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return in.NewError(errors.New("no bearer token"))
	}
	return nil
}

// TestOpenAPIDocument: api/openapi.yaml loads, is a valid OpenAPI 3.1 document, and its
// examples are valid against their schemas.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	if !c.doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi = %q, want 3.1", c.doc.OpenAPI)
	}
}

// TestOpenAPIRoutes: every route chi registers is in the document, and every operation of the
// document is a route.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	var served []string
	walk := func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served = append(served, method+" "+route)
		return nil
	}
	if err := chi.Walk(stockhttp.Routes(stockhttp.New(stockhttp.Config{})), walk); err != nil {
		t.Fatalf("walk the routes: %v", err)
	}
	// chi answers HEAD on every GET route (middleware.GetHead) without registering it; the
	// document names it so that tools accept HEAD.
	for _, r := range served {
		if route, ok := strings.CutPrefix(r, http.MethodGet+" "); ok {
			served = append(served, http.MethodHead+" "+route)
		}
	}
	var documented []string
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	slices.Sort(served)
	slices.Sort(documented)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("%s is served but not in api/openapi.yaml", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("%s is in api/openapi.yaml but not served", r)
		}
	}
}

// TestOpenAPIServed: the service serves the document it is tested against.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	// The route needs no backing service.
	srv := httptest.NewServer(stockhttp.New(stockhttp.Config{}))
	t.Cleanup(srv.Close)
	res := call(t, request{Method: http.MethodGet, URL: srv.URL + "/openapi.yaml"})
	if res.Status != http.StatusOK || !bytes.Equal(res.Body, api.OpenAPI()) {
		t.Fatalf("GET /openapi.yaml: status %d, %d bytes, want 200 and api/openapi.yaml", res.Status, len(res.Body))
	}
	wantHeader(t, res, "Content-Type", "application/yaml")
}

// TestOpenAPIProblemCodes: the document's code enum is exactly the service's problem codes, and
// every problem response it documents names codes of that response's status.
func TestOpenAPIProblemCodes(t *testing.T) {
	t.Parallel()
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	statuses := stockhttp.ProblemStatuses()
	var enum []string
	for _, v := range c.doc.Components.Schemas["ProblemCode"].Value.Enum {
		enum = append(enum, v.(string))
	}
	var codes []string
	for code := range statuses {
		codes = append(codes, code)
	}
	slices.Sort(enum)
	slices.Sort(codes)
	if !slices.Equal(enum, codes) {
		t.Errorf("ProblemCode enum = %v, want the service's codes %v", enum, codes)
	}

	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status, ref := range op.Responses.Map() {
				for _, code := range problemCodes(ref.Value) {
					if want := statuses[code]; strconv.Itoa(want) != status {
						t.Errorf("%s %s: %s answers %s, which the service sends as %d", method, path, status, code, want)
					}
				}
			}
		}
	}
}

// problemCodes returns the codes a documented problem response allows: the const or enum its
// schema puts on code next to the Problem schema.
func problemCodes(res *openapi3.Response) []string {
	media := res.Content.Get("application/problem+json")
	if media == nil {
		return nil
	}
	var codes []string
	for _, part := range media.Schema.Value.AllOf {
		if part.Ref != "" {
			continue // the Problem schema itself, which allows every code
		}
		code, ok := part.Value.Properties["code"]
		if !ok || code.Value == nil {
			continue
		}
		// code is the ProblemCode enum narrowed by a const or enum beside its $ref (so that a
		// generated client types it ProblemCode); kin-openapi applies those siblings as one
		// more allOf conjunct of the referenced schema.
		narrowed := []*openapi3.Schema{code.Value}
		if code.Ref != "" {
			narrowed = nil
			for _, c := range code.Value.AllOf {
				narrowed = append(narrowed, c.Value)
			}
		}
		for _, n := range narrowed {
			if s, ok := n.Const.(string); ok {
				codes = append(codes, s)
			}
			for _, v := range n.Enum {
				codes = append(codes, v.(string))
			}
		}
	}
	return codes
}
