package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/contract"
)

func message(topic string, partition int32, offset int64, key string, headers map[string]string) *kafka.Message {
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition, Offset: kafka.Offset(offset)}, Key: []byte(key)}
	for k, v := range headers {
		m.Headers = append(m.Headers, kafka.Header{Key: k, Value: []byte(v)})
	}
	return m
}

func TestPartitionTakeKeepsOrder(t *testing.T) {
	p := newPartition(kafka.TopicPartition{Topic: new(string), Partition: 0})
	for i := range 7 {
		p.push(message("t", 0, int64(i), "", nil))
	}
	var got []int64
	for _, want := range []int{3, 3, 1} {
		batch := p.take(3, 0)
		if len(batch) != want {
			t.Fatalf("take(3) returned %d records, want %d", len(batch), want)
		}
		for _, m := range batch {
			got = append(got, int64(m.TopicPartition.Offset))
		}
	}
	for i, off := range got {
		if off != int64(i) {
			t.Fatalf("offsets %v, want 0..6 in order", got)
		}
	}
	p.stop()
	if batch := p.take(3, 0); batch != nil {
		t.Fatalf("take after stop returned %d records", len(batch))
	}
}

// TestPartitionTakeWaitsForAFullerBatch: with a linger, a partition with
// fewer records than the batch size waits for more: a full batch ends the
// wait at once, the linger's end takes what is there, and a stopped
// partition returns nothing.
func TestPartitionTakeWaitsForAFullerBatch(t *testing.T) {
	t.Run("a full batch ends the wait", func(t *testing.T) {
		p := newPartition(kafka.TopicPartition{Topic: new(string), Partition: 0})
		p.push(message("t", 0, 0, "", nil))
		got := make(chan []*kafka.Message)
		go func() { got <- p.take(3, time.Hour) }()
		p.push(message("t", 0, 1, "", nil))
		p.push(message("t", 0, 2, "", nil))
		if batch := <-got; len(batch) != 3 {
			t.Fatalf("take returned %d records, want the full batch of 3", len(batch))
		}
	})
	t.Run("the linger's end takes what is there", func(t *testing.T) {
		const linger = 50 * time.Millisecond
		p := newPartition(kafka.TopicPartition{Topic: new(string), Partition: 0})
		pushed := time.Now()
		p.push(message("t", 0, 0, "", nil))
		p.push(message("t", 0, 1, "", nil))
		batch := p.take(3, linger)
		if len(batch) != 2 {
			t.Fatalf("take returned %d records, want the 2 queued", len(batch))
		}
		if waited := time.Since(pushed); waited < linger {
			t.Fatalf("take returned after %v, before the linger of %v", waited, linger)
		}
	})
	t.Run("without a linger what is there is taken at once", func(t *testing.T) {
		p := newPartition(kafka.TopicPartition{Topic: new(string), Partition: 0})
		p.push(message("t", 0, 0, "", nil))
		done := make(chan int)
		go func() { done <- len(p.take(3, 0)) }()
		select {
		case n := <-done:
			if n != 1 {
				t.Fatalf("take returned %d records, want 1", n)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("take without a linger waited for a fuller batch")
		}
	})
	t.Run("a stopped partition returns nothing", func(t *testing.T) {
		p := newPartition(kafka.TopicPartition{Topic: new(string), Partition: 0})
		p.push(message("t", 0, 0, "", nil))
		got := make(chan []*kafka.Message)
		go func() { got <- p.take(3, time.Hour) }()
		p.stop()
		if batch := <-got; batch != nil {
			t.Fatalf("take of a stopped partition returned %d records", len(batch))
		}
	})
}

// TestPartitionWantPause: fetching pauses at queueSize records or at
// queueBytes bytes, whichever comes first, and resumes only once the queue
// is at most half full by both measures.
func TestPartitionWantPause(t *testing.T) {
	const unbounded = 1 << 40
	rec := recordBytes(orderEvent(0)) // every queued record has this size
	tests := []struct {
		name       string
		queued     int
		queueSize  int
		queueBytes int
		paused     bool
		retrying   bool
		want       bool
	}{
		{"empty", 0, 10, unbounded, false, false, false},
		{"retrying", 0, 10, unbounded, false, true, true},
		{"records full", 10, 10, unbounded, false, false, true},
		{"records below full", 9, 10, unbounded, false, false, false},
		{"records paused above half", 6, 10, unbounded, true, false, true},
		{"records paused at half", 5, 10, unbounded, true, false, false},
		{"bytes full", 4, 1000, 4 * rec, false, false, true},
		{"bytes below full", 3, 1000, 4 * rec, false, false, false},
		{"bytes paused above half", 3, 1000, 4 * rec, true, false, true},
		{"bytes paused at half", 2, 1000, 4 * rec, true, false, false},
		{"bytes full first", 4, 10, 4 * rec, false, false, true},
		{"records full first", 10, 10, 100 * rec, false, false, true},
		{"paused, records at half, bytes above half", 5, 10, 8 * rec, true, false, true},
		{"paused, bytes at half, records above half", 6, 10, 12 * rec, true, false, true},
		{"paused, both at half", 5, 10, 10 * rec, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPartition(kafka.TopicPartition{Topic: new(string)})
			for i := range tt.queued {
				p.push(orderEvent(int64(i)))
			}
			p.paused = tt.paused
			p.retrying.Store(tt.retrying)
			if got := p.wantPause(tt.queueSize, tt.queueBytes); got != tt.want {
				t.Fatalf("wantPause(%d, %d) with %d records of %d bytes = %v, want %v",
					tt.queueSize, tt.queueBytes, tt.queued, rec, got, tt.want)
			}
		})
	}
}

// orderEvent is a polled record: a key, a 400-byte value and two headers.
func orderEvent(offset int64) *kafka.Message {
	m := message("t", 0, offset, "7f0c2a52-4a8e-4d8c-9d4c-1f2e3a4b5c6d", map[string]string{
		contract.HeaderID: "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0", contract.HeaderType: contract.TypeOrderCreated})
	m.Value = make([]byte, 400)
	return m
}

// TestPartitionQueuedBytes: the byte count follows what push adds and take
// removes, and an emptied queue counts zero.
func TestPartitionQueuedBytes(t *testing.T) {
	p := newPartition(kafka.TopicPartition{Topic: new(string)})
	big := orderEvent(0)
	big.Value = make([]byte, 10_000)
	p.push(big)
	for i := range 6 {
		p.push(orderEvent(int64(i + 1)))
	}
	rec := recordBytes(orderEvent(0))
	if want := recordBytes(big) + 6*rec; p.queued != want {
		t.Fatalf("queued %d bytes after 7 pushes, want %d", p.queued, want)
	}
	if recordBytes(big) < 10_000+recordOverhead || rec < 400+recordOverhead+2*headerOverhead {
		t.Fatalf("recordBytes %d and %d do not count value, key, headers and overheads", recordBytes(big), rec)
	}
	if batch := p.take(3, 0); len(batch) != 3 || p.queued != 4*rec {
		t.Fatalf("after take(3) of 7: %d taken, %d bytes queued, want 3 and %d", len(batch), p.queued, 4*rec)
	}
	if batch := p.take(10, 0); len(batch) != 4 || p.queued != 0 || p.queue != nil {
		t.Fatalf("after taking the rest: %d taken, %d bytes queued, queue %v; want 4, 0, nil", len(batch), p.queued, p.queue)
	}
}

// TestStoppedPartitionStartsNothing: once a partition is stopped its worker
// takes no more records, even with records queued, and begins no attempt,
// even when a worker slot is free at the same moment.
func TestStoppedPartitionStartsNothing(t *testing.T) {
	p := newPartition(kafka.TopicPartition{Topic: new(string)})
	for i := range 3 {
		p.push(message("t", 0, int64(i), "", nil))
	}
	p.stop()
	if batch := p.take(10, 0); batch != nil {
		t.Fatalf("take after stop returned %d queued records", len(batch))
	}
	db := fakeDB{t: t, begin: func(context.Context) (pgx.Tx, error) {
		t.Error("a stopped partition began a transaction")
		return nil, errors.New("began")
	}}
	r := New(Options{Name: "stopped", Settings: Settings{Workers: 2}}, db, fakeHandler{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for range 200 { // the slot and the stop are both ready: whichever select picks, nothing begins
		if _, err := r.attempt(p, []Event{{}}); !errors.Is(err, errStopped) {
			t.Fatalf("attempt on a stopped partition: %v, want errStopped", err)
		}
		if n := len(r.slots); n != 0 {
			t.Fatalf("%d slots held after attempts on a stopped partition", n)
		}
	}
	if r.processOne(p, message("t", 0, 0, "", map[string]string{contract.HeaderID: "not-a-uuid"})) {
		t.Fatal("a stopped partition finished a record")
	}
}
