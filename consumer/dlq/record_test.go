package dlq

import (
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/contract"
)

func source() *kafka.Message {
	topic := contract.Topic
	return &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 4, Offset: 17},
		Key:            []byte("order-1"),
		Value:          []byte(`{"order_id":"order-1"}`),
		Headers: []kafka.Header{
			{Key: contract.HeaderID, Value: []byte("0195f5a8-0000-7000-8000-000000000001")},
			{Key: contract.HeaderType, Value: []byte(contract.TypeOrderCreated)},
			{Key: "traceparent", Value: []byte("00-abc-def-01")},
		},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	first := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	f := Failure{Consumer: "ledger", Class: "not_found", Message: "order order-1: order not found", Attempts: 5,
		FirstFailedAt: first, LastFailedAt: first.Add(3 * time.Second)}
	rec := Record(source(), "eventforge.orders.dlq", f)
	if *rec.TopicPartition.Topic != "eventforge.orders.dlq" || string(rec.Key) != "order-1" || string(rec.Value) != `{"order_id":"order-1"}` {
		t.Fatalf("record %+v does not keep topic/key/value", rec)
	}
	dlqTopic := "eventforge.orders.dlq"
	rec.TopicPartition = kafka.TopicPartition{Topic: &dlqTopic, Partition: 1, Offset: 9}
	e := Parse(rec)
	want := Entry{EventID: "0195f5a8-0000-7000-8000-000000000001", Type: contract.TypeOrderCreated, OriginalTopic: contract.Topic,
		OriginalPartition: 4, OriginalOffset: 17, Consumer: "ledger", Class: "not_found", Message: f.Message, Attempts: 5}
	got := e
	got.Topic, got.Partition, got.Offset, got.Key, got.Value, got.Headers, got.FirstFailedAt, got.LastFailedAt = "", 0, 0, nil, nil, nil, time.Time{}, time.Time{}
	got.Timestamp = time.Time{}
	if got.EventID != want.EventID || got.Type != want.Type || got.OriginalTopic != want.OriginalTopic || got.OriginalPartition != want.OriginalPartition ||
		got.OriginalOffset != want.OriginalOffset || got.Consumer != want.Consumer || got.Class != want.Class || got.Message != want.Message || got.Attempts != want.Attempts {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
	if !e.FirstFailedAt.Equal(f.FirstFailedAt) || !e.LastFailedAt.Equal(f.LastFailedAt) {
		t.Fatalf("failure times %s/%s, want %s/%s", e.FirstFailedAt, e.LastFailedAt, f.FirstFailedAt, f.LastFailedAt)
	}
	if e.Header("traceparent") != "00-abc-def-01" {
		t.Fatal("original headers not kept")
	}
	if e.Position() != "eventforge.orders.dlq/1/9" {
		t.Fatalf("position %q", e.Position())
	}
}

func TestRecordReplacesEarlierFailureHeaders(t *testing.T) {
	src := source()
	first := Record(src, "x.dlq", Failure{Consumer: "fulfillment", Class: "permanent", Attempts: 1})
	// The replayed record failing again must carry one set of failure
	// headers, describing the new failure, and keep the replay headers.
	replayed := ReplayRecord(Parse(first), time.Now())
	replayed.TopicPartition.Offset = 30
	second := Record(replayed, "x.dlq", Failure{Consumer: "ledger", Class: "not_found", Attempts: 5})
	counts := map[string]int{}
	for _, h := range second.Headers {
		counts[h.Key]++
	}
	for k := range failureHeaders {
		if counts[k] != 1 {
			t.Errorf("header %s appears %d times, want once", k, counts[k])
		}
	}
	e := Parse(second)
	if e.Consumer != "ledger" || e.Class != "not_found" || e.Attempts != 5 || e.OriginalOffset != 30 {
		t.Fatalf("second failure not described: %+v", e)
	}
	if e.ReplaySource == "" || counts[HeaderReplaySource] != 1 {
		t.Fatalf("replay source header missing or repeated: %v", counts)
	}
}

func TestReplayRecord(t *testing.T) {
	dlqTopic := "eventforge.orders.dlq"
	rec := Record(source(), dlqTopic, Failure{Consumer: "fulfillment", Class: "permanent", Attempts: 1})
	rec.TopicPartition = kafka.TopicPartition{Topic: &dlqTopic, Partition: 2, Offset: 5}
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	out := ReplayRecord(Parse(rec), at)
	if *out.TopicPartition.Topic != contract.Topic || out.TopicPartition.Partition != kafka.PartitionAny {
		t.Fatalf("replay goes to %s[%d], want the original topic, partitioned by key", *out.TopicPartition.Topic, out.TopicPartition.Partition)
	}
	if string(out.Key) != "order-1" || string(out.Value) != `{"order_id":"order-1"}` {
		t.Fatal("replay changed key or value")
	}
	got := map[string]string{}
	for _, h := range out.Headers {
		got[h.Key] = string(h.Value)
	}
	for _, h := range source().Headers {
		if got[h.Key] != string(h.Value) {
			t.Errorf("original header %s = %q, want %q", h.Key, got[h.Key], h.Value)
		}
	}
	for k := range failureHeaders {
		if _, ok := got[k]; ok {
			t.Errorf("replay carries failure header %s", k)
		}
	}
	if got[HeaderReplaySource] != "eventforge.orders.dlq/2/5" || got[HeaderReplayedAt] != "2026-05-06T07:08:09Z" {
		t.Fatalf("replay headers %q %q", got[HeaderReplaySource], got[HeaderReplayedAt])
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdefghij", 5, "abcde…"},
		{"ééééé", 5, "éé…"}, // 10 bytes; never cut inside a rune
	}
	for _, tt := range tests {
		if got := truncate(tt.in, tt.n); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
	if long := truncate(strings.Repeat("x", 5000), maxMessageLen); len(long) > maxMessageLen+len("…") {
		t.Fatalf("truncated to %d bytes", len(long))
	}
}

func TestParsePosition(t *testing.T) {
	tests := []struct {
		in        string
		topic     string
		partition int32
		offset    int64
		ok        bool
	}{
		{"3:17", "", 3, 17, true},
		{"eventforge.orders.dlq/3/17", "eventforge.orders.dlq", 3, 17, true},
		{"a/b/3/17", "a/b", 3, 17, true},
		{"3", "", 0, 0, false},
		{"x:1", "", 0, 0, false},
		{"-1:1", "", 0, 0, false},
		{"t/1", "", 0, 0, false},
	}
	for _, tt := range tests {
		topic, p, o, ok := ParsePosition(tt.in)
		if ok != tt.ok || topic != tt.topic || p != tt.partition || o != tt.offset {
			t.Errorf("ParsePosition(%q) = %q %d %d %v", tt.in, topic, p, o, ok)
		}
	}
}
