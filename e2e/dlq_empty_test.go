package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testenv"
)

// TestDLQToolsOnAnEmptySelectionExitZero: a dry run, or a replay or purge
// whose selection is empty, did nothing and nothing failed, so it exits 0
// and says so — on a DLQ topic that was never created and on one that is
// empty.
func TestDLQToolsOnAnEmptySelectionExitZero(t *testing.T) {
	env := testenv.New(t)
	topic := dlq.Topic(env.Topic, "")
	dlqFlags := []string{"--kafka-brokers", env.Endpoints.KafkaBootstrap, "--topic", topic}
	commands := []struct {
		args []string
		want string // in stdout
	}{
		{[]string{"dlq", "replay", "--all", "--dry-run"}, "none matches: nothing to replay"},
		{[]string{"dlq", "replay", "--all"}, "none matches: nothing to replay"},
		{[]string{"dlq", "replay", "--event-id", "0195f5a8-0000-7000-8000-000000000000"}, "none matches: nothing to replay"},
		{[]string{"dlq", "purge", "--all"}, "nothing to purge"},
		{[]string{"dlq", "purge", "--all", "--yes", "--database-url", env.DatabaseURL}, "nothing to purge"},
		{[]string{"dlq", "list"}, "0 records held, 0 match"},
	}
	run := func(t *testing.T) {
		for _, c := range commands {
			out := eventforge(t, 0, append(c.args, dlqFlags...)...).Stdout
			if !strings.Contains(out, c.want) {
				t.Errorf("eventforge %s printed\n%s\nwant %q", strings.Join(c.args, " "), out, c.want)
			}
		}
	}
	t.Run("no topic", run)
	if err := localstack.EnsureTopics(context.Background(), env.Endpoints.KafkaBootstrap, []localstack.TopicSpec{{Name: topic, Partitions: 3}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.DeleteTopics(env.Endpoints.KafkaBootstrap, topic) })
	t.Run("empty topic", run)
}
