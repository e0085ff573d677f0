package stream

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/sink"
)

func TestStartPosition(t *testing.T) {
	pos := func(lsn uint64, gen string) sink.Position {
		return sink.Position{LSN: lsn, Generation: gen, PartialXID: 7, PartialEvents: 3}
	}
	tests := []struct {
		name      string
		confirmed pglogrepl.LSN
		pos       sink.Position
		ok        bool
		want      pglogrepl.LSN
		wantSkip  int
		why       string // substring; "" when the position is taken
	}{
		{"no position", 100, sink.Position{}, false, 100, 0, "no position"},
		{"committed past the slot", 100, pos(150, "g"), true, 150, 3, ""},
		{"committed at the slot", 100, pos(100, "g"), true, 100, 3, ""},
		{"slot past the position", 200, pos(150, "g"), true, 200, 0, "confirmed past"},
		{"another generation", 100, pos(150, "h"), true, 100, 0, "generation"},
		{"past the server's WAL", 100, pos(5000, "g"), true, 100, 0, "past this server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, xid, n, why := startPosition(tt.confirmed, 1000, "g", tt.pos, tt.ok)
			if got != tt.want || n != tt.wantSkip || (n > 0 && xid != 7) || (tt.why == "") != (why == "") || !strings.Contains(why, tt.why) {
				t.Fatalf("startPosition = %s, %d, %d, %q; want %s, skip %d, why %q", got, xid, n, why, tt.want, tt.wantSkip, tt.why)
			}
		})
	}
}

// fakeTxnSink is a transactional sink that records its commits.
type fakeTxnSink struct {
	fakeProducer
	s       *session
	mu      sync.Mutex
	commits []sink.Position
	sizes   []int
}

func (f *fakeTxnSink) Publish(ctx context.Context, ev *decode.Event, dest string, group, opaque any) error {
	return f.fakeProducer.Publish(ctx, ev, dest, group, opaque)
}

func (f *fakeTxnSink) Commit(_ context.Context, pos sink.Position) error {
	f.mu.Lock()
	f.commits = append(f.commits, pos)
	f.sizes = append(f.sizes, len(f.published))
	published := f.published
	f.published = nil
	f.mu.Unlock()
	for _, d := range published {
		f.s.onDelivery(d, nil)
	}
	return nil
}

// TestSessionTransactions drives a session on a transactional sink: whole
// PostgreSQL transactions are committed together at a bound with the
// position they reach, a transaction that fills the in-flight bounds is
// committed in part with its ID and stored count, and a session resuming
// from that position skips exactly the stored events.
func TestSessionTransactions(t *testing.T) {
	cfg := testConfig()
	cfg.Txn = TxnBounds{Events: 3, Bytes: 1 << 20, Interval: time.Hour}
	s, _ := newTestSession(t, cfg)
	pub := &fakeTxnSink{fakeProducer: fakeProducer{fatal: make(chan error, 1)}, s: s}
	s.pub = pub
	s.txn = &txnState{pub: pub, bounds: cfg.Txn, generation: "g", lastEnd: 100}
	ctx := context.Background()
	run := func(msgs ...pglogrepl.Message) {
		t.Helper()
		for _, m := range msgs {
			if err := s.handle(ctx, m, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	begin := func(xid uint32) *pglogrepl.BeginMessage {
		return &pglogrepl.BeginMessage{Xid: xid, CommitTime: time.Now()}
	}
	commit := func(end pglogrepl.LSN) *pglogrepl.CommitMessage {
		return &pglogrepl.CommitMessage{TransactionEndLSN: end}
	}

	run(begin(1), insert("a1"), insert("a2"), commit(200))
	if len(pub.commits) != 0 || s.tracker.Confirmable() != 100 {
		t.Fatalf("committed %v (confirmable %s) below the bound of 3 events", pub.commits, s.tracker.Confirmable())
	}
	run(begin(2), insert("b1"), commit(300))
	if len(pub.commits) != 1 || pub.commits[0] != (sink.Position{LSN: 300, Generation: "g"}) || pub.sizes[0] != 3 {
		t.Fatalf("commits %v of sizes %v, want both transactions' 3 events at 300", pub.commits, pub.sizes)
	}
	if got := s.tracker.Confirmable(); got != 300 {
		t.Fatalf("confirmable %s after the commit, want 300", got)
	}

	// A transaction alone at the in-flight bound is committed in part.
	s.cfg.MaxInflightEvents = 2
	run(begin(3), insert("c1"), insert("c2"))
	if err := s.commitQuiet(ctx, time.Now(), s.exceeds(s.tracker.Flow())); err != nil {
		t.Fatal(err)
	}
	want := sink.Position{LSN: 300, Generation: "g", PartialXID: 3, PartialEvents: 2}
	if len(pub.commits) != 2 || pub.commits[1] != want {
		t.Fatalf("commits %v, want a partial commit %+v", pub.commits, want)
	}

	// A new session resumes from that position: the stored events of
	// transaction 3 are skipped, the rest published.
	s2, _ := newTestSession(t, testConfig())
	pub2 := &fakeTxnSink{fakeProducer: fakeProducer{fatal: make(chan error, 1)}, s: s2}
	s2.pub = pub2
	s2.txn = &txnState{pub: pub2, bounds: TxnBounds{Events: 100, Bytes: 1 << 20, Interval: time.Hour}, generation: "g", lastEnd: 300, skipXID: 3, skipN: 2}
	for _, m := range []pglogrepl.Message{begin(3), insert("c1"), insert("c2"), insert("c3"), commit(400)} {
		if err := s2.handle(ctx, m, 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(pub2.published) != 1 || pub2.published[0].eventID != "c3" {
		t.Fatalf("resumed session published %d events, want only c3", len(pub2.published))
	}
}
