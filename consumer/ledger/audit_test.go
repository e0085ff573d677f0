package ledger

import (
	"strings"
	"testing"
)

func TestCompareLedger(t *testing.T) {
	tests := []struct {
		name                string
		buckets             []ledgerBucket
		marks               int
		dups, mwe, unattrib int
		mention             string
	}{
		{name: "every mark attributed, equal", buckets: []ledgerBucket{{customer: "a", counted: 2, marked: 2, orders: 2, cancelCounted: 1, cancelMarked: 1, cancelledOrders: 1}}, marks: 3},
		{name: "every mark attributed, one counted twice", buckets: []ledgerBucket{{customer: "a", counted: 3, marked: 2, orders: 3}}, marks: 2, dups: 1, mention: "a/"},
		{name: "every mark attributed, one counted too few", buckets: []ledgerBucket{{customer: "a", counted: 1, marked: 2, orders: 2}}, marks: 2, mwe: 1, mention: "a/"},
		{
			name:    "outbox and topic pruned: marks unattributed, counters within the orders",
			buckets: []ledgerBucket{{customer: "a", counted: 5, orders: 5, cancelCounted: 1, cancelledOrders: 1}, {customer: "b", counted: 2, marked: 1, orders: 2}},
			marks:   8, unattrib: 7,
		},
		{
			name:    "pruned, one bucket counts more orders than it has",
			buckets: []ledgerBucket{{customer: "a", counted: 6, orders: 5}, {customer: "b", counted: 2, marked: 1, orders: 2}},
			marks:   8, unattrib: 7, dups: 1, mention: "a/",
		},
		{
			name:    "pruned, counters add up to more than the marks",
			buckets: []ledgerBucket{{customer: "a", counted: 5, orders: 5}, {customer: "b", counted: 2, marked: 1, orders: 2}},
			marks:   6, unattrib: 5, dups: 1, mention: "add up to 7 for 6 marks",
		},
		{
			name:    "pruned, counters add up to fewer than the marks",
			buckets: []ledgerBucket{{customer: "a", counted: 4, orders: 5}, {customer: "b", counted: 2, marked: 1, orders: 2}},
			marks:   7, unattrib: 6, mwe: 1, mention: "add up to 6 for 7 marks",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := compareLedger(tt.buckets, tt.marks)
			if e.Duplicates != tt.dups || e.MarksWithoutEffect != tt.mwe || e.Unattributed != tt.unattrib {
				t.Fatalf("duplicates %d, marks without effect %d, unattributed %d; want %d %d %d (%v)",
					e.Duplicates, e.MarksWithoutEffect, e.Unattributed, tt.dups, tt.mwe, tt.unattrib, e.Details)
			}
			all := strings.Join(e.Details, "\n")
			if (tt.mention == "") != (len(e.Details) == 0) || !strings.Contains(all, tt.mention) {
				t.Fatalf("details %q, want one naming %q", e.Details, tt.mention)
			}
		})
	}
}
