package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

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
		batch := p.take(3)
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
	if batch := p.take(3); batch != nil {
		t.Fatalf("take after stop returned %d records", len(batch))
	}
}

func TestPartitionWantPause(t *testing.T) {
	tests := []struct {
		name     string
		queued   int
		paused   bool
		retrying bool
		want     bool
	}{
		{"empty", 0, false, false, false},
		{"retrying", 0, false, true, true},
		{"full", 10, false, false, true},
		{"below full", 9, false, false, false},
		{"paused above half", 6, true, false, true},
		{"paused at half", 5, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPartition(kafka.TopicPartition{Topic: new(string)})
			for i := range tt.queued {
				p.push(message("t", 0, int64(i), "", nil))
			}
			p.paused = tt.paused
			p.retrying.Store(tt.retrying)
			if got := p.wantPause(10); got != tt.want {
				t.Fatalf("wantPause = %v, want %v", got, tt.want)
			}
		})
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
	if batch := p.take(10); batch != nil {
		t.Fatalf("take after stop returned %d queued records", len(batch))
	}
	db := fakeDB{t: t, begin: func(context.Context) (pgx.Tx, error) {
		t.Error("a stopped partition began a transaction")
		return nil, errors.New("began")
	}}
	r := New(Options{Name: "stopped", Workers: 2}, db, fakeHandler{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
