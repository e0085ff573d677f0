package main

import (
	"maps"
	"testing"
)

// TestCoveredPrefix: a purge of what a replay replayed deletes, per
// partition, the run of entries from the first held one whose events were
// acknowledged, and stops at the first that was not selected or whose
// replay failed.
func TestCoveredPrefix(t *testing.T) {
	acked := map[dlqPos]bool{{0, 0}: true, {0, 1}: true, {0, 3}: true, {1, 5}: true, {2, 9}: true}
	tests := []struct {
		name  string
		parts map[int32]*replayed
		want  map[int32]int64
	}{
		{"all replayed", map[int32]*replayed{0: {low: 0, offsets: []int64{0, 1}, by: []dlqPos{{0, 0}, {0, 1}}}}, map[int32]int64{0: 1}},
		{"a failed replay stops it", map[int32]*replayed{0: {low: 0, offsets: []int64{0, 1, 2, 3}, by: []dlqPos{{0, 0}, {0, 1}, {0, 2}, {0, 3}}}}, map[int32]int64{0: 1}},
		{"an entry not selected stops it", map[int32]*replayed{0: {low: 0, offsets: []int64{0, 3}, by: []dlqPos{{0, 0}, {0, 3}}}}, map[int32]int64{0: 0}},
		{"first held entry not replayed", map[int32]*replayed{0: {low: 0, offsets: []int64{1}, by: []dlqPos{{0, 1}}}}, map[int32]int64{}},
		{"covered by the newest entry of its event elsewhere", map[int32]*replayed{1: {low: 4, offsets: []int64{4, 5}, by: []dlqPos{{2, 9}, {1, 5}}}}, map[int32]int64{1: 5}},
		{"nothing selected", map[int32]*replayed{3: {low: 7}}, map[int32]int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := coveredPrefix(tt.parts, acked); !maps.Equal(got, tt.want) {
				t.Fatalf("coveredPrefix = %v, want %v", got, tt.want)
			}
		})
	}
}
