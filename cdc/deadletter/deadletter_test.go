package deadletter_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/deadletter"
	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/sink"
	"github.com/eventforge/eventforge/cdc/sink/kafkasink"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// TestTable dead-letters an event into the real table twice: the second
// refusal updates the row and counts the attempt, and List reads it back.
func TestTable(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctl, err := control.Open(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close(context.Background()) })
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_dead_lettered"})
	rec := &deadletter.Recorder{
		Writer:  deadletter.TableWriter{Control: ctl, Table: outbox.Table{"public", "cdc_dead_letters"}, Slot: env.Slot},
		Router:  sink.Router{Topics: map[string]string{contract.AggregateOrder: contract.Topic}},
		Driver:  kafkasink.Driver{},
		Counter: counter,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	ev := &decode.Event{ID: "0195f5a8-0000-7000-8000-000000000001", AggregateType: contract.AggregateOrder, AggregateID: "o-1", Type: contract.TypeOrderCreated,
		Payload: []byte(`{"order_id":"o-1"}`), HeadersJSON: `{"n": 1}`, CreatedAt: "2026-11-30 05:00:01.5+00"}
	cause := kafka.NewError(kafka.ErrMsgSizeTooLarge, "Broker: Message size too large", false)
	for range 2 {
		if err := rec.Store(ctx, ev, 0x16B3748, cause); err != nil {
			t.Fatal(err)
		}
	}
	var (
		lsn, topic, headers, code string
		attempts                  int
		created                   time.Time
	)
	err = env.Pool.QueryRow(ctx, `SELECT lsn::text, topic, headers, error_code, attempts, created_at FROM cdc_dead_letters WHERE event_id = $1`, ev.ID).
		Scan(&lsn, &topic, &headers, &code, &attempts, &created)
	if err != nil {
		t.Fatal(err)
	}
	if lsn != "0/16B3748" || topic != contract.Topic || headers != `{"n": 1}` || code != "10 Broker: Message size too large" || attempts != 2 ||
		!created.Equal(time.Date(2026, 11, 30, 5, 0, 1, 500e6, time.UTC)) {
		t.Fatalf("row: lsn %s topic %s headers %s code %q attempts %d created %s", lsn, topic, headers, code, attempts, created)
	}
	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	rows, err := deadletter.List(ctx, conn.Conn(), "public.cdc_dead_letters", true)
	if err != nil || len(rows) != 1 || rows[0].EventID != ev.ID || rows[0].Attempts != 2 || rows[0].ReplayedAt != nil {
		t.Fatalf("List = %+v, %v; want the one pending dead letter, attempted twice", rows, err)
	}
}
