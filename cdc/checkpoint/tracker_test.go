package checkpoint

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

func TestTrackerConfirmsOnlyAckedPrefix(t *testing.T) {
	tr := New(100)
	a, b := tr.Begin(time.Time{}), tr.Begin(time.Time{})
	tr.Add(a, 1)
	tr.Add(a, 1)
	tr.Commit(a, 200)
	tr.Add(b, 1)
	tr.Commit(b, 300)

	if got := tr.Confirmable(); got != 100 {
		t.Fatalf("nothing acked: confirmable = %v, want 100", got)
	}
	tr.Ack(b, 1) // later transaction completes first
	if got := tr.Confirmable(); got != 100 {
		t.Fatalf("only later tx acked: confirmable = %v, want 100", got)
	}
	tr.Ack(a, 1)
	if got := tr.Confirmable(); got != 100 {
		t.Fatalf("one of two events of first tx acked: confirmable = %v, want 100", got)
	}
	tr.Ack(a, 1)
	if got := tr.Confirmable(); got != 300 {
		t.Fatalf("all acked: confirmable = %v, want 300", got)
	}
	if tr.Inflight() != 0 {
		t.Fatalf("inflight = %d, want 0", tr.Inflight())
	}
}

func TestTrackerWaitsForCommit(t *testing.T) {
	tr := New(10)
	a := tr.Begin(time.Time{})
	tr.Add(a, 1)
	tr.Ack(a, 1) // acked before its COMMIT was received
	if got := tr.Confirmable(); got != 10 {
		t.Fatalf("uncommitted tx: confirmable = %v, want 10", got)
	}
	if tr.AdvanceIdle(50) {
		t.Fatal("AdvanceIdle moved with an open transaction")
	}
	tr.Commit(a, 40)
	if got := tr.Confirmable(); got != 40 {
		t.Fatalf("confirmable = %v, want 40", got)
	}
}

func TestTrackerEmptyTransaction(t *testing.T) {
	tr := New(10)
	tr.Commit(tr.Begin(time.Time{}), 20)
	if got := tr.Confirmable(); got != 20 {
		t.Fatalf("confirmable = %v, want 20", got)
	}
}

func TestTrackerAdvanceIdle(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(*Tracker)
		walEnd   pglogrepl.LSN
		moved    bool
		wantConf pglogrepl.LSN
	}{
		{name: "idle moves forward", setup: func(*Tracker) {}, walEnd: 500, moved: true, wantConf: 500},
		{name: "never backwards", setup: func(*Tracker) {}, walEnd: 50, moved: false, wantConf: 100},
		{name: "unacked event blocks", setup: func(tr *Tracker) { tx := tr.Begin(time.Time{}); tr.Add(tx, 1); tr.Commit(tx, 200) }, walEnd: 500, moved: false, wantConf: 100},
		{name: "fully acked then idle", setup: func(tr *Tracker) { tx := tr.Begin(time.Time{}); tr.Add(tx, 1); tr.Commit(tx, 200); tr.Ack(tx, 1) }, walEnd: 500, moved: true, wantConf: 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New(100)
			tt.setup(tr)
			if got := tr.AdvanceIdle(tt.walEnd); got != tt.moved {
				t.Fatalf("AdvanceIdle = %v, want %v", got, tt.moved)
			}
			if got := tr.Confirmable(); got != tt.wantConf {
				t.Fatalf("confirmable = %v, want %v", got, tt.wantConf)
			}
		})
	}
}

// TestTrackerRandomAckOrder acknowledges events of many transactions in a
// random order from several goroutines and checks, after every step, that the
// confirmable position never passes a transaction with an unacked event.
func TestTrackerRandomAckOrder(t *testing.T) {
	tr := New(0)
	type ev struct {
		tx  *Tx
		idx int
	}
	const txs = 500
	var events []ev
	ends := make([]pglogrepl.LSN, txs)
	handles := make([]*Tx, txs)
	for i := range txs {
		tx := tr.Begin(time.Time{})
		handles[i] = tx
		n := rand.IntN(4)
		for range n {
			tr.Add(tx, 1)
			events = append(events, ev{tx: tx, idx: i})
		}
		ends[i] = pglogrepl.LSN((i + 1) * 10)
		tr.Commit(tx, ends[i])
	}
	rand.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })

	var (
		mu        sync.Mutex
		remaining = make([]int, txs)
		wg        sync.WaitGroup
	)
	for _, e := range events {
		remaining[e.idx]++
	}
	work := make(chan ev)
	var failures []string
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				mu.Lock()
				remaining[e.idx]--
				tr.Ack(e.tx, 1)
				conf := tr.Confirmable()
				for i := range txs {
					if ends[i] <= conf && remaining[i] > 0 {
						failures = append(failures, "confirmed past a transaction with unacked events")
					}
				}
				mu.Unlock()
			}
		}()
	}
	for _, e := range events {
		work <- e
	}
	close(work)
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	if got := tr.Confirmable(); got != ends[txs-1] {
		t.Fatalf("final confirmable = %v, want %v", got, ends[txs-1])
	}
}

// TestTrackerAccounting checks the in-flight counters and the commit times
// the metrics are computed from.
func TestTrackerAccounting(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name          string
		run           func(tr *Tracker)
		wantEvents    int
		wantBytes     int64
		wantOldest    time.Time
		wantConfirmed time.Time
	}{
		{
			name:       "produced, not acked",
			run:        func(tr *Tracker) { tx := tr.Begin(t0); tr.Add(tx, 100); tr.Add(tx, 50) },
			wantEvents: 2, wantBytes: 150, wantOldest: t0,
		},
		{
			name: "acked and committed",
			run: func(tr *Tracker) {
				tx := tr.Begin(t0)
				tr.Add(tx, 100)
				tr.Ack(tx, 100)
				tr.Commit(tx, 200)
			},
			wantConfirmed: t0,
		},
		{
			name: "second transaction pending",
			run: func(tr *Tracker) {
				a := tr.Begin(t0)
				tr.Add(a, 10)
				tr.Commit(a, 200)
				b := tr.Begin(t0.Add(time.Second))
				tr.Add(b, 20)
				tr.Commit(b, 300)
				tr.Ack(a, 10)
			},
			wantEvents: 1, wantBytes: 20, wantOldest: t0.Add(time.Second), wantConfirmed: t0,
		},
		{
			name: "failed delivery released, transaction stays pending",
			run: func(tr *Tracker) {
				a := tr.Begin(t0)
				tr.Add(a, 10)
				tr.Commit(a, 200)
				tr.Release(a, 10)
			},
			wantOldest: t0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New(100)
			tt.run(tr)
			if got := tr.Inflight(); got != tt.wantEvents {
				t.Errorf("inflight events = %d, want %d", got, tt.wantEvents)
			}
			if got := tr.InflightBytes(); got != tt.wantBytes {
				t.Errorf("inflight bytes = %d, want %d", got, tt.wantBytes)
			}
			if got := tr.OldestPending(); !got.Equal(tt.wantOldest) {
				t.Errorf("oldest pending = %v, want %v", got, tt.wantOldest)
			}
			if got := tr.ConfirmedCommitTime(); !got.Equal(tt.wantConfirmed) {
				t.Errorf("confirmed commit time = %v, want %v", got, tt.wantConfirmed)
			}
		})
	}
}

func TestTrackerAcked(t *testing.T) {
	tr := New(0)
	tx := tr.Begin(time.Time{})
	tr.Add(tx, 1)
	tr.Add(tx, 1)
	tr.Ack(tx, 1)
	if got := tr.Acked(tx); got != 1 {
		t.Fatalf("acked = %d, want 1", got)
	}
}

// TestTrackerFlow: Flow reports in-flight events, their bytes and the
// confirmable position together, as the single getters do.
func TestTrackerFlow(t *testing.T) {
	tr := New(100)
	a := tr.Begin(time.Time{})
	tr.Add(a, 40)
	tr.Add(a, 2)
	tr.Commit(a, 200)
	if got, want := tr.Flow(), (Flow{Inflight: 2, Bytes: 42, Confirmable: 100}); got != want {
		t.Fatalf("before the acks: Flow() = %+v, want %+v", got, want)
	}
	tr.Ack(a, 40)
	tr.Ack(a, 2)
	if got, want := tr.Flow(), (Flow{Inflight: 0, Bytes: 0, Confirmable: 200}); got != want {
		t.Fatalf("after the acks: Flow() = %+v, want %+v", got, want)
	}
}
