package sinktest

import (
	"testing"

	"github.com/eventforge/eventforge/cdc/sink"
)

func TestMemory(t *testing.T) {
	Run(t, Harness{
		New: func(t *testing.T) Destination {
			m := &Memory{MaxBytes: 1000}
			return Destination{Driver: m, Name: "orders", Oversized: 2000, Read: func(*testing.T) []Stored {
				var out []Stored
				for _, ev := range m.Stored("orders") {
					out = append(out, Stored{Key: ev.AggregateID, ID: ev.ID})
				}
				return out
			}}
		},
		Unreachable: func(*testing.T) (sink.Driver, string) {
			m := &Memory{}
			m.SetDown(true)
			return m, "orders"
		},
	})
}
