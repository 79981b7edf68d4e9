package stockhttp

import (
	"context"
	"net/http"

	"github.com/stocksvc/stocksvc/internal/async"
)

// asyncOrderResponse shows an order accepted for later as it stands. Once it is confirmed it is
// the purchase path's order of the same id, and is shown as GET /v1/orders/{id} shows that
// one: created_at is when it was confirmed, and there is no decided_at. The queue's own row
// would give the acceptance time as created_at and the decision time as decided_at, so a
// replay under the order's key and a read of the order would disagree about one order.
// Errors: the service's Order errors.
func (s *Server) asyncOrderResponse(ctx context.Context, o async.Order) (orderResponse, error) {
	if o.Status != async.StatusConfirmed {
		return toAsyncOrderResponse(o), nil
	}
	confirmed, err := s.svc.Order(ctx, o.ID)
	if err != nil {
		return orderResponse{}, err
	}
	return toOrderResponse(confirmed), nil
}

// writeAcceptedOrder answers 202 with the order accepted for later, as it stands.
func (s *Server) writeAcceptedOrder(w http.ResponseWriter, r *http.Request, o async.Order) {
	body, err := s.asyncOrderResponse(r.Context(), o)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/orders/"+o.ID.String())
	w.Header().Set("Preference-Applied", "respond-async")
	writeJSON(w, http.StatusAccepted, "application/json", body)
}
