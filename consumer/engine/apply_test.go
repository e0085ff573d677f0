package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/eventforge/eventforge/internal/testenv"
)

// A Batcher's events take the pipelined path (BEGIN, marks and statements in
// one round trip, then COMMIT) when none is marked yet, and the general path
// when one is: the outcome is the same as the general path's alone, and no
// mark is ever left without its effect.
func TestPipelinedApply(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	if _, err := env.Pool.Exec(ctx, effectsDDL); err != nil {
		t.Fatal(err)
	}
	r := New(Options{Name: "pipelined"}, PoolDB{env.Pool}, batchingHandler{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ev := func(payload string) Event { return Event{ID: uuid.New(), Key: "k", Payload: []byte(payload)} }
	a, b, c, d := ev("a"), ev("b"), ev("c"), ev("d")

	// New events commit on the pipelined path; marked ones do not.
	if got, err := r.applyPipelined(ctx, []uuid.UUID{a.ID, b.ID}, []Event{a, b}); err != nil || !got.committed {
		t.Fatalf("new events on the pipelined path: %+v, %v; want committed", got, err)
	}
	if got, err := r.applyPipelined(ctx, []uuid.UUID{b.ID, c.ID}, []Event{b, c}); err != nil || got != (pipelined{}) {
		t.Fatalf("a marked event on the pipelined path: %+v, %v; want not committed, no conflict", got, err)
	}

	steps := []struct {
		name string
		evs  []Event
		want outcome
	}{
		{"one applied before", []Event{b, c}, outcome{applied: 1, duplicates: 1}},
		{"all applied before", []Event{a, b, c}, outcome{duplicates: 3}},
		{"one event twice", []Event{d, d}, outcome{applied: 1, duplicates: 1}},
	}
	for _, s := range steps {
		out, err := r.apply(ctx, s.evs)
		if err != nil || out != s.want {
			t.Fatalf("%s: %+v, %v; want %+v", s.name, out, err, s.want)
		}
	}

	// A check that fails on its statement's result, after the pipeline was
	// sent, rolls the mark back with the statement.
	late := ev("late-poison")
	if _, err := r.apply(ctx, []Event{late}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("late-poison: %v, want ErrInvalid", err)
	}

	// A mark held by a concurrent transaction: the pipelined insert waits for
	// it, fails once it commits, and the general path counts a conflict.
	if out, err := applyBehindHeldMark(t, env, r, "pipelined", ev("e")); err != nil || out != (outcome{duplicates: 1, conflicts: 1}) {
		t.Fatalf("concurrent mark: %+v, %v; want one duplicate that is a conflict", out, err)
	}

	var effects, marks int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM test_effects`).Scan(&effects, &marks); err != nil {
		t.Fatal(err)
	}
	if effects != 4 || marks != 4 {
		t.Fatalf("%d effects of %d events, want 4 of 4 (a, b, c, d once each)", effects, marks)
	}
	var lateMarks int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM processed_events WHERE consumer = 'pipelined' AND event_id = $1`, late.ID).Scan(&lateMarks); err != nil {
		t.Fatal(err)
	}
	if lateMarks != 0 {
		t.Fatal("late-poison left a mark without its effect")
	}
}

// applyBehindHeldMark applies ev with r while a concurrent transaction holds
// ev's mark for consumer, checks that the apply waits for it, commits that
// transaction and returns what the apply did.
func applyBehindHeldMark(t *testing.T, env *testenv.Env, r *Runtime, consumer string, ev Event) (outcome, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, markSQL, markArgs(consumer, []uuid.UUID{ev.ID}, []Event{ev})...); err != nil {
		t.Fatal(err)
	}
	type result struct {
		out outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := r.apply(ctx, []Event{ev})
		done <- result{out, err}
	}()
	select {
	case res := <-done:
		t.Fatalf("apply finished while a concurrent transaction held the mark: %+v", res)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	return res.out, res.err
}
