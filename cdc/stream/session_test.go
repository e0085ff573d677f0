package stream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/cdc/deadletter"
	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/gap"
	"github.com/eventforge/eventforge/cdc/metrics"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/progress"
	"github.com/eventforge/eventforge/cdc/sink"
	"github.com/eventforge/eventforge/cdc/sink/kafkasink"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/failpoint"
)

// fakeProducer records what the session publishes; outcomes are delivered by
// the test through the session's onDelivery.
type fakeProducer struct {
	published []*delivery
	err       error
	fatal     chan error
}

func (f *fakeProducer) Publish(_ context.Context, _ *decode.Event, _ string, _, opaque any) error {
	if f.err != nil {
		return f.err
	}
	f.published = append(f.published, opaque.(*delivery))
	return nil
}
func (f *fakeProducer) Fatal() <-chan error { return f.fatal }
func (f *fakeProducer) Close(time.Duration) int {
	return 0
}

const testNonce = "n0nce"

// testConfig is a session's configuration with the relay's defaults.
func testConfig() Config {
	return Config{
		Slot: "test", Publication: "test", Outbox: outbox.Table{"public", "outbox"},
		StatusInterval: 2 * time.Second, ConfirmInterval: 100 * time.Millisecond, FlushTimeout: 10 * time.Second,
		MaxInflightEvents: 2500, MaxInflightBytes: 16 << 20,
	}
}

// testDeps are a session's dependencies without a database: the sink
// driver classifies as Kafka's does, dead letters go nowhere.
func testDeps(t *testing.T) Deps {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := metrics.NewSlot("test_" + t.Name())
	return Deps{
		Driver:      kafkasink.Driver{},
		Router:      sink.Router{Topics: map[string]string{contract.AggregateOrder: contract.Topic}, Fallback: "eventforge.{aggregatetype}"},
		DeadLetters: &deadletter.Recorder{Writer: &fakeDeadLetters{}, Driver: kafkasink.Driver{}, Counter: m.DeadLettered, Logger: logger},
		Suspects:    &deadletter.Suspects{},
		Limit:       gap.NewLimit(),
		Metrics:     m,
		Progress:    &progress.Progress{},
		Heartbeats:  &progress.Heartbeats{},
		Nonce:       testNonce,
		Logger:      logger,
	}
}

func newTestSession(t *testing.T, cfg Config) (*session, *fakeProducer) {
	t.Helper()
	pub := &fakeProducer{fatal: make(chan error, 1)}
	s := newSession(cfg, testDeps(t), 100)
	s.pub = pub
	rel := &pglogrepl.RelationMessage{RelationID: 1, Namespace: "public", RelationName: "outbox", Columns: []*pglogrepl.RelationMessageColumn{
		{Name: "id"}, {Name: "aggregatetype"}, {Name: "aggregateid"}, {Name: "type"}, {Name: "payload"},
	}}
	if err := s.handle(context.Background(), rel, 0); err != nil {
		t.Fatal(err)
	}
	return s, pub
}

func insert(id string) *pglogrepl.InsertMessage {
	col := func(v string) *pglogrepl.TupleDataColumn {
		return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(v)}
	}
	return &pglogrepl.InsertMessage{RelationID: 1, Tuple: &pglogrepl.TupleData{Columns: []*pglogrepl.TupleDataColumn{
		col(id), col("order"), col("order-1"), col(contract.TypeOrderCreated), col(`{}`),
	}}}
}

func heartbeat(lsn pglogrepl.LSN, nonce string, at time.Time) *pglogrepl.LogicalDecodingMessage {
	return &pglogrepl.LogicalDecodingMessage{LSN: lsn, Prefix: progress.HeartbeatPrefix, Content: []byte(nonce + "/" + strconv.FormatInt(at.UnixNano(), 10))}
}

// TestSessionAccounting drives a session with decoded messages and delivery
// outcomes and checks what it may confirm.
func TestSessionAccounting(t *testing.T) {
	begin := &pglogrepl.BeginMessage{CommitTime: time.Now()}
	commit := &pglogrepl.CommitMessage{TransactionEndLSN: 200}
	errBroker := errors.New("broker said no")
	tests := []struct {
		name          string
		failpoints    string
		steps         func(t *testing.T, s *session, pub *fakeProducer) error
		wantErr       error
		wantConfirmed pglogrepl.LSN
		wantFailed    bool
	}{
		{
			name: "all acked confirms the commit end",
			steps: func(t *testing.T, s *session, pub *fakeProducer) error {
				for _, m := range []pglogrepl.Message{begin, insert("e1"), insert("e2"), commit} {
					if err := s.handle(context.Background(), m, 0); err != nil {
						return err
					}
				}
				for _, d := range pub.published {
					s.onDelivery(d, nil)
				}
				return nil
			},
			wantConfirmed: 200,
		},
		{
			name: "a failed delivery never advances the LSN",
			steps: func(t *testing.T, s *session, pub *fakeProducer) error {
				for _, m := range []pglogrepl.Message{begin, insert("e1"), insert("e2"), commit} {
					if err := s.handle(context.Background(), m, 0); err != nil {
						return err
					}
				}
				s.onDelivery(pub.published[0], errBroker)
				s.onDelivery(pub.published[1], nil)
				return nil
			},
			wantConfirmed: 100,
			wantFailed:    true,
		},
		{
			name: "produce error releases the event",
			steps: func(t *testing.T, s *session, pub *fakeProducer) error {
				pub.err = errBroker
				if err := s.handle(context.Background(), begin, 0); err != nil {
					return err
				}
				err := s.handle(context.Background(), insert("e1"), 0)
				if n := s.tracker.Inflight(); n != 0 {
					t.Errorf("inflight after a refused produce = %d, want 0", n)
				}
				return err
			},
			wantErr:       errBroker,
			wantConfirmed: 100,
		},
		{
			name:       "mid_transaction fires after the first ack, before COMMIT",
			failpoints: failpoint.CDCMidTransaction + "=error",
			steps: func(t *testing.T, s *session, pub *fakeProducer) error {
				for _, m := range []pglogrepl.Message{begin, insert("e1")} {
					if err := s.handle(context.Background(), m, 0); err != nil {
						t.Fatalf("fired before any ack: %v", err)
					}
				}
				s.onDelivery(pub.published[0], nil)
				return s.handle(context.Background(), insert("e2"), 0)
			},
			wantErr:       failpoint.ErrInjected,
			wantConfirmed: 100,
		},
		{
			name:       "mid_transaction fires at COMMIT when nothing was acked",
			failpoints: failpoint.CDCMidTransaction + "=error",
			steps: func(t *testing.T, s *session, pub *fakeProducer) error {
				for _, m := range []pglogrepl.Message{begin, insert("e1"), commit} {
					if err := s.handle(context.Background(), m, 0); err != nil {
						return err
					}
				}
				return nil
			},
			wantErr:       failpoint.ErrInjected,
			wantConfirmed: 100,
		},
		{
			name:       "mid_transaction skips transactions without events",
			failpoints: failpoint.CDCMidTransaction + "=error",
			steps: func(t *testing.T, s *session, pub *fakeProducer) error {
				for _, m := range []pglogrepl.Message{begin, commit} {
					if err := s.handle(context.Background(), m, 0); err != nil {
						return err
					}
				}
				return nil
			},
			wantConfirmed: 200,
		},
		{
			name: "idle heartbeat moves the confirmable position",
			steps: func(t *testing.T, s *session, pub *fakeProducer) error {
				return s.handle(context.Background(), heartbeat(500, testNonce, time.Now()), 0)
			},
			wantConfirmed: 500,
		},
		{
			name: "heartbeat behind an unacknowledged transaction does not",
			steps: func(t *testing.T, s *session, pub *fakeProducer) error {
				for _, m := range []pglogrepl.Message{begin, insert("e1"), commit, heartbeat(500, testNonce, time.Now())} {
					if err := s.handle(context.Background(), m, 0); err != nil {
						return err
					}
				}
				return nil
			},
			wantConfirmed: 100,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := failpoint.Arm(tt.failpoints); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = failpoint.Arm("") })
			s, pub := newTestSession(t, testConfig())
			err := tt.steps(t, s, pub)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error = %v, want %v", err, tt.wantErr)
			}
			if got := s.tracker.Confirmable(); got != tt.wantConfirmed {
				t.Errorf("confirmable = %s, want %s", got, tt.wantConfirmed)
			}
			select {
			case err := <-s.failed:
				if !tt.wantFailed {
					t.Errorf("unexpected session failure: %v", err)
				}
			default:
				if tt.wantFailed {
					t.Error("no session failure reported")
				}
			}
		})
	}
}

func TestSessionBackpressure(t *testing.T) {
	cfg := testConfig()
	cfg.MaxInflightEvents = 2
	s, pub := newTestSession(t, cfg)
	ctx := context.Background()
	for _, m := range []pglogrepl.Message{&pglogrepl.BeginMessage{}, insert("e1")} {
		if err := s.handle(ctx, m, 0); err != nil {
			t.Fatal(err)
		}
	}
	if s.full() {
		t.Fatal("full with one event in flight, bound 2")
	}
	if err := s.handle(ctx, insert("e2"), 0); err != nil {
		t.Fatal(err)
	}
	if !s.full() {
		t.Fatal("not full with two events in flight, bound 2")
	}
	s.onDelivery(pub.published[0], nil)
	select {
	case <-s.space:
	default:
		t.Fatal("an ack did not signal room")
	}
	if s.full() {
		t.Fatal("still full after an ack")
	}

	cfg.MaxInflightEvents, cfg.MaxInflightBytes = 1000, 100
	s, _ = newTestSession(t, cfg)
	for _, m := range []pglogrepl.Message{&pglogrepl.BeginMessage{}, insert("e1")} {
		if err := s.handle(ctx, m, 0); err != nil {
			t.Fatal(err)
		}
	}
	if !s.full() {
		t.Fatalf("not full with %d bytes in flight, bound 100", s.tracker.InflightBytes())
	}
}

func TestSessionHeartbeatRoundTrip(t *testing.T) {
	s, _ := newTestSession(t, testConfig())
	sent := time.Now().Add(-40 * time.Millisecond)
	s.Heartbeats.Sent(sent)
	if err := s.handle(context.Background(), heartbeat(300, "someone-else", sent), 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Heartbeats.Lag(sent); ok {
		t.Fatal("another process's heartbeat was taken as this one's round trip")
	}
	if err := s.handle(context.Background(), heartbeat(400, testNonce, sent), 0); err != nil {
		t.Fatal(err)
	}
	lag, ok := s.Heartbeats.Lag(time.Now())
	if !ok || lag < 40*time.Millisecond || lag > time.Minute {
		t.Fatalf("lag = %v, %v; want about 40ms", lag, ok)
	}
}
