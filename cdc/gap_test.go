package cdc

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

func TestGapReason(t *testing.T) {
	below := int64(900)
	cp := checkpointRow{found: true, limit: 0x5000, publishedBelow: &below}
	for _, tc := range []struct {
		name string
		st   slotCheck
		cp   checkpointRow
		want string // substring; "" means no gap
	}{
		{"slot behind the limit", slotCheck{exists: true, confirmed: 0x4000, walStatus: "reserved"}, cp, ""},
		{"slot at the limit", slotCheck{exists: true, confirmed: 0x5000, walStatus: "reserved"}, cp, ""},
		{"slot without checkpoint is adopted", slotCheck{exists: true, confirmed: 0x9000}, checkpointRow{}, ""},
		{"slot past the limit", slotCheck{exists: true, confirmed: 0x5001}, cp, "past every position"},
		{"slot missing", slotCheck{}, cp, "missing (dropped"},
		{"slot missing without checkpoint", slotCheck{}, checkpointRow{}, "no checkpoint"},
		{"WAL removed", slotCheck{exists: true, confirmed: 0x4000, walStatus: "lost"}, cp, "wal_status lost"},
		{"invalidated on 17", slotCheck{exists: true, confirmed: 0x4000, invalidation: "wal_removed"}, cp, "wal_removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := gapReason(tc.st, tc.cp)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("gapReason = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseSlotRow(t *testing.T) {
	for _, tc := range []struct {
		name, raw    string
		invalidation string
		failover     *bool
	}{
		{"15", `{"slot_name":"s","plugin":"pgoutput","database":"d","confirmed_flush_lsn":"0/16B3748","active_pid":null,"wal_status":"reserved"}`, "", nil},
		{"16 conflicting", `{"plugin":"pgoutput","database":"d","confirmed_flush_lsn":"0/16B3748","wal_status":"reserved","conflicting":true}`, "conflict", nil},
		{"17 invalidated", `{"plugin":"pgoutput","database":"d","confirmed_flush_lsn":"0/16B3748","wal_status":"lost","conflicting":false,"invalidation_reason":"wal_removed","failover":true}`, "wal_removed", ptr(true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := parseSlotRow([]byte(tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			if !st.exists || st.plugin != "pgoutput" || st.database != "d" || st.confirmed != pglogrepl.LSN(0x16B3748) {
				t.Fatalf("parsed %+v", st)
			}
			if st.invalidation != tc.invalidation {
				t.Fatalf("invalidation %q, want %q", st.invalidation, tc.invalidation)
			}
			if (st.failover == nil) != (tc.failover == nil) || (st.failover != nil && *st.failover != *tc.failover) {
				t.Fatalf("failover %v, want %v", st.failover, tc.failover)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestConfirmLimitClampsAndAsksForARaise(t *testing.T) {
	l := newConfirmLimit()
	l.set(100)
	if got := l.clamp(80, 120); got != 80 {
		t.Fatalf("clamp(80) under limit 100 = %d", got)
	}
	select {
	case <-l.want:
		t.Fatal("a raise was asked for a position under the limit")
	default:
	}
	if got := l.clamp(150, 200); got != 100 {
		t.Fatalf("clamp(150) under limit 100 = %d, want 100", got)
	}
	select {
	case <-l.want:
	default:
		t.Fatal("no raise asked for a position past the limit")
	}
	if got := l.wanted.Load(); got != 200 {
		t.Fatalf("raise asked to %d, want the received position 200", got)
	}
	l.set(90)
	if got := pglogrepl.LSN(l.lsn.Load()); got != 100 {
		t.Fatalf("set lowered the limit to %d", got)
	}
}
