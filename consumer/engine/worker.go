package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// partition is one assigned partition: the records polled for it, in
// order, and the worker goroutine applying them.
type partition struct {
	topic string
	id    int32

	ctx    context.Context // cancelled on revoke and shutdown
	cancel context.CancelFunc
	done   chan struct{} // closed when the worker returned

	mu     sync.Mutex
	queue  []*kafka.Message
	queued int           // recordBytes of the records in queue
	since  time.Time     // when queue last became non-empty
	wake   chan struct{} // capacity 1: records were queued

	retrying atomic.Bool  // a record is failing and being retried
	next     atomic.Int64 // offset after the last finished record; -1 unknown

	unavailable bool   // the current record waits for the database (worker only)
	dlqCause    string // why the current record's dead letter cannot be written; "" (worker only)

	paused bool // fetch paused (poll goroutine only)
}

func newPartition(tp kafka.TopicPartition) *partition {
	ctx, cancel := context.WithCancel(context.Background())
	k := keyOf(tp)
	p := &partition{topic: k.topic, id: k.id, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), wake: make(chan struct{}, 1)}
	p.next.Store(-1)
	return p
}

func (p *partition) tp() kafka.TopicPartition {
	topic := p.topic
	return kafka.TopicPartition{Topic: &topic, Partition: p.id}
}

// Estimates of the Go memory a polled record holds besides its key, value
// and header bytes: the kafka.Message and its topic and leader epoch, the
// allocation rounding of the copied bytes (recordOverhead), and per header
// its kafka.Header and key string (headerOverhead).
const (
	recordOverhead = 256
	headerOverhead = 64
)

// recordBytes estimates the memory m holds while it waits in a queue.
func recordBytes(m *kafka.Message) int {
	n := recordOverhead + len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += headerOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// push queues a polled record for the worker.
func (p *partition) push(m *kafka.Message) {
	p.mu.Lock()
	if len(p.queue) == 0 {
		p.since = time.Now()
	}
	p.queue = append(p.queue, m)
	p.queued += recordBytes(m)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// wantPause says whether fetching should be paused: while a record is being
// retried, or while the queue is full — queueSize records or queueBytes
// bytes (recordBytes), whichever is reached first — resuming once it is at
// most half full by both measures.
func (p *partition) wantPause(queueSize, queueBytes int) bool {
	if p.retrying.Load() {
		return true
	}
	p.mu.Lock()
	n, b := len(p.queue), p.queued
	p.mu.Unlock()
	if p.paused {
		return n > queueSize/2 || b > queueBytes/2
	}
	return n >= queueSize || b >= queueBytes
}

// take waits for queued records and removes up to n of them, oldest first.
// While fewer than n are queued it waits for more, until linger after the
// queue last became non-empty (zero: it takes what is there at once). It
// returns nil once the partition is stopped, even with records queued.
func (p *partition) take(n int, linger time.Duration) []*kafka.Message {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if p.ctx.Err() != nil {
			return nil
		}
		p.mu.Lock()
		var wait time.Duration
		if len(p.queue) > 0 && len(p.queue) < n && linger > 0 {
			wait = linger - time.Since(p.since)
		}
		if len(p.queue) > 0 && wait <= 0 {
			k := min(n, len(p.queue))
			batch := make([]*kafka.Message, k)
			copy(batch, p.queue)
			clear(p.queue[:k]) // the backing array no longer holds them
			p.queue = p.queue[k:]
			for _, m := range batch {
				p.queued -= recordBytes(m)
			}
			if len(p.queue) == 0 {
				p.queue, p.queued = nil, 0 // release the backing array
			}
			p.mu.Unlock()
			return batch
		}
		p.mu.Unlock()
		var lingered <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			lingered = timer.C
		}
		select {
		case <-p.ctx.Done():
			return nil
		case <-p.wake:
		case <-lingered:
		}
	}
}

// stop asks the worker to return after the transaction in flight, if any.
func (p *partition) stop() { p.cancel() }

// sleep waits d or until the partition stops; it reports whether d passed.
func (p *partition) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
