package cdc

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is capped exponential backoff with jitter; it starts over after a
// run that lasted a minute.
type backoff struct {
	max time.Duration
	cur time.Duration
}

func (b *backoff) next(lasted time.Duration) time.Duration {
	if b.cur == 0 || lasted > time.Minute {
		b.cur = 250 * time.Millisecond
	}
	wait := b.cur/2 + rand.N(b.cur/2+1)
	b.cur = min(b.cur*2, b.max)
	return wait
}

// jitter returns d ± 20%.
func jitter(d time.Duration) time.Duration {
	return d*4/5 + rand.N(d*2/5+1)
}

// sleep waits for d or ctx; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
