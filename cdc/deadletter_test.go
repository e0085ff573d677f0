package cdc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// fakeDeadLetters records what the session dead-letters.
type fakeDeadLetters struct {
	mu      sync.Mutex
	written []deadLetter
	err     error
}

func (f *fakeDeadLetters) write(_ context.Context, dl deadLetter) error {
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
		ids = append(ids, dl.ev.ID)
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

func (p *outcomeProducer) Publish(_ context.Context, _ *decode.Event, _, opaque any) error {
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

// newDeadLetterSession is a session on a reader r (shared across sessions,
// as the suspects are) with an asynchronous producer.
func newDeadLetterSession(t *testing.T, r *reader, outcome func(string) error) (*session, *outcomeProducer, *fakeDeadLetters) {
	t.Helper()
	s, _ := newTestSession(t, r.cfg)
	if r.m == nil {
		r.m, r.logger, r.prog, r.hb, r.nonce = s.m, s.logger, s.prog, s.hb, s.nonce
	}
	s.reader = r
	pub := &outcomeProducer{s: s, outcome: outcome, fatal: make(chan error, 1)}
	dead := &fakeDeadLetters{}
	s.pub, s.dead = pub, dead
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
	cfg := DefaultConfig()
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
		r := &reader{cfg: cfg}
		s, _, dead := newDeadLetterSession(t, r, func(string) error { return nil })
		if err := run(s, begin, insertWithHeaders("bad", `{"n": 1}`), insertWithHeaders("good", `{}`), commit); err != nil {
			t.Fatal(err)
		}
		waitConfirmable(t, s, 200)
		if got := dead.ids(); len(got) != 1 || got[0] != "bad" || !errors.Is(dead.written[0].cause, decode.ErrMalformedHeaders) {
			t.Fatalf("dead letters %v, want the malformed event", got)
		}
		if dead.written[0].ev.HeadersJSON != `{"n": 1}` || dead.written[0].lsn != 150 {
			t.Errorf("dead letter keeps headers %q at %s", dead.written[0].ev.HeadersJSON, dead.written[0].lsn)
		}
	})

	t.Run("a record Produce refuses by itself is dead-lettered at once", func(t *testing.T) {
		r := &reader{cfg: cfg}
		s, pub, dead := newDeadLetterSession(t, r, func(string) error { return nil })
		pub.sync = tooLarge
		if err := run(s, begin, insertWithHeaders("big", `{}`), commit); err != nil {
			t.Fatal(err)
		}
		waitConfirmable(t, s, 200)
		if got := dead.ids(); len(got) != 1 || got[0] != "big" || dead.written[0].topic != contract.Topic {
			t.Fatalf("dead letters %v, want big on eventforge.orders", got)
		}
	})

	t.Run("a batch refusal makes suspects; alone, the innocent is published and the culprit dead-lettered", func(t *testing.T) {
		r := &reader{cfg: cfg}
		// First session: the batch of both events is refused.
		s1, _, dead1 := newDeadLetterSession(t, r, func(string) error { return tooLarge })
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
			if !r.suspects.has("innocent") || !r.suspects.has("culprit") {
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
		s2, pub2, dead2 := newDeadLetterSession(t, r, func(id string) error {
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
		if r.suspects.has("innocent") || r.suspects.has("culprit") {
			t.Error("suspects kept after they were settled")
		}
	})

	t.Run("a dead letter that cannot be written is never confirmed", func(t *testing.T) {
		r := &reader{cfg: cfg}
		s, _, dead := newDeadLetterSession(t, r, func(string) error { return nil })
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
		r := &reader{cfg: cfg}
		s, _, dead := newDeadLetterSession(t, r, func(string) error { return kafka.NewError(kafka.ErrPurgeQueue, "purged", false) })
		if err := run(s, begin, insertWithHeaders("e1", `{}`), commit); err != nil {
			t.Fatal(err)
		}
		if err := <-s.failed; err == nil {
			t.Fatal("the purged delivery was not reported as a failure")
		}
		if r.suspects.has("e1") || len(dead.ids()) != 0 {
			t.Fatal("a purged record became a suspect or a dead letter")
		}
	})
}

// TestDeadLetterTable writes a dead letter to the real table twice: the
// second refusal updates the row and counts the attempt.
func TestDeadLetterTable(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := tableWriter{ctl: testControl(ctx, t, env), table: pgx.Identifier{"public", "cdc_dead_letters"}, slot: env.Slot}
	ev := &decode.Event{ID: "0195f5a8-0000-7000-8000-000000000001", AggregateType: contract.AggregateOrder, AggregateID: "o-1", Type: contract.TypeOrderCreated,
		Payload: []byte(`{"order_id":"o-1"}`), HeadersJSON: `{"n": 1}`, CreatedAt: "2026-11-30 05:00:01.5+00"}
	cause := kafka.NewError(kafka.ErrMsgSizeTooLarge, "Broker: Message size too large", false)
	for range 2 {
		if err := w.write(ctx, deadLetter{ev: ev, topic: contract.Topic, lsn: 0x16B3748, cause: cause}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		lsn, topic, headers, code string
		attempts                  int
		created                   time.Time
	)
	err := w.ctl.conn.QueryRow(ctx, `SELECT lsn::text, topic, headers, error_code, attempts, created_at FROM cdc_dead_letters WHERE event_id = $1`, ev.ID).
		Scan(&lsn, &topic, &headers, &code, &attempts, &created)
	if err != nil {
		t.Fatal(err)
	}
	if lsn != "0/16B3748" || topic != contract.Topic || headers != `{"n": 1}` || code != "10 Broker: Message size too large" || attempts != 2 ||
		!created.Equal(time.Date(2026, 11, 30, 5, 0, 1, 500e6, time.UTC)) {
		t.Fatalf("row: lsn %s topic %s headers %s code %q attempts %d created %s", lsn, topic, headers, code, attempts, created)
	}
}
