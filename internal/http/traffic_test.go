package stockhttp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
)

// This file keeps the exchanges the contract checks see, for a second, independent validator:
// with STOCKSVC_CONTRACT_TRAFFIC naming a directory, each test process appends every exchange
// contract.check was given to a JSON Lines file of its own there, and api/check (another
// module, another OpenAPI implementation: pb33f/libopenapi-validator) validates them against
// api/openapi.yaml in .ci/run. Without the variable nothing is written.

// exchange is one recorded request and its response (api/check reads the same fields).
type exchange struct {
	Method         string      `json:"method"`
	URL            string      `json:"url"`
	RequestHeader  http.Header `json:"request_header"`
	RequestBody    []byte      `json:"request_body,omitempty"`
	Invalid        bool        `json:"invalid,omitempty"` // the test meant the request to break the document
	Status         int         `json:"status"`
	ResponseHeader http.Header `json:"response_header"`
	ResponseBody   []byte      `json:"response_body,omitempty"`
}

// traffic is the process's recording file, opened at the first exchange; nil without
// STOCKSVC_CONTRACT_TRAFFIC.
var traffic = sync.OnceValues(func() (*trafficFile, error) {
	dir := os.Getenv("STOCKSVC_CONTRACT_TRAFFIC")
	if dir == "" {
		return nil, nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("internal-http-%d.jsonl", os.Getpid())))
	if err != nil {
		return nil, fmt.Errorf("record the contract traffic: %w", err)
	}
	return &trafficFile{enc: json.NewEncoder(f)}, nil
})

// trafficFile serializes the parallel tests' writes.
type trafficFile struct {
	mu  sync.Mutex
	enc *json.Encoder
}

// record appends e when recording; the file is left to the process's exit to close (every
// write is whole before record returns).
func record(e exchange) error {
	f, err := traffic()
	if err != nil || f == nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.enc.Encode(e)
}
