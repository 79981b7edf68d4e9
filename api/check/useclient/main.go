// Command useclient is a small program written against the client oapi-codegen generates from
// api/openapi.yaml (package client): it creates a product through the admin listener and
// buys one unit of it on the public one. .ci/run builds it, so a change to the document that
// would hand a Go client the wrong types — a product id that is not an int64, a problem code
// that is not the ProblemCode enum — fails CI at compile time. It can also be run against a
// server:
//
//	go run ./useclient -public http://127.0.0.1:8080 -admin http://127.0.0.1:9090
//
// with STOCKSVC_ADMIN_TOKEN set and the server in body mode (STOCKSVC_CUSTOMER_AUTH=body).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/stocksvc/stocksvc/api/check/client"
)

// The types a client must get from the document; each line fails to compile otherwise.
var (
	_ int64              = client.ProductID(0)
	_ client.ProblemCode = client.Problem{}.Code
	_ client.ProblemCode = client.MalformedJSON{}.Code
	_ client.ProblemCode = client.ProblemCodeSoldOut
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "useclient:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	public := flag.String("public", "http://127.0.0.1:8080", "the public listener")
	admin := flag.String("admin", "http://127.0.0.1:9090", "the admin listener")
	flag.Parse()
	token := os.Getenv("STOCKSVC_ADMIN_TOKEN")
	if token == "" {
		return errors.New("set STOCKSVC_ADMIN_TOKEN")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	bearer := func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	}
	adm, err := client.NewClientWithResponses(*admin, client.WithRequestEditorFn(bearer))
	if err != nil {
		return err
	}
	created, err := adm.CreateProductWithResponse(ctx, &client.CreateProductParams{},
		client.NewProduct{Sku: fmt.Sprintf("USECLIENT-%d", time.Now().UnixNano()), Name: "useclient", Stock: 1})
	if err != nil {
		return fmt.Errorf("create product: %w", err)
	}
	if created.JSON201 == nil {
		return fmt.Errorf("create product: %s %s", created.Status(), created.Body)
	}
	var id client.ProductID = created.JSON201.Id

	pub, err := client.NewClientWithResponses(*public)
	if err != nil {
		return err
	}
	customer := "useclient"
	placed, err := pub.PlaceOrderWithResponse(ctx, &client.PlaceOrderParams{},
		client.NewOrder{CustomerId: &customer, Items: []client.OrderItem{{ProductId: id, Quantity: 1}}})
	if err != nil {
		return fmt.Errorf("place order: %w", err)
	}
	switch {
	case placed.JSON201 != nil:
		fmt.Printf("product %d: order %s %s\n", id, placed.JSON201.Id, placed.JSON201.Status)
		return nil
	case placed.ApplicationproblemJSON409 != nil:
		return fmt.Errorf("place order: refused")
	}
	return fmt.Errorf("place order: %s %s", placed.Status(), placed.Body)
}
