package client

import (
	"context"

	"github.com/stocksvc/stocksvc/loadtest/model"
)

// Answer is one request a drill makes itself, outside the recorded operations: the line's
// routes (join, a ticket's long-poll), which change no stock and so are not in the history.
type Answer struct {
	Status int
	Body   []byte
	ETag   string
	Err    error
}

// Request sends one request to the next base in turn, without Go's own resends, and does not
// record it.
func (c *Client) Request(ctx context.Context, method, url string, body []byte, header map[string]string) Answer {
	a := c.send(ctx, method, url, body, header, false)
	return Answer{Status: a.status, Body: a.body, ETag: a.etag, Err: a.err}
}

// AdminToken is the token the client's admin requests carry.
func (c *Client) AdminToken() string { return c.token }

// OrderWithPass orders qty units of a lined product as customer, with the line's pass
// (Line-Pass), and records the operation as Order does.
func (c *Client) OrderWithPass(ctx context.Context, customer string, product, qty int64, pass string) *model.Op {
	return c.place(ctx, product, qty, orderStyle{customer: customer, pass: pass})
}
