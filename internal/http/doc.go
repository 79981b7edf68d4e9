// Package stockhttp is the HTTP transport of stocksvc: routes, request decoding and validation
// into stock inputs, JSON responses, and the one place where errors become RFC 9457 problem
// details. It holds no business rules; those live in package stock.
package stockhttp
