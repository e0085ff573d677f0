package engine

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/eventforge/eventforge/internal/testenv"
)

// TestPanicIsAFailedAttempt: a handler panics on one record. The panic is
// recovered into a failed attempt (ErrPanic, class unknown): the record is
// retried, dead-lettered after MaxAttempts with the panic in its message,
// and the records around it are applied; the process does not end.
func TestPanicIsAFailedAttempt(t *testing.T) {
	env := testenv.New(t)
	recs := []record{
		{partition: 2, key: "a", id: uuid.New(), payload: "before"},
		{partition: 2, key: "b", id: uuid.New(), payload: "panic"},
		{partition: 2, key: "c", id: uuid.New(), payload: "after"},
	}
	produce(t, env.Endpoints.KafkaBootstrap, env.Topic, recs)
	fail := func(ev Event) error {
		if string(ev.Payload) == "panic" {
			panic("handler bug on event " + ev.ID.String())
		}
		return nil
	}
	const maxAttempts = 3
	h := start(t, env, Settings{BatchSize: 10, MaxAttempts: maxAttempts}, fakeHandler{fail: fail})
	h.waitCommitted(t)

	effects := h.effects(t)
	if len(effects["a"]) != 1 || len(effects["b"]) != 0 || len(effects["c"]) != 1 {
		t.Errorf("effects %v, want a and c once, b never", effects)
	}
	es := readDLQ(t, env)
	if len(es) != 1 || es[0].EventID != recs[1].id.String() {
		t.Fatalf("DLQ holds %+v, want the record that panicked", es)
	}
	if es[0].Class != string(ClassUnknown) || es[0].Attempts != maxAttempts || !strings.Contains(es[0].Message, ErrPanic.Error()) {
		t.Errorf("dead letter class %s after %d attempts (%s), want unknown after %d with the panic", es[0].Class, es[0].Attempts, es[0].Message, maxAttempts)
	}
}
