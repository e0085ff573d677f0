package api

import (
	"testing"

	"github.com/eventforge/eventforge/api/store"
)

// The defaults are valid, and --create-writers defaults to what the store
// does without WithCreateWriters.
func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Errorf("the defaults are invalid: %v", err)
	}
	if c.CreateWriters != store.DefaultCreateWriters {
		t.Errorf("--create-writers defaults to %d, the store to %d", c.CreateWriters, store.DefaultCreateWriters)
	}
}
