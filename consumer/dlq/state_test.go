package dlq

import (
	"testing"
	"time"

	"github.com/eventforge/eventforge/contract"
)

func TestReplaysState(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	replay := func(src, id string, at time.Time) map[string]string {
		return map[string]string{HeaderReplaySource: src, HeaderReplayedAt: at.Format(time.RFC3339Nano), contract.HeaderID: id}
	}
	var r Replays
	r.Add("orders", map[string]string{contract.HeaderID: "not-a-replay"}, t0)
	r.Add("orders", replay("orders.dlq/0/5", "E1", t0.Add(time.Minute)), t0)
	r.Add("orders", map[string]string{HeaderReplaySource: "orders.dlq/1/9", contract.HeaderID: ""}, t0.Add(2*time.Minute))
	entry := func(p int32, o int64, id string, at time.Time) Entry {
		return Entry{Topic: "orders.dlq", Partition: p, Offset: o, EventID: id, OriginalTopic: "orders", Timestamp: at}
	}
	tests := []struct {
		name string
		e    Entry
		want State
		at   time.Time
	}{
		{"the replayed entry", entry(0, 5, "e1", t0), StateReplayed, t0.Add(time.Minute)},
		{"an older entry of the same event (another consumer)", entry(0, 3, "e1", t0.Add(-time.Hour)), StateReplayed, t0.Add(time.Minute)},
		{"dead-lettered again after the replay", entry(0, 7, "e1", t0.Add(2*time.Minute)), StatePending, time.Time{}},
		{"another event", entry(0, 6, "e2", t0), StatePending, time.Time{}},
		{"the same event ID from another topic", Entry{Topic: "x.dlq", Offset: 1, EventID: "e1", OriginalTopic: "x", Timestamp: t0}, StatePending, time.Time{}},
		{"no event ID, replayed by position (record time)", entry(1, 9, "", t0), StateReplayed, t0.Add(2 * time.Minute)},
		{"no event ID, not replayed", entry(1, 10, "", t0), StatePending, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, _ := r.ReplayedAt(tt.e)
			if got := r.StateOf(tt.e); got != tt.want || !at.Equal(tt.at) {
				t.Fatalf("state %s replayed at %s, want %s at %s", got, at, tt.want, tt.at)
			}
		})
	}
	var empty Replays
	if got := empty.StateOf(entry(0, 5, "e1", t0)); got != StatePending {
		t.Fatalf("empty index: %s", got)
	}
}

func TestParseState(t *testing.T) {
	for in, want := range map[string]State{"pending": StatePending, "replayed": StateReplayed, "purged": StatePurged, "all": "", "": ""} {
		if got, err := ParseState(in); err != nil || got != want {
			t.Errorf("ParseState(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseState("done"); err == nil {
		t.Error("ParseState(done) accepted")
	}
}
