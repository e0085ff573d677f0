// Package sinktest is the contract suite every sink driver must pass (the
// rules package sink states), and Memory, a driver that keeps records in
// memory, for tests that need a second sink.
package sinktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/sink"
	"github.com/eventforge/eventforge/contract"
)

// Stored is a record as the destination holds it.
type Stored struct {
	Key string // the aggregate ID
	ID  string // the event ID
}

// Destination is one fresh destination of a driver under test.
type Destination struct {
	// Driver opens sinks to it.
	Driver sink.Driver
	// Name is the destination (topic) records are published to.
	Name string
	// Read returns what the destination stored, in order per key.
	Read func(t *testing.T) []Stored
	// Oversized is the payload size the destination refuses for good.
	Oversized int
}

// Harness gives the suite destinations of the driver under test.
type Harness struct {
	// New returns a fresh, reachable destination.
	New func(t *testing.T) Destination
	// Unreachable returns a driver and destination name that never answer.
	Unreachable func(t *testing.T) (sink.Driver, string)
}

// Run runs the contract suite.
func Run(t *testing.T, h Harness) {
	t.Run("every outcome reported once, each key in order", func(t *testing.T) { outcomesInOrder(t, h) })
	t.Run("nothing of a key after one of its records failed", func(t *testing.T) { nothingAfterAFailure(t, h) })
	t.Run("close ends whatever the destination does", func(t *testing.T) { closeUnreachable(t, h) })
}

// outcomes collects a sink's delivery reports by opaque.
type outcomes struct {
	mu   sync.Mutex
	got  map[string][]error
	more chan struct{}
}

func newOutcomes() *outcomes {
	return &outcomes{got: map[string][]error{}, more: make(chan struct{}, 1)}
}

func (o *outcomes) report(opaque any, err error) {
	o.mu.Lock()
	o.got[opaque.(string)] = append(o.got[opaque.(string)], err)
	o.mu.Unlock()
	select {
	case o.more <- struct{}{}:
	default:
	}
}

// wait returns each of ids' outcomes once every one of them was reported.
func (o *outcomes) wait(t *testing.T, ids ...string) map[string]error {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		o.mu.Lock()
		done := true
		for _, id := range ids {
			done = done && len(o.got[id]) > 0
		}
		out := map[string]error{}
		if done {
			for _, id := range ids {
				if n := len(o.got[id]); n != 1 {
					t.Errorf("record %s reported %d times, want once", id, n)
				}
				out[id] = o.got[id][0]
			}
		}
		o.mu.Unlock()
		if done {
			return out
		}
		select {
		case <-o.more:
		case <-deadline:
			t.Fatalf("not every outcome of %v reported within a minute", ids)
		}
	}
}

// event is an event of key called id with a payload of size random letters,
// which compression cannot shrink below the size a destination refuses.
func event(key, id string, size int) *decode.Event {
	const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	payload := make([]byte, max(size, 2))
	for i := range payload {
		payload[i] = letters[rand.N(len(letters))]
	}
	return &decode.Event{ID: id, AggregateType: contract.AggregateOrder, AggregateID: key, Type: contract.TypeOrderCreated, Payload: payload}
}

func open(t *testing.T, d sink.Driver, o *outcomes) sink.Sink {
	t.Helper()
	s, err := d.Open("eventforge-sinktest", o.report)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func publish(t *testing.T, s sink.Sink, dest string, ev *decode.Event, group any) {
	t.Helper()
	if err := s.Publish(context.Background(), ev, dest, group, ev.ID); err != nil {
		t.Fatalf("publishing %s: %v", ev.ID, err)
	}
}

// perKey groups stored IDs by key.
func perKey(stored []Stored) map[string][]string {
	out := map[string][]string{}
	for _, r := range stored {
		out[r.Key] = append(out[r.Key], r.ID)
	}
	return out
}

func outcomesInOrder(t *testing.T, h Harness) {
	dst := h.New(t)
	o := newOutcomes()
	s := open(t, dst.Driver, o)
	want := map[string][]string{}
	var ids []string
	for i := range 60 {
		key := "k" + strconv.Itoa(i%4)
		id := fmt.Sprintf("e%02d", i)
		publish(t, s, dst.Name, event(key, id, 16), i/3) // groups of three, keys interleaved
		want[key] = append(want[key], id)
		ids = append(ids, id)
	}
	for id, err := range o.wait(t, ids...) {
		if err != nil {
			t.Errorf("record %s failed: %v", id, err)
		}
	}
	if left := s.Close(10 * time.Second); left != 0 {
		t.Errorf("Close left %d records after every one was acknowledged", left)
	}
	got := perKey(dst.Read(t))
	for key, ids := range want {
		if !slices.Equal(got[key], ids) {
			t.Errorf("key %s stored %v, want %v", key, got[key], ids)
		}
	}
}

func nothingAfterAFailure(t *testing.T, h Harness) {
	dst := h.New(t)
	o := newOutcomes()
	s := open(t, dst.Driver, o)
	publish(t, s, dst.Name, event("k", "first", 16), 1)
	if err := o.wait(t, "first")["first"]; err != nil {
		t.Fatalf("first record failed: %v", err)
	}
	publish(t, s, dst.Name, event("k", "refused", dst.Oversized), 2)
	publish(t, s, dst.Name, event("k", "later", 16), 3)
	got := o.wait(t, "refused", "later")
	if err := got["refused"]; err == nil || !dst.Driver.Permanent(err) {
		t.Errorf("an oversized record reported %v, want an error the driver calls permanent", err)
	} else if dst.Driver.ErrorCode(err) == "" {
		t.Error("the refusal has no error code")
	}
	if got["later"] == nil {
		t.Error("a later record of the refused one's key was stored")
	}
	publish(t, s, dst.Name, event("other", "other", 16), 4)
	if err := o.wait(t, "other")["other"]; err != nil {
		t.Errorf("a record of another key failed: %v", err)
	}
	s.Close(10 * time.Second)
	stored := perKey(dst.Read(t))
	if !slices.Equal(stored["k"], []string{"first"}) || !slices.Equal(stored["other"], []string{"other"}) {
		t.Errorf("stored %v, want k: [first] and other: [other]", stored)
	}
}

func closeUnreachable(t *testing.T, h Harness) {
	d, dest := h.Unreachable(t)
	o := newOutcomes()
	s := open(t, d, o)
	publish(t, s, dest, event("k", "stuck", 16), 1)
	done := make(chan int, 1)
	go func() { done <- s.Close(200 * time.Millisecond) }()
	select {
	case left := <-done:
		if left != 1 {
			t.Errorf("Close left %d records, want 1", left)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return while the destination does not answer")
	}
	if err := o.wait(t, "stuck")["stuck"]; err == nil {
		t.Error("the record left at Close was reported stored")
	}
}

// ErrTooLarge is Memory's refusal of a record over its size limit.
var ErrTooLarge = errors.New("record too large")

// errEarlier fails the records of a key after one of its records failed.
var errEarlier = errors.New("not stored: an earlier record of its key failed")

// errClosed reports records left when a Memory sink closed.
var errClosed = errors.New("not stored: the sink closed")
