package kafkasink

import (
	"errors"
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Per-key order, whatever Kafka refuses.
//
// An idempotent producer keeps a partition's records in order while Kafka
// accepts them, but not when it refuses a batch permanently (a record over
// the topic's max.message.bytes takes its whole batch down): librdkafka
// bumps its epoch and delivers the requests behind the refused one, and a
// broker that does not know the producer yet (its first batch on a
// partition) appends a later request whatever its sequence. A later event
// of an order in a refused batch would then reach Kafka before it, and the
// republished event after it: Cancelled, Created, Cancelled.
//
// So the publisher keeps the order of each key itself. Records are handed
// over in groups (the relay's group is a PostgreSQL transaction): a record
// is produced at once when no record of its key from another group awaits
// Kafka's acknowledgement, else it waits, in call order, until they are all
// acknowledged. Records of one key and one group may be in flight together.
// When a record fails, every record of its key that waits behind it fails
// too, and so does every later record of that key: nothing of a key is
// delivered after one of its records failed, until the caller starts over
// with a new Publisher. What it costs: an order's next transaction reaches
// Kafka one acknowledgement after the previous one, at the earliest.

// ErrEarlierFailed is the delivery error of a record that was not produced
// because an earlier record of its key failed.
var ErrEarlierFailed = errors.New("not produced: an earlier record of its key failed")

// waiting is a record held back until its key's earlier records are
// acknowledged.
type waiting struct {
	msg   *kafka.Message
	group any
}

// keyState is what the gate knows of one key with records in flight or
// waiting.
type keyState struct {
	group    any // the group of the records in flight
	inflight int
	waiting  []waiting
	failed   bool // a record of the key failed: nothing more is produced
}

// gate decides when each record may be produced. It is safe for concurrent
// use: admit runs on the caller's goroutine, settle on the delivery-report
// goroutine.
type gate struct {
	mu    sync.Mutex
	keys  map[string]*keyState
	ready []string      // keys whose waiting records may go
	wake  chan struct{} // signalled when ready is not empty
	held  int           // records waiting, over all keys
}

func newGate() *gate {
	return &gate{keys: map[string]*keyState{}, wake: make(chan struct{}, 1)}
}

// admission is admit's verdict on one record.
type admission int

const (
	produceNow admission = iota // produce it: it counts as in flight
	held                        // the gate keeps it until its key is free
	refused                     // an earlier record of its key failed
)

// admit decides on msg of key and group.
func (g *gate) admit(key string, group any, msg *kafka.Message) admission {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.keys[key]
	switch {
	case k == nil:
		g.keys[key] = &keyState{group: group, inflight: 1}
		return produceNow
	case k.failed:
		return refused
	case len(k.waiting) == 0 && (k.inflight == 0 || k.group == group):
		k.group = group
		k.inflight++
		return produceNow
	}
	k.waiting = append(k.waiting, waiting{msg: msg, group: group})
	g.held++
	return held
}

// settle records the outcome of a produced record of key and returns the
// records that fail with it (an earlier record of their key failed).
func (g *gate) settle(key string, err error) []*kafka.Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.keys[key]
	if k == nil {
		return nil
	}
	k.inflight--
	if err != nil && !k.failed {
		k.failed = true
		failed := make([]*kafka.Message, len(k.waiting))
		for i, w := range k.waiting {
			failed[i] = w.msg
		}
		g.held -= len(k.waiting)
		k.waiting = nil
		return failed
	}
	if k.inflight > 0 || k.failed {
		return nil
	}
	if len(k.waiting) == 0 {
		delete(g.keys, key)
		return nil
	}
	g.ready = append(g.ready, key)
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return nil
}

// release returns the records that may go now: for each key whose earlier
// records were all acknowledged, its waiting records of the oldest waiting
// group. They count as in flight.
func (g *gate) release() []*kafka.Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*kafka.Message
	for _, key := range g.ready {
		k := g.keys[key]
		if k == nil || k.failed || k.inflight > 0 || len(k.waiting) == 0 {
			continue
		}
		k.group = k.waiting[0].group
		n := 0
		for n < len(k.waiting) && k.waiting[n].group == k.group {
			out = append(out, k.waiting[n].msg)
			n++
		}
		k.inflight = n
		k.waiting = append(k.waiting[:0], k.waiting[n:]...)
		g.held -= n
	}
	g.ready = g.ready[:0]
	return out
}

// drop removes every waiting record and returns them (Close reports them as
// not delivered).
func (g *gate) drop() []*kafka.Message {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*kafka.Message
	for _, k := range g.keys {
		for _, w := range k.waiting {
			out = append(out, w.msg)
		}
		k.waiting = nil
	}
	g.held = 0
	g.ready = g.ready[:0]
	return out
}

// holding returns how many records wait.
func (g *gate) holding() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}
