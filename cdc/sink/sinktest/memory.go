package sinktest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/eventforge/eventforge/cdc/decode"
	"github.com/eventforge/eventforge/cdc/sink"
)

// Memory is a sink driver that stores records in memory: a second sink for
// tests. A record whose payload exceeds MaxBytes is refused for good;
// while Down, nothing is stored and records wait. The zero value stores
// everything; it is safe for concurrent use.
type Memory struct {
	MaxBytes int
	mu       sync.Mutex
	down     bool
	stored   map[string][]*decode.Event // by destination, in store order
}

// SetDown makes the destination stop (true) or resume (false) answering.
func (m *Memory) SetDown(down bool) {
	m.mu.Lock()
	m.down = down
	m.mu.Unlock()
}

// Stored returns what was stored for dest, in store order.
func (m *Memory) Stored(dest string) []*decode.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*decode.Event(nil), m.stored[dest]...)
}

// Open implements sink.Driver.
func (m *Memory) Open(_ string, onDelivery sink.DeliveryFunc) (sink.Sink, error) {
	s := &memorySink{m: m, onDelivery: onDelivery, failed: map[string]bool{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.deliver()
	return s, nil
}

// Permanent implements sink.Driver: only a record over MaxBytes is refused
// for good.
func (*Memory) Permanent(err error) bool { return errors.Is(err, ErrTooLarge) }

// ErrorCode implements sink.Driver.
func (*Memory) ErrorCode(err error) string {
	if errors.Is(err, ErrTooLarge) {
		return "too large"
	}
	return "unknown"
}

// pending is a record handed over and not yet reported.
type pending struct {
	ev     *decode.Event
	dest   string
	opaque any
}

// memorySink stores records in call order on one goroutine, which also
// reports them, so each key's records are stored in order.
type memorySink struct {
	m          *Memory
	onDelivery sink.DeliveryFunc
	mu         sync.Mutex
	queue      []pending
	failed     map[string]bool // keys with a failed record
	closed     bool
	wake       chan struct{}
	done       chan struct{}
}

func (s *memorySink) Publish(_ context.Context, ev *decode.Event, dest string, _, opaque any) error {
	cp := *ev
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	s.queue = append(s.queue, pending{ev: &cp, dest: dest, opaque: opaque})
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

func (s *memorySink) Fatal() <-chan error { return nil }

// deliver stores and reports queued records until the sink closes.
func (s *memorySink) deliver() {
	defer close(s.done)
	for {
		s.mu.Lock()
		closed := s.closed
		var next *pending
		if len(s.queue) > 0 && !s.m.isDown() {
			next = &s.queue[0]
			s.queue = s.queue[1:]
		}
		s.mu.Unlock()
		if next != nil {
			s.onDelivery(next.opaque, s.store(next))
			continue
		}
		if closed {
			return
		}
		select {
		case <-s.wake:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// store stores p unless it is too large or its key failed before.
func (s *memorySink) store(p *pending) error {
	key := p.ev.AggregateID
	if s.failed[key] {
		return errEarlier
	}
	if s.m.MaxBytes > 0 && len(p.ev.Payload) > s.m.MaxBytes {
		s.failed[key] = true
		return ErrTooLarge
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if s.m.stored == nil {
		s.m.stored = map[string][]*decode.Event{}
	}
	s.m.stored[p.dest] = append(s.m.stored[p.dest], p.ev)
	return nil
}

func (m *Memory) isDown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.down
}

// Close waits up to timeout for the queue to drain, then reports what is
// left as failed.
func (s *memorySink) Close(timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		n := len(s.queue)
		s.mu.Unlock()
		if n == 0 || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.mu.Lock()
	left := s.queue
	s.queue, s.closed = nil, true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
	for _, p := range left {
		s.onDelivery(p.opaque, errClosed)
	}
	return len(left)
}
