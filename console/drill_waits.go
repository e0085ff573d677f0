package console

import (
	"context"
	"fmt"
	"time"
)

// waitID names what a drill's stage waits for; the page says it in the
// reader's language (its "wait.<id>" texts) while the stage runs, with
// how long it has waited, and an error says it in waitTexts' words.
type waitID string

const (
	waitRunning      waitID = "component_running"
	waitRestarted    waitID = "component_restarted"
	waitSlotHeld     waitID = "slot_held"
	waitSettled      waitID = "settled"
	waitSession      waitID = "session_timeout"
	waitPartitions   waitID = "partitions_owned"
	waitSecondCommit waitID = "second_committed"
	waitRepublished  waitID = "republished"
	waitDeadLettered waitID = "dead_lettered"
)

var waitTexts = map[waitID]string{
	waitRunning:      "the restarted component to run",
	waitRestarted:    "the component to crash at its failpoint and the supervisor to restart it",
	waitSlotHeld:     "the CDC reader to hold the replication slot",
	waitSettled:      "the order applied and every group's offset committed past it",
	waitSession:      "the group to drop the killed member (the consumer's --session-timeout, 45 s by default) and the restarted member to read the event again",
	waitPartitions:   "both instances to own the topic's partitions",
	waitSecondCommit: "the second instance to commit past the event",
	waitRepublished:  "the event republished (two records)",
	waitDeadLettered: "the consumer's retries to run out (--max-attempts, with backoff) and the event to reach the DLQ",
}

// waitNoteKey carries, in a stage's context, the function that tells the
// stage what it waits for.
type waitNoteKey struct{}

func withWaitNote(ctx context.Context, note func(waitID)) context.Context {
	return context.WithValue(ctx, waitNoteKey{}, note)
}

// waitingFor tells the running stage (if ctx is a stage's) that it waits
// for id.
func waitingFor(ctx context.Context, id waitID) {
	if note, ok := ctx.Value(waitNoteKey{}).(func(waitID)); ok {
		note(id)
	}
}

// waitFor polls cond every 250 ms until it holds or ctx ends, telling the
// running stage that it waits for id.
func (c *Console) waitFor(ctx context.Context, id waitID, cond func() (bool, error)) error {
	waitingFor(ctx, id)
	what := waitTexts[id]
	var last error
	for {
		ok, err := cond()
		if ok && err == nil {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
