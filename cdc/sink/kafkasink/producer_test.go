package kafkasink

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/contract"
)

// TestProducerNeverTimesOutYetCloses: librdkafka accepts the relay's
// producer settings (idempotent, infinite message timeout), keeps a record
// it cannot deliver instead of failing it, and Close still ends the
// producer — reporting the record as failed (purged), never as delivered.
func TestProducerNeverTimesOutYetCloses(t *testing.T) {
	// A loopback port that accepts nothing: Kafka is unreachable.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	cfg := Config{ProducerSettings: map[string]string{"request.timeout.ms": "100", "socket.timeout.ms": "100", "reconnect.backoff.max.ms": "100"}}
	settings := cfg.RelaySettings(2500, 16<<20)
	if got := settings["message.timeout.ms"]; got != 0 {
		t.Fatalf("message.timeout.ms = %v, want 0 (infinite)", got)
	}
	outcomes := make(chan error, 1)
	pub, err := New(Options{
		Bootstrap: addr,
		ClientID:  "eventforge-cdc-test",
		Extra:     settings,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), func(_ any, err error) { outcomes <- err })
	if err != nil {
		t.Fatal(err)
	}
	ev := &decode.Event{ID: "0195f5a8-0000-7000-8000-000000000001", AggregateType: contract.AggregateOrder, AggregateID: "o1", Type: contract.TypeOrderCreated, Payload: []byte(`{}`)}
	if err := pub.Publish(context.Background(), ev, "t.order", nil, nil); err != nil {
		t.Fatal(err)
	}
	// Many request timeouts later, the record is still waiting.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-outcomes:
			t.Fatalf("record reported (%v) while Kafka is unreachable; want it kept", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if left := pub.Close(200 * time.Millisecond); left != 1 {
		t.Fatalf("Close left %d records undelivered, want 1", left)
	}
	select {
	case err := <-outcomes:
		if err == nil {
			t.Fatal("purged record reported as delivered")
		}
		t.Logf("purged record reported: %v", err)
	default:
		t.Fatal("no delivery report for the purged record")
	}
}
