package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/testenv"
)

// probingHandler is fakeHandler with a Probe that runs its insert on no
// rows. A record whose payload is "bad-sql" runs a statement on a table that
// does not exist: a failure with a SQLSTATE that belongs to that event
// alone.
type probingHandler struct{ fakeHandler }

func (h probingHandler) Apply(ctx context.Context, tx pgx.Tx, ev Event) error {
	if string(ev.Payload) == "bad-sql" {
		_, err := tx.Exec(ctx, `SELECT * FROM test_no_such_table`)
		return err
	}
	return h.fakeHandler.Apply(ctx, tx, ev)
}

func (probingHandler) Probe(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `INSERT INTO test_effects (event_id, key, payload) SELECT gen_random_uuid(), '', '' WHERE false`)
	return err
}

// refusal makes the test's own database refuse, or hang on, every apply
// (refuse) and heals it (heal); setup runs before the runtime starts.
type refusal struct {
	name         string
	setup        []string // SQL on the test database
	refuse, heal func(t *testing.T, env *testenv.Env)
}

// TestRefusingDatabaseWaits: the test's database refuses every apply — it
// is read-only, INSERT on processed_events is revoked, the handler's table
// is missing, or every COMMIT hangs while reads answer — for longer than
// MaxAttempts attempts at every partition, while records arrive. The
// errors carry a SQLSTATE (or, for the hanging commit, none), but the probe
// writes what an apply writes and fails too: every partition waits as
// unavailable, nothing is dead-lettered, and once the database is healed
// every record is applied exactly once. A record whose own statement fails
// afterwards, while the probe succeeds, is still dead-lettered.
func TestRefusingDatabaseWaits(t *testing.T) {
	tests := []refusal{
		{
			name:   "read-only database",
			refuse: func(t *testing.T, env *testenv.Env) { readOnly(t, env, true) },
			heal:   func(t *testing.T, env *testenv.Env) { readOnly(t, env, false) },
		},
		{
			name: "insert on processed_events revoked",
			refuse: func(t *testing.T, env *testenv.Env) {
				execOn(t, env, `REVOKE INSERT ON processed_events FROM CURRENT_USER`)
			},
			heal: func(t *testing.T, env *testenv.Env) {
				execOn(t, env, `GRANT INSERT ON processed_events TO CURRENT_USER`)
			},
		},
		{
			name: "handler table missing",
			refuse: func(t *testing.T, env *testenv.Env) {
				execOn(t, env, `ALTER TABLE test_effects RENAME TO test_effects_away`)
			},
			heal: func(t *testing.T, env *testenv.Env) {
				execOn(t, env, `ALTER TABLE test_effects_away RENAME TO test_effects`)
			},
		},
		{
			// A synchronous standby that is down: COMMIT waits, SELECT 1
			// answers. Here a deferred trigger on the marks waits at COMMIT
			// while the table hang_commits has a row.
			name: "commits hang",
			setup: []string{
				`CREATE TABLE hang_commits (hang boolean)`,
				`CREATE FUNCTION hang_commit() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					WHILE EXISTS (SELECT FROM hang_commits) LOOP PERFORM pg_sleep(0.05); END LOOP;
					RETURN NULL;
				END $$`,
				`CREATE CONSTRAINT TRIGGER hang_commit AFTER INSERT ON processed_events
					DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hang_commit()`,
			},
			refuse: func(t *testing.T, env *testenv.Env) { execOn(t, env, `INSERT INTO hang_commits VALUES (true)`) },
			heal:   func(t *testing.T, env *testenv.Env) { execOn(t, env, `DELETE FROM hang_commits`) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testRefusingDatabaseWaits(t, tt) })
	}
}

func testRefusingDatabaseWaits(t *testing.T, tt refusal) {
	env := testenv.New(t)
	if _, err := env.Pool.Exec(context.Background(), effectsDDL); err != nil {
		t.Fatal(err)
	}
	for _, q := range tt.setup {
		execOn(t, env, q)
	}
	const maxAttempts = 2
	h := start(t, env, Settings{Workers: 4, BatchSize: 10, MaxAttempts: maxAttempts, AttemptTimeout: 500 * time.Millisecond,
		ProbeTimeout: 300 * time.Millisecond}, probingHandler{})
	var recs []record
	wave := func(n int, payload string) {
		var w []record
		for range n {
			i := len(recs) + len(w)
			p := payload
			if p == "" {
				p = fmt.Sprint(i)
			}
			w = append(w, record{partition: int32(i % 6), key: fmt.Sprintf("k%03d", i), id: uuid.New(), payload: p})
		}
		produce(t, env.Endpoints.KafkaBootstrap, env.Topic, w)
		recs = append(recs, w...)
	}
	wave(12, "")
	h.waitCommitted(t)

	tt.refuse(t, env)
	retries := counterValue(retriesTotal.WithLabelValues(h.name))
	wave(12, "")
	noDeadLetters := func() {
		if d := h.count(ResultDeadLettered); d != 0 {
			t.Fatalf("%v records dead-lettered while the database refused every apply; first: %+v", d, firstDLQ(t, env))
		}
	}
	testenv.Eventually(t, 90*time.Second, "every partition waiting on the refusing database", func() error {
		noDeadLetters()
		if g := gaugeValue(unavailablePartitions.WithLabelValues(h.name)); g != 6 {
			return fmt.Errorf("%v partitions waiting, want 6", g)
		}
		return nil
	})
	wave(12, "")
	testenv.Eventually(t, 2*time.Minute, "more failed attempts than max attempts at every partition", func() error {
		noDeadLetters()
		if r := counterValue(retriesTotal.WithLabelValues(h.name)) - retries; r < 6*(maxAttempts+2) {
			return fmt.Errorf("%v failed attempts", r)
		}
		return nil
	})
	noDeadLetters()
	tt.heal(t, env)
	h.waitCommitted(t)

	h.wantAppliedOnce(t, recs)
	if g := gaugeValue(unavailablePartitions.WithLabelValues(h.name)); g != 0 {
		t.Errorf("%v partitions still shown waiting after the database was healed", g)
	}

	// The probe tells an event's own failure from the database's.
	wave(1, "bad-sql")
	h.waitCommitted(t)
	es := readDLQ(t, env)
	if len(es) != 1 || es[0].Class != string(ClassUnknown) || es[0].Attempts != maxAttempts {
		t.Fatalf("DLQ holds %+v, want the bad-sql record alone, class unknown after %d attempts", es, maxAttempts)
	}
}

// execOn runs q on the test's database.
func execOn(t *testing.T, env *testenv.Env, q string) {
	t.Helper()
	if _, err := env.Pool.Exec(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// readOnly makes the test's database read-only for every new session (or
// writable again) and ends the sessions it has, so that no connection keeps
// the former setting. Only that database is touched.
func readOnly(t *testing.T, env *testenv.Env, on bool) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, env.Endpoints.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	db := pgx.Identifier{env.Database}.Sanitize()
	q := `ALTER DATABASE ` + db + ` SET default_transaction_read_only = on`
	if !on {
		q = `ALTER DATABASE ` + db + ` RESET default_transaction_read_only`
	}
	if _, err := admin.Exec(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, env.Database); err != nil {
		t.Fatalf("ending the sessions of %s: %v", env.Database, err)
	}
	env.Pool.Reset()
}

func firstDLQ(t *testing.T, env *testenv.Env) string {
	es := readDLQ(t, env)
	if len(es) == 0 {
		return "none read yet"
	}
	return fmt.Sprintf("class %s after %d attempts: %s", es[0].Class, es[0].Attempts, es[0].Message)
}
