package dlq

import (
	"testing"
	"time"

	"github.com/eventforge/eventforge/contract"
)

func TestFilter(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	e := Entry{Consumer: "ledger", Class: "not_found", Type: contract.TypeOrderCreated, EventID: "AbC", Key: []byte("o-1"),
		Message: "order o-1: order not found", Timestamp: now.Add(-2 * time.Hour)}
	tests := []struct {
		name string
		f    Filter
		want bool
	}{
		{"zero matches", Filter{}, true},
		{"consumer", Filter{Consumer: "ledger"}, true},
		{"other consumer", Filter{Consumer: "fulfillment"}, false},
		{"class", Filter{Class: "permanent"}, false},
		{"type", Filter{Type: contract.TypeOrderCreated}, true},
		{"event id ignores case", Filter{EventID: "abc"}, true},
		{"key", Filter{Key: "o-2"}, false},
		{"contains", Filter{Contains: "not found"}, true},
		{"older than 1h", Filter{OlderThan: time.Hour}, true},
		{"older than 3h", Filter{OlderThan: 3 * time.Hour}, false},
		{"newer than 1h", Filter{NewerThan: time.Hour}, false},
		{"newer than 3h", Filter{NewerThan: 3 * time.Hour}, true},
		{"all of them", Filter{Consumer: "ledger", Class: "not_found", OlderThan: time.Hour}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.Match(e, now); got != tt.want {
				t.Fatalf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDedupe(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	es := []Entry{
		{Offset: 0, OriginalTopic: "o", EventID: "e1", Consumer: "fulfillment", Timestamp: t0},
		{Offset: 1, OriginalTopic: "o", EventID: "E1", Consumer: "ledger", Timestamp: t0.Add(time.Second)},
		{Offset: 2, OriginalTopic: "o", EventID: "e2", Timestamp: t0},
		{Offset: 3, OriginalTopic: "other", EventID: "e2", Timestamp: t0},
		{Offset: 4, OriginalTopic: "o", EventID: "", Timestamp: t0},
		{Offset: 5, OriginalTopic: "o", EventID: "", Timestamp: t0},
	}
	got := Dedupe(es)
	var offsets []int64
	for _, e := range got {
		offsets = append(offsets, e.Offset)
	}
	want := []int64{1, 2, 3, 4, 5}
	if len(offsets) != len(want) {
		t.Fatalf("kept offsets %v, want %v", offsets, want)
	}
	for i := range want {
		if offsets[i] != want[i] {
			t.Fatalf("kept offsets %v, want %v", offsets, want)
		}
	}
}

func TestSummarize(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := Summarize([]Entry{
		{Consumer: "ledger", Class: "not_found", Type: contract.TypeOrderCreated, Timestamp: t0.Add(time.Minute)},
		{Consumer: "ledger", Class: "permanent", Type: contract.TypeOrderCreated, Timestamp: t0},
		{Consumer: "fulfillment", Class: "permanent", Type: "", Timestamp: t0.Add(time.Hour)},
	})
	if s.Total != 3 || s.ByConsumer["ledger"] != 2 || s.ByClass["permanent"] != 2 || s.ByType[""] != 1 {
		t.Fatalf("summary %+v", s)
	}
	if !s.Oldest.Equal(t0) || !s.Newest.Equal(t0.Add(time.Hour)) {
		t.Fatalf("oldest %s newest %s", s.Oldest, s.Newest)
	}
}
