package dlq

import (
	"context"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testenv"
)

// TestScanReplaysTellsTheState: after a real replay of two of four dead
// letters, ScanReplays from ReplayOffsets (the time of the oldest dead
// letter) finds both replays and the state of each dead letter follows;
// a second call from where the first ended reads only what came since.
func TestScanReplaysTellsTheState(t *testing.T) {
	env := testenv.New(t)
	dlqTopic := env.Topic + DefaultSuffix
	if err := localstack.EnsureTopics(context.Background(), env.Endpoints.KafkaBootstrap, []localstack.TopicSpec{{Name: dlqTopic, Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.DeleteTopics(env.Endpoints.KafkaBootstrap, dlqTopic) })
	produceDLQ(t, env, dlqTopic, 4, 1)
	c, err := NewReader(env.Endpoints.KafkaBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	es, err := Read(ctx, c, dlqTopic)
	if err != nil || len(es) != 4 {
		t.Fatalf("read %d entries, %v", len(es), err)
	}
	replay := func(e Entry) {
		t.Helper()
		p, err := NewProducer(ReplayConfig(env.Endpoints.KafkaBootstrap), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		var res Result
		rp := NewReplayer(p, time.Now(), func(r Result) { res = r })
		if err := rp.Add(ctx, e); err != nil {
			t.Fatal(err)
		}
		if err := rp.Wait(ctx); err != nil || res.Err != nil {
			t.Fatalf("replaying %s: %v %v", e.Position(), err, res.Err)
		}
	}
	replay(es[0])
	replay(es[2])

	from, err := ReplayOffsets(c, env.Topic, es[0].Timestamp)
	if err != nil {
		t.Fatal(err)
	}
	var r Replays
	next, err := ScanReplays(ctx, c, env.Topic, from, &r)
	if err != nil {
		t.Fatal(err)
	}
	want := []State{StateReplayed, StatePending, StateReplayed, StatePending}
	for i, e := range es {
		if got := r.StateOf(e); got != want[i] {
			t.Errorf("entry %s: %s, want %s", e.Position(), got, want[i])
		}
	}

	replay(es[3])
	if _, err := ScanReplays(ctx, c, env.Topic, next, &r); err != nil {
		t.Fatal(err)
	}
	if got := r.StateOf(es[3]); got != StateReplayed {
		t.Errorf("entry %s after the second scan: %s, want replayed", es[3].Position(), got)
	}
	if got := r.StateOf(es[1]); got != StatePending {
		t.Errorf("entry %s after the second scan: %s, want pending", es[1].Position(), got)
	}
}
