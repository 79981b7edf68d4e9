// Package api holds the service's OpenAPI document, embedded so that the binary serves the
// very file its tests validate against.
package api

import _ "embed"

//go:embed openapi.yaml
var document string

// OpenAPI returns api/openapi.yaml: the HTTP contract of stocksvc, in OpenAPI 3.1. Each call
// returns a fresh copy, so no caller can change what the others read.
func OpenAPI() []byte { return []byte(document) }
