package leader

import (
	"errors"
	"testing"
	"time"

	"github.com/eventforge/eventforge/cdc/checkpoint"
	"github.com/eventforge/eventforge/cdc/progress"
)

func TestLeaderHealth(t *testing.T) {
	const after = time.Minute
	start := time.Now()
	t.Run("no session yet, within the grace", func(t *testing.T) {
		lh := leaderHealth{after: after, streaming: start}
		if err := lh.check(start.Add(after-time.Second), &progress.Progress{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no session streamed for the whole period", func(t *testing.T) {
		lh := leaderHealth{after: after, streaming: start}
		if err := lh.check(start.Add(after), &progress.Progress{}); !errors.Is(err, errUnhealthy) {
			t.Fatalf("check = %v, want unhealthy", err)
		}
	})
	t.Run("a streaming session resets the period", func(t *testing.T) {
		p := &progress.Progress{}
		p.Attach(checkpoint.New(100))
		lh := leaderHealth{after: after, streaming: start}
		if err := lh.check(start.Add(after), p); err != nil {
			t.Fatal(err)
		}
		p.Detach()
		if err := lh.check(start.Add(after+time.Second), p); err != nil {
			t.Fatalf("a session ended a second ago: %v", err)
		}
	})
	t.Run("events waiting without an acknowledgement for the period", func(t *testing.T) {
		p := &progress.Progress{}
		tr := checkpoint.New(100)
		p.Attach(tr)
		tr.Add(tr.Begin(start), 10)
		lh := leaderHealth{after: after, streaming: start}
		now := time.Now()
		if err := lh.check(now, p); err != nil {
			t.Fatalf("an event just produced: %v", err)
		}
		if err := lh.check(now.Add(after+time.Second), p); !errors.Is(err, errUnhealthy) {
			t.Fatalf("check = %v, want unhealthy", err)
		}
	})
	t.Run("a zero Health is not ready", func(t *testing.T) {
		var h Health
		if h.Ready() == nil {
			t.Fatal("ready before any report")
		}
		h.report(nil)
		if err := h.Ready(); err != nil {
			t.Fatal(err)
		}
	})
}
