// Package client is the Go client oapi-codegen generates from api/openapi.yaml. Only this file
// and the generator's configuration are kept: client.gen.go is generated in CI (and by
// `go generate ./...` in api/check), so the package holds whatever the document makes.
package client

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../openapi.yaml
