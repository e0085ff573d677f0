// Package backoff paces the relay's retries: capped exponential backoff with
// jitter between reconnection attempts, jittered polling intervals, and a
// sleep that ends with its context.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is capped exponential backoff with jitter; it starts over after a
// run that lasted a minute. The zero value with Max set is ready to use.
type Backoff struct {
	// Max caps the wait.
	Max time.Duration
	cur time.Duration
}

// Next returns the wait before the next attempt, given how long the last
// run lasted.
func (b *Backoff) Next(lasted time.Duration) time.Duration {
	if b.cur == 0 || lasted > time.Minute {
		b.cur = 250 * time.Millisecond
	}
	wait := b.cur/2 + rand.N(b.cur/2+1)
	b.cur = min(b.cur*2, b.Max)
	return wait
}

// Jitter returns d ± 20%.
func Jitter(d time.Duration) time.Duration {
	return d*4/5 + rand.N(d*2/5+1)
}

// Sleep waits for d or ctx; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
