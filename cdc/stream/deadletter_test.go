package stream

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/cdc/deadletter"
	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// fakeDeadLetters records what the session dead-letters.
type fakeDeadLetters struct {
	mu      sync.Mutex
	written []deadletter.Letter
	err     error
}

func (f *fakeDeadLetters) Write(_ context.Context, dl deadletter.Letter) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.written = append(f.written, dl)
	return nil
}

func (f *fakeDeadLetters) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, dl := range f.written {
		ids = append(ids, dl.Event.ID)
	}
	return ids
}

// outcomeProducer reports each record's outcome from another goroutine, as
// librdkafka does: outcome decides it by event ID.
type outcomeProducer struct {
	s       *session
	outcome func(eventID string) error
	sync    error // returned by Publish itself when set
	fatal   chan error
	mu      sync.Mutex
	alone   []string // event IDs produced with nothing else in flight
}

func (p *outcomeProducer) Publish(_ context.Context, _ *decode.Event, _ string, _, opaque any) error {
	if p.sync != nil {
		return p.sync
	}
	d := opaque.(*delivery)
	if d.alone != nil {
		p.mu.Lock()
		p.alone = append(p.alone, d.eventID)
		p.mu.Unlock()
	}
	go p.s.onDelivery(d, p.outcome(d.eventID))
	return nil
}
func (p *outcomeProducer) Fatal() <-chan error     { return p.fatal }
func (p *outcomeProducer) Close(time.Duration) int { return 0 }

func insertWithHeaders(id, headers string) *pglogrepl.InsertMessage {
	col := func(v string) *pglogrepl.TupleDataColumn {
		return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(v)}
	}
	return &pglogrepl.InsertMessage{RelationID: 2, Tuple: &pglogrepl.TupleData{Columns: []*pglogrepl.TupleDataColumn{
		col(id), col("order"), col("order-1"), col(contract.TypeOrderCreated), col(`{}`), col(headers),
	}}}
}

// newDeadLetterSession is a session with an asynchronous producer; the
// suspects are shared across sessions, as a relay's are.
func newDeadLetterSession(t *testing.T, cfg Config, suspects *deadletter.Suspects, outcome func(string) error) (*session, *outcomeProducer, *fakeDeadLetters) {
	t.Helper()
	s, _ := newTestSession(t, cfg)
	s.Suspects = suspects
	pub := &outcomeProducer{s: s, outcome: outcome, fatal: make(chan error, 1)}
	dead := &fakeDeadLetters{}
	s.pub = pub
	s.DeadLetters = &deadletter.Recorder{Writer: dead, Router: s.Router, Driver: s.Driver, Counter: s.Metrics.DeadLettered, Logger: s.Logger}
	rel := &pglogrepl.RelationMessage{RelationID: 2, Namespace: "public", RelationName: "outbox", Columns: []*pglogrepl.RelationMessageColumn{
		{Name: "id"}, {Name: "aggregatetype"}, {Name: "aggregateid"}, {Name: "type"}, {Name: "payload"}, {Name: "headers"},
	}}
	if err := s.handle(context.Background(), rel, 0); err != nil {
		t.Fatal(err)
	}
	return s, pub, dead
}

// waitConfirmable waits until the session may confirm want.
func waitConfirmable(t *testing.T, s *session, want pglogrepl.LSN) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "confirmable position", func() error {
		if got := s.tracker.Confirmable(); got != want {
			return errors.New("confirmable " + got.String() + ", want " + want.String())
		}
		return nil
	})
}

func TestSessionDeadLetters(t *testing.T) {
	tooLarge := kafka.NewError(kafka.ErrMsgSizeTooLarge, "Broker: Message size too large", false)
	begin := &pglogrepl.BeginMessage{CommitTime: time.Now()}
	commit := &pglogrepl.CommitMessage{TransactionEndLSN: 200}
	cfg := testConfig()
	cfg.StatusInterval = time.Hour // no status update on the test's nil connection
	run := func(s *session, msgs ...pglogrepl.Message) error {
		for _, m := range msgs {
			if err := s.handle(context.Background(), m, 150); err != nil {
				return err
			}
		}
		return nil
	}

	t.Run("malformed headers are dead-lettered and the commit confirmed", func(t *testing.T) {
		suspects := &deadletter.Suspects{}
		s, _, dead := newDeadLetterSession(t, cfg, suspects, func(string) error { return nil })
		if err := run(s, begin, insertWithHeaders("bad", `{"n": 1}`), insertWithHeaders("good", `{}`), commit); err != nil {
			t.Fatal(err)
		}
		waitConfirmable(t, s, 200)
		if got := dead.ids(); len(got) != 1 || got[0] != "bad" || !errors.Is(dead.written[0].Cause, decode.ErrMalformedHeaders) {
			t.Fatalf("dead letters %v, want the malformed event", got)
		}
		if dead.written[0].Event.HeadersJSON != `{"n": 1}` || dead.written[0].LSN != 150 {
			t.Errorf("dead letter keeps headers %q at %s", dead.written[0].Event.HeadersJSON, dead.written[0].LSN)
		}
	})

	t.Run("a record Produce refuses by itself is dead-lettered at once", func(t *testing.T) {
		suspects := &deadletter.Suspects{}
		s, pub, dead := newDeadLetterSession(t, cfg, suspects, func(string) error { return nil })
		pub.sync = tooLarge
		if err := run(s, begin, insertWithHeaders("big", `{}`), commit); err != nil {
			t.Fatal(err)
		}
		waitConfirmable(t, s, 200)
		if got := dead.ids(); len(got) != 1 || got[0] != "big" || dead.written[0].Topic != contract.Topic {
			t.Fatalf("dead letters %v, want big on eventforge.orders", got)
		}
	})

	t.Run("a batch refusal makes suspects; alone, the innocent is published and the culprit dead-lettered", func(t *testing.T) {
		suspects := &deadletter.Suspects{}
		// First session: the batch of both events is refused.
		s1, _, dead1 := newDeadLetterSession(t, cfg, suspects, func(string) error { return tooLarge })
		if err := run(s1, begin, insertWithHeaders("innocent", `{}`), insertWithHeaders("culprit", `{}`), commit); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-s1.failed:
			if !errors.Is(err, tooLarge) {
				t.Fatalf("session failed with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a refused batch did not end the session")
		}
		// The session ended on the first report; the reader's session end
		// waits for the rest of the batch's reports (the flush), after
		// which both records are suspects.
		testenv.Eventually(t, 10*time.Second, "both refused records suspects", func() error {
			if !suspects.Has("innocent") || !suspects.Has("culprit") {
				return errors.New("the batch's second report has not arrived")
			}
			return nil
		})
		if got := s1.tracker.Confirmable(); got != 100 {
			t.Fatalf("confirmable %s after a refused batch, want 100", got)
		}
		if len(dead1.ids()) != 0 {
			t.Fatalf("dead-lettered %v from a batch refusal", dead1.ids())
		}
		// Next session: each suspect alone; only the culprit is refused again.
		s2, pub2, dead2 := newDeadLetterSession(t, cfg, suspects, func(id string) error {
			if id == "culprit" {
				return tooLarge
			}
			return nil
		})
		if err := run(s2, begin, insertWithHeaders("innocent", `{}`), insertWithHeaders("culprit", `{}`), insertWithHeaders("later", `{}`), commit); err != nil {
			t.Fatal(err)
		}
		waitConfirmable(t, s2, 200)
		if got := dead2.ids(); len(got) != 1 || got[0] != "culprit" {
			t.Fatalf("dead letters %v, want only the culprit", got)
		}
		pub2.mu.Lock()
		alone := pub2.alone
		pub2.mu.Unlock()
		if len(alone) != 2 {
			t.Fatalf("produced alone %v, want the two suspects", alone)
		}
		if suspects.Has("innocent") || suspects.Has("culprit") {
			t.Error("suspects kept after they were settled")
		}
	})

	t.Run("a dead letter that cannot be written is never confirmed", func(t *testing.T) {
		suspects := &deadletter.Suspects{}
		s, _, dead := newDeadLetterSession(t, cfg, suspects, func(string) error { return nil })
		dead.err = errors.New("table gone")
		err := run(s, begin, insertWithHeaders("bad", `[1]`), commit)
		if !errors.Is(err, dead.err) {
			t.Fatalf("handle = %v, want the write error", err)
		}
		if got := s.tracker.Confirmable(); got != 100 {
			t.Fatalf("confirmable %s, want 100", got)
		}
	})

	t.Run("a purge is not permanent: republished, never dead-lettered", func(t *testing.T) {
		suspects := &deadletter.Suspects{}
		s, _, dead := newDeadLetterSession(t, cfg, suspects, func(string) error { return kafka.NewError(kafka.ErrPurgeQueue, "purged", false) })
		if err := run(s, begin, insertWithHeaders("e1", `{}`), commit); err != nil {
			t.Fatal(err)
		}
		if err := <-s.failed; err == nil {
			t.Fatal("the purged delivery was not reported as a failure")
		}
		if suspects.Has("e1") || len(dead.ids()) != 0 {
			t.Fatal("a purged record became a suspect or a dead letter")
		}
	})
}
