// Package checkpoint decides which WAL position the CDC reader may confirm to
// its replication slot.
//
// The rule: confirm the end LSN of the newest transaction for which that
// transaction and every transaction received before it were fully received
// and every one of their events was acknowledged by Kafka. Delivery reports
// can complete out of order (across partitions), so a transaction whose
// events are all acked still waits for every earlier one.
//
// Confirming the commit's end LSN (never its start) matters: PostgreSQL
// resends every transaction whose commit record starts at or after the slot's
// confirmed_flush_lsn.
package checkpoint

import (
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
)

// Tx is one transaction received from the slot. It is owned by the Tracker;
// callers hold it only to pass it back.
type Tx struct {
	pending    int // events handed to Kafka and not yet acknowledged
	acked      int // events acknowledged by Kafka
	committed  bool
	endLSN     pglogrepl.LSN
	commitTime time.Time // from BEGIN: when the transaction committed on the server
}

// Tracker accounts for transactions in receipt order. It is safe for use by
// the replication loop and the delivery-report loop at once.
type Tracker struct {
	mu        sync.Mutex
	queue     []*Tx // received, not yet confirmable, in receipt order
	head      int   // queue[head:] is live
	confirmed pglogrepl.LSN
	received  pglogrepl.LSN
	inflight  int
	bytes     int64
	// confirmedTime is the commit time of the newest confirmable
	// transaction; zero until one was confirmed.
	confirmedTime time.Time
	// ackedAt is when Kafka last acknowledged an event (New's time until
	// it first did).
	ackedAt time.Time
}

// New returns a Tracker whose confirmable position starts at start, the
// position streaming starts from (the slot's confirmed_flush_lsn).
func New(start pglogrepl.LSN) *Tracker {
	return &Tracker{confirmed: start, received: start, ackedAt: time.Now()}
}

// Begin registers a transaction whose BEGIN was just received; commitTime is
// the commit timestamp BEGIN carries.
func (t *Tracker) Begin(commitTime time.Time) *Tx {
	tx := &Tx{commitTime: commitTime}
	t.mu.Lock()
	t.queue = append(t.queue, tx)
	t.mu.Unlock()
	return tx
}

// Add records one event of tx, of about size bytes, handed to Kafka. Call it
// before producing, so a fast acknowledgement cannot find the count at zero.
func (t *Tracker) Add(tx *Tx, size int) {
	t.mu.Lock()
	tx.pending++
	t.inflight++
	t.bytes += int64(size)
	t.mu.Unlock()
}

// Commit records that tx was received completely; end is its
// CommitMessage.TransactionEndLSN.
func (t *Tracker) Commit(tx *Tx, end pglogrepl.LSN) {
	t.mu.Lock()
	tx.committed = true
	tx.endLSN = end
	if end > t.received {
		t.received = end
	}
	t.advance()
	t.mu.Unlock()
}

// Ack records that Kafka acknowledged one event of tx of size bytes (the
// size given to Add).
func (t *Tracker) Ack(tx *Tx, size int) {
	t.mu.Lock()
	tx.pending--
	tx.acked++
	t.inflight--
	t.bytes -= int64(size)
	t.ackedAt = time.Now()
	t.advance()
	t.mu.Unlock()
}

// Release forgets one event of tx of size bytes whose delivery failed: it no
// longer counts as in flight, and tx stays unconfirmable for good, so the
// next session republishes it.
func (t *Tracker) Release(tx *Tx, size int) {
	t.mu.Lock()
	t.inflight--
	t.bytes -= int64(size)
	t.mu.Unlock()
}

// Acked returns how many events of tx Kafka acknowledged so far.
func (t *Tracker) Acked(tx *Tx) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tx.acked
}

// advance pops the fully acknowledged prefix. t.mu must be held.
func (t *Tracker) advance() {
	for t.head < len(t.queue) {
		tx := t.queue[t.head]
		if !tx.committed || tx.pending > 0 {
			break
		}
		if tx.endLSN > t.confirmed {
			t.confirmed = tx.endLSN
		}
		if tx.commitTime.After(t.confirmedTime) {
			t.confirmedTime = tx.commitTime
		}
		t.queue[t.head] = nil
		t.head++
	}
	if t.head == len(t.queue) {
		t.queue, t.head = t.queue[:0], 0
	} else if t.head > 1024 && t.head*2 > len(t.queue) {
		n := copy(t.queue, t.queue[t.head:])
		clear(t.queue[n:])
		t.queue, t.head = t.queue[:n], 0
	}
}

// Flow is the tracker's in-flight state at one instant.
type Flow struct {
	Inflight    int           // events handed to Kafka and not yet acknowledged
	Bytes       int64         // their approximate size
	Confirmable pglogrepl.LSN // the position safe to confirm
}

// Flow returns the in-flight state under one lock, for a caller that needs
// several of its values for each message it handles.
func (t *Tracker) Flow() Flow {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Flow{Inflight: t.inflight, Bytes: t.bytes, Confirmable: t.confirmed}
}

// Confirmable returns the position that is safe to confirm to the slot as
// flushed. It never moves backwards.
func (t *Tracker) Confirmable() pglogrepl.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confirmed
}

// Received returns the end of the newest fully received transaction (or the
// idle WAL end), reported to the server as the write position.
func (t *Tracker) Received() pglogrepl.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.received
}

// Inflight returns how many events were handed to Kafka and not yet
// acknowledged.
func (t *Tracker) Inflight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inflight
}

// InflightBytes returns the approximate size of the events handed to Kafka
// and not yet acknowledged.
func (t *Tracker) InflightBytes() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bytes
}

// OldestPending returns the commit time of the oldest transaction received
// and not yet confirmable, or the zero time when there is none.
func (t *Tracker) OldestPending() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.head == len(t.queue) {
		return time.Time{}
	}
	return t.queue[t.head].commitTime
}

// Stalled reports whether events await acknowledgement and Kafka
// acknowledged none for at least d before now (counting from New when it
// never did): the reader cannot publish.
func (t *Tracker) Stalled(now time.Time, d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inflight > 0 && now.Sub(t.ackedAt) >= d
}

// ConfirmedCommitTime returns the commit time of the newest transaction that
// became confirmable, or the zero time when none did yet.
func (t *Tracker) ConfirmedCommitTime() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confirmedTime
}

// AdvanceIdle moves the confirmable position to walEnd, the server's WAL end
// from a keepalive, when nothing is open or unacknowledged, and reports
// whether it did. Everything the server decoded before that keepalive has then
// been published, so confirming its WAL end is safe; without this an idle
// slot pins WAL while other tables churn.
func (t *Tracker) AdvanceIdle(walEnd pglogrepl.LSN) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.head != len(t.queue) || walEnd <= t.confirmed {
		return false
	}
	t.confirmed = walEnd
	if walEnd > t.received {
		t.received = walEnd
	}
	return true
}
