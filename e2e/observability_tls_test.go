package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/eventforge/eventforge/internal/testenv"
	"github.com/eventforge/eventforge/internal/testkit"
	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// TestAPIServesTLS runs the api with --tls-cert-file/--tls-key-file: REST
// (through the gateway, which calls the gRPC server over TLS) and gRPC both
// create orders over TLS, and a plaintext request is refused.
func TestAPIServesTLS(t *testing.T) {
	c := testkit.SelfSignedCert(t, t.TempDir(), "eventforge-api")
	certPath, keyPath, pool := c.CertFile, c.KeyFile, c.Pool
	pl := newPipeline(t)
	p := pl.apiProc(t, "api", nil, pl.env.DatabaseURL, "--tls-cert-file", certPath, "--tls-key-file", keyPath)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	base := "https://" + pl.httpAddr
	testenv.Eventually(t, 30*time.Second, "api ready over https", func() error {
		select {
		case <-p.Exited():
			return fmt.Errorf("api exited: %v", p.Err())
		default:
		}
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})

	resp, err := client.Post(base+"/v1/orders", "application/json",
		bytes.NewBufferString(`{"customer_id":"tls-rest","currency":"EUR","items":[{"sku":"SKU-1","quantity":1,"unit_price_cents":100}]}`))
	if err != nil {
		t.Fatalf("REST over TLS: %v", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var body struct {
		Order struct {
			OrderID string `json:"order_id"`
		} `json:"order"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &body) != nil || body.Order.OrderID == "" {
		t.Fatalf("REST over TLS: %s %s", resp.Status, raw)
	}

	conn, err := grpc.NewClient(pl.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gresp, err := eventforgev1.NewOrderServiceClient(conn).CreateOrder(ctx, &eventforgev1.CreateOrderRequest{
		CustomerId: "tls-grpc", Currency: "EUR",
		Items: []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 1, UnitPriceCents: 100}},
	})
	if err != nil {
		t.Fatalf("gRPC over TLS: %v", err)
	}

	var n int
	if err := pl.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE id = ANY($1::uuid[])`,
		[]string{body.Order.OrderID, gresp.GetOrder().GetOrderId()}).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d of the 2 orders created over TLS are in PostgreSQL", n)
	}

	if plain, err := http.Get("http://" + pl.httpAddr + "/readyz"); err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Fatal("a plaintext request to the TLS port was answered 200")
		}
	}
}
