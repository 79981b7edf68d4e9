package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/stocksvc/stocksvc/loadtest/model"
)

// holdCodes are the 409s that decide a confirm or a cancel.
var holdCodes = map[string]bool{"hold-expired": true, "order-cancelled": true, "order-confirmed": true}

// settle confirms (model.KindConfirm) or cancels (model.KindCancel) the hold order made, as
// its customer, retrying what may not have arrived (both are idempotent), and records it. It
// returns, besides, a description of an answer the contract does not allow, if one came.
func (c *Client) Settle(ctx context.Context, order *model.Op, kind model.Kind) (*model.Op, string) {
	verb := "confirm"
	if kind == model.KindCancel {
		verb = "cancel"
	}
	p := &model.Op{Client: c.lane(), In: model.Input{Kind: kind, Product: order.In.Product, Hold: order.OrderID}, Customer: order.Customer}
	defer func() { c.freeLane(p.Client, p.Out.Outcome) }()
	header := map[string]string{"Authorization": "Bearer " + c.token} // an admin, when customers carry no tokens
	if c.Bearer != nil {
		token, err := c.Bearer(order.Customer)
		if err != nil {
			p.Invoke, p.Return = c.rec.Now(), c.rec.Now()
			p.Out = model.Output{Outcome: model.Refused}
			c.rec.Add(p)
			return p, ""
		}
		header["Authorization"] = "Bearer " + token
	}
	p.Invoke = c.rec.Now()
	last, kindOf, unknown := c.writeCodes(ctx, p, func(ctx context.Context) answer {
		return c.do(ctx, http.MethodPost, c.Base()+"/v1/orders/"+order.OrderID+"/"+verb, nil, header)
	}, http.StatusOK, false, holdCodes)
	p.Return = c.rec.Now()
	var unexpected string
	switch {
	case kindOf == attemptDone && last.status == http.StatusOK:
		var o struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(last.body, &o)
		switch {
		case kind == model.KindConfirm && o.Status == string(model.StatusConfirmed):
			p.Out.Outcome = model.Confirmed
		case kind == model.KindCancel && o.Status == string(model.StatusCancelled):
			p.Out.Outcome = model.Cancelled
		case kind == model.KindCancel && o.Status == string(model.StatusExpired):
			p.Out.Outcome = model.Expired
		default:
			p.Out.Outcome = model.Refused
			unexpected = fmt.Sprintf("%s of %s answered 200 %q", verb, order.OrderID, o.Status)
		}
	case kindOf == attemptDone:
		p.Out.Outcome = map[string]model.Outcome{"hold-expired": model.HoldExpired, "order-cancelled": model.OrderCancelled,
			"order-confirmed": model.OrderConfirmed}[last.problemCode()]
	case kindOf == attemptUnexpected:
		p.Out.Outcome = model.Refused
		unexpected = fmt.Sprintf("%s of %s answered %d %s", verb, order.OrderID, last.status, last.problemCode())
		if unknown {
			p.Out.Outcome = model.Unknown
		}
	case unknown:
		p.Out.Outcome = model.Unknown
	default:
		p.Out.Outcome = model.Refused
	}
	c.rec.Add(p)
	return p, unexpected
}
