package gap

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/eventforge/eventforge/cdc/slot"
)

func TestReason(t *testing.T) {
	below := int64(900)
	cp := Checkpoint{Found: true, Limit: 0x5000, PublishedBelow: &below}
	for _, tc := range []struct {
		name string
		st   slot.State
		cp   Checkpoint
		want string // substring; "" means no gap
	}{
		{"slot behind the limit", slot.State{Exists: true, Confirmed: 0x4000, WALStatus: "reserved"}, cp, ""},
		{"slot at the limit", slot.State{Exists: true, Confirmed: 0x5000, WALStatus: "reserved"}, cp, ""},
		{"slot without checkpoint is adopted", slot.State{Exists: true, Confirmed: 0x9000}, Checkpoint{}, ""},
		{"slot past the limit", slot.State{Exists: true, Confirmed: 0x5001}, cp, "past every position"},
		{"slot missing", slot.State{}, cp, "missing (dropped"},
		{"slot missing without checkpoint", slot.State{}, Checkpoint{}, "no checkpoint"},
		{"WAL removed", slot.State{Exists: true, Confirmed: 0x4000, WALStatus: "lost"}, cp, "wal_status lost"},
		{"invalidated on 17", slot.State{Exists: true, Confirmed: 0x4000, Invalidation: "wal_removed"}, cp, "wal_removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Reason(tc.st, tc.cp)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("Reason = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLimitClampsAndAsksForARaise(t *testing.T) {
	l := NewLimit()
	l.Set(100)
	if got := l.Clamp(80, 120); got != 80 {
		t.Fatalf("Clamp(80) under limit 100 = %d", got)
	}
	select {
	case <-l.want:
		t.Fatal("a raise was asked for a position under the limit")
	default:
	}
	if got := l.Clamp(150, 200); got != 100 {
		t.Fatalf("Clamp(150) under limit 100 = %d, want 100", got)
	}
	select {
	case <-l.want:
	default:
		t.Fatal("no raise asked for a position past the limit")
	}
	if got := l.wanted.Load(); got != 200 {
		t.Fatalf("raise asked to %d, want the received position 200", got)
	}
	l.Set(90)
	if got := l.LSN(); got != pglogrepl.LSN(100) {
		t.Fatalf("Set lowered the limit to %d", got)
	}
}

// TestAdoptable: only a valid, idle slot confirmed past the limit of a
// checkpoint that knows what was published is checked for adoption; every
// other gap is recovered.
func TestAdoptable(t *testing.T) {
	below := int64(900)
	pid := int32(42)
	cp := Checkpoint{Found: true, Limit: 0x5000, PublishedBelow: &below}
	past := slot.State{Exists: true, Confirmed: 0x8000, WALStatus: "reserved"}
	for _, tc := range []struct {
		name string
		st   slot.State
		cp   Checkpoint
		want bool
	}{
		{"past the limit", past, cp, true},
		{"at the limit: no gap", slot.State{Exists: true, Confirmed: 0x5000}, cp, false},
		{"missing", slot.State{}, cp, false},
		{"WAL removed", slot.State{Exists: true, Confirmed: 0x8000, WALStatus: "lost"}, cp, false},
		{"invalidated", slot.State{Exists: true, Confirmed: 0x8000, Invalidation: "idle_timeout"}, cp, false},
		{"held by a walsender", slot.State{Exists: true, Confirmed: 0x8000, ActivePID: &pid}, cp, false},
		{"no checkpoint", past, Checkpoint{}, false},
		{"published_below unknown", past, Checkpoint{Found: true, Limit: 0x5000}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := adoptable(tc.st, tc.cp); got != tc.want {
				t.Fatalf("adoptable = %v, want %v", got, tc.want)
			}
		})
	}
}
