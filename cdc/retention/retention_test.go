package retention

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/control"
	"github.com/eventforge/eventforge/cdc/gap"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/progress"
	"github.com/eventforge/eventforge/internal/testenv"
)

func TestConfirmedMark(t *testing.T) {
	marks := []pruneMark{{xmin: 10, lsn: 100}, {xmin: 20, lsn: 200}, {xmin: 30, lsn: 300}}
	tests := []struct {
		name      string
		confirmed pglogrepl.LSN
		want      pruneMark
		ok        bool
		rest      int
	}{
		{name: "slot behind every mark", confirmed: 99, rest: 3},
		{name: "slot at the first mark", confirmed: 100, want: marks[0], ok: true, rest: 2},
		{name: "slot between marks takes the newest passed", confirmed: 299, want: marks[1], ok: true, rest: 1},
		{name: "slot past every mark", confirmed: 1000, want: marks[2], ok: true, rest: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, rest := confirmedMark(slices.Clone(marks), tt.confirmed)
			if got != tt.want || ok != tt.ok || len(rest) != tt.rest {
				t.Fatalf("confirmedMark(%s) = %+v, %v, %d left; want %+v, %v, %d left", tt.confirmed, got, ok, len(rest), tt.want, tt.ok, tt.rest)
			}
		})
	}
}

// TestCheckpointRoundKeepsUnconfirmedRows runs the checkpoint and pruning rule on the real
// server: rows older than the retention are deleted only once the slot
// confirmed (by the reader itself) a mark taken after their transaction finished. A transaction
// open when the mark was taken — a top-level insert or one in a savepoint,
// committed afterwards with an old created_at — and a transaction that
// began after the mark keep their rows, as does a fresh row.
func TestCheckpointRoundKeepsUnconfirmedRows(t *testing.T) {
	env := testenv.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctl, err := control.Open(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close(context.Background()) })
	prog := &progress.Progress{}
	k := NewKeeper(Config{Slot: env.Slot, Outbox: outbox.Table{"public", "outbox"}, Checkpoints: outbox.Table{"public", "cdc_checkpoints"},
		Retention: time.Minute, PruneBatch: 2}, ctl, prog, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := gap.RaiseLimit(ctx, ctl, k.cfg.Checkpoints, env.Slot, 0); err != nil {
		t.Fatal(err)
	}
	var marks []pruneMark
	// round records the checkpoint and prunes with the mark it recorded, as
	// the reader's checkpoint loop does.
	round := func() (int64, error) {
		m, ok, err := k.round(ctx, &marks)
		if err != nil || !ok {
			return 0, err
		}
		return pruneOutbox(ctx, ctl, k.cfg.Outbox, k.cfg.Retention, k.cfg.PruneBatch, m)
	}

	insertRow := func(tx pgx.Tx, age string) string {
		t.Helper()
		id := uuid.NewString()
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, created_at)
			VALUES ($1, 'order', $2, 'OrderCreated', '{}', now() - $3::interval)`, id, id, age); err != nil {
			t.Fatal(err)
		}
		return id
	}
	committed := func(age string) string {
		t.Helper()
		var id string
		if err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error { id = insertRow(tx, age); return nil }); err != nil {
			t.Fatal(err)
		}
		return id
	}

	var old []string
	for range 5 {
		old = append(old, committed("2 hours"))
	}
	fresh := committed("0 seconds")
	open, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	openID := insertRow(open, "3 hours")
	inSavepoint, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := inSavepoint.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	savepointID := insertRow(sp, "3 hours")
	if err := sp.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	n, err := round()
	if err != nil || n != 0 || len(marks) != 1 {
		t.Fatalf("first round: %d pruned, %d marks, %v; want nothing pruned and one mark", n, len(marks), err)
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inSavepoint.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after := committed("2 hours")

	// The slot has not confirmed the mark yet: nothing is deleted.
	n, err = round()
	if err != nil || n != 0 {
		t.Fatalf("round before the slot confirmed the mark: %d pruned, %v; want 0", n, err)
	}
	var recorded *int64
	if err := env.Pool.QueryRow(ctx, `SELECT published_below FROM cdc_checkpoints WHERE slot = $1`, env.Slot).Scan(&recorded); err != nil || recorded != nil {
		t.Fatalf("published_below before the mark was confirmed: %v, %v; want NULL", recorded, err)
	}
	// Confirm the first mark as a reader does once Kafka acknowledged
	// everything up to it. The slot's own position counts for nothing.
	first := marks[0]
	prog.SetSent(first.lsn)
	n, err = round()
	if err != nil || n != int64(len(old)) {
		t.Fatalf("round after the reader confirmed the mark: %d pruned, %v; want %d", n, err, len(old))
	}
	if err := env.Pool.QueryRow(ctx, `SELECT published_below FROM cdc_checkpoints WHERE slot = $1`, env.Slot).Scan(&recorded); err != nil || recorded == nil || *recorded != first.xmin {
		t.Fatalf("published_below after the mark was confirmed: %v, %v; want %d", recorded, err, first.xmin)
	}
	rows, _ := env.Pool.Query(ctx, `SELECT id::text FROM outbox ORDER BY id`)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{fresh, openID, savepointID, after}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("rows left %v, want the fresh row, the two transactions open at the mark and the one after it %v", left, want)
	}
}
