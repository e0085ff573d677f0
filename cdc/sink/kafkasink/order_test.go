package kafkasink

import (
	"errors"
	"slices"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// msgs names records by their value, for the gate's verdicts.
func msgNamed(name string) *kafka.Message { return &kafka.Message{Value: []byte(name)} }

func names(ms []*kafka.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Value))
	}
	return out
}

func TestGate(t *testing.T) {
	errRefused := errors.New("refused")
	type step struct {
		op    string // admit, settle, release
		key   string
		group int
		name  string
		err   error
		want  admission // admit
		names []string  // settle: failed behind; release: released
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"one group of a key flies together", []step{
			{op: "admit", key: "x", group: 1, name: "a1", want: produceNow},
			{op: "admit", key: "x", group: 1, name: "a2", want: produceNow},
			{op: "admit", key: "y", group: 2, name: "b", want: produceNow},
		}},
		{"a later group of a key waits until the earlier one is acknowledged", []step{
			{op: "admit", key: "x", group: 1, name: "created", want: produceNow},
			{op: "admit", key: "x", group: 2, name: "cancelled", want: held},
			{op: "admit", key: "x", group: 1, name: "late-of-1", want: held},
			{op: "release"},
			{op: "settle", key: "x"},
			{op: "release", names: []string{"cancelled"}},
			{op: "settle", key: "x"},
			{op: "release", names: []string{"late-of-1"}},
			{op: "settle", key: "x"},
			{op: "admit", key: "x", group: 3, name: "next", want: produceNow},
		}},
		{"records of one waiting group go together", []step{
			{op: "admit", key: "x", group: 1, name: "a", want: produceNow},
			{op: "admit", key: "x", group: 2, name: "b1", want: held},
			{op: "admit", key: "x", group: 2, name: "b2", want: held},
			{op: "admit", key: "x", group: 3, name: "c", want: held},
			{op: "settle", key: "x"},
			{op: "release", names: []string{"b1", "b2"}},
			{op: "settle", key: "x"},
			{op: "release"},
			{op: "settle", key: "x"},
			{op: "release", names: []string{"c"}},
		}},
		{"a failure fails what waits behind it and everything later of its key", []step{
			{op: "admit", key: "x", group: 1, name: "created", want: produceNow},
			{op: "admit", key: "y", group: 1, name: "other", want: produceNow},
			{op: "admit", key: "x", group: 2, name: "cancelled", want: held},
			{op: "settle", key: "x", err: errRefused, names: []string{"cancelled"}},
			{op: "release"},
			{op: "admit", key: "x", group: 3, name: "later", want: refused},
			{op: "admit", key: "y", group: 3, name: "other-later", want: held},
			{op: "settle", key: "y"},
			{op: "release", names: []string{"other-later"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate()
			for i, s := range tt.steps {
				switch s.op {
				case "admit":
					if got := g.admit(s.key, s.group, msgNamed(s.name)); got != s.want {
						t.Fatalf("step %d: admit %s = %v, want %v", i, s.name, got, s.want)
					}
				case "settle":
					if got := names(g.settle(s.key, s.err)); !slices.Equal(got, s.names) {
						t.Fatalf("step %d: settle %s failed %v, want %v", i, s.key, got, s.names)
					}
				case "release":
					if got := names(g.release()); !slices.Equal(got, s.names) {
						t.Fatalf("step %d: release = %v, want %v", i, got, s.names)
					}
				}
			}
		})
	}
	g := newGate()
	g.admit("x", 1, msgNamed("a"))
	g.admit("x", 2, msgNamed("b"))
	if g.holding() != 1 {
		t.Fatalf("holding %d, want 1", g.holding())
	}
	if got := names(g.drop()); !slices.Equal(got, []string{"b"}) || g.holding() != 0 {
		t.Fatalf("drop = %v (holding %d), want [b] and 0", got, g.holding())
	}
}
