package kafkasink_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/sink"
	"github.com/eventforge/eventforge/cdc/sink/kafkasink"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// reports collects a publisher's outcomes.
type reports struct {
	mu  sync.Mutex
	got map[string]error
}

func (r *reports) report(opaque any, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string]error{}
	}
	r.got[opaque.(string)] = err
}

func (r *reports) of(id string) (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err, ok := r.got[id]
	return err, ok
}

// TestTxnPublisher on real Kafka: committed records and their position
// are visible to a read_committed reader, an aborted transaction's are
// not, and a second publisher of the same transactional ID fences the
// first, whose later records never become visible.
func TestTxnPublisher(t *testing.T) {
	env := testenv.New(t)
	bootstrap := env.Endpoints.KafkaBootstrap
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	positions := testenv.Name("efpos")
	if err := kafkasink.EnsurePositionTopic(ctx, bootstrap, positions); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.DeleteTopics(bootstrap, positions) })
	d := kafkasink.TxnDriver{Bootstrap: bootstrap, TransactionalID: kafkasink.TransactionalID(env.Database, env.Slot),
		PositionTopic: positions, PositionKey: env.Slot, Timeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, ok, err := d.Position(ctx); err != nil || ok {
		t.Fatalf("Position before any commit = %v, %v; want none", ok, err)
	}
	var first reports
	s, err := d.Open("eventforge-cdc-test", first.report)
	if err != nil {
		t.Fatal(err)
	}
	pub := s.(sink.Transactional)
	ev := func(id string) *decode.Event {
		return &decode.Event{ID: id, AggregateType: contract.AggregateOrder, AggregateID: "o-" + id, Type: contract.TypeOrderCreated, Payload: []byte(`{}`)}
	}
	publish := func(p sink.Sink, id string) {
		t.Helper()
		if err := p.Publish(ctx, ev(id), env.Topic, 1, id); err != nil {
			t.Fatal(err)
		}
	}
	publish(pub, "a")
	publish(pub, "b")
	if _, reported := first.of("a"); reported {
		t.Fatal("a record was reported before its transaction committed")
	}
	if err := pub.Commit(ctx, sink.Position{LSN: 100}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err, ok := first.of(id); !ok || err != nil {
			t.Fatalf("record %s after the commit: reported %v, %v; want stored", id, ok, err)
		}
	}
	if pos, ok, err := d.Position(ctx); err != nil || !ok || pos.LSN != 100 {
		t.Fatalf("Position = %+v, %v, %v; want 100", pos, ok, err)
	}

	// A second publisher of the relay fences the first: the first's open
	// transaction and whatever it sends later stay invisible.
	publish(pub, "fenced")
	var second reports
	s2, err := d.Open("eventforge-cdc-test", second.report)
	if err != nil {
		t.Fatal(err)
	}
	err = pub.Commit(ctx, sink.Position{LSN: 200})
	if err == nil {
		t.Fatal("the fenced publisher committed")
	}
	if err, ok := first.of("fenced"); !ok || err == nil {
		t.Fatalf("record of the fenced publisher reported %v, %v; want failed", ok, err)
	}
	pub.Close(time.Second)
	pub2 := s2.(sink.Transactional)
	publish(pub2, "c")
	if err := pub2.Commit(ctx, sink.Position{LSN: 300, PartialXID: 7, PartialEvents: 2}); err != nil {
		t.Fatal(err)
	}
	// An aborted transaction (closed with a record open) stays invisible.
	publish(pub2, "aborted")
	if left := pub2.Close(time.Second); left != 1 {
		t.Fatalf("Close left %d records, want the open one", left)
	}
	if err, ok := second.of("aborted"); !ok || err == nil {
		t.Fatalf("the aborted record reported %v, %v; want failed", ok, err)
	}

	recs, err := testenv.ReadTopic(bootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Headers[contract.HeaderID])
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Fatalf("a read_committed reader sees %v, want [a b c]", ids)
	}
	if pos, ok, err := d.Position(ctx); err != nil || !ok || pos != (sink.Position{LSN: 300, PartialXID: 7, PartialEvents: 2}) {
		t.Fatalf("Position = %+v, %v, %v; want the last committed one", pos, ok, err)
	}
	published, err := d.Published(ctx, []string{env.Topic}, time.Now().Add(-time.Minute))
	if err != nil || len(published) != 3 || !published["c"] || published["aborted"] {
		t.Fatalf("Published = %v, %v; want a, b and c", published, err)
	}
}
