package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/testenv"
)

// TestConsumerStartsWhileKafkaDoesNotAnswer: a consumer started while
// Kafka answers nothing (its bootstrap address a blackhole) waits for it
// instead of exiting — a supervisor would restart an exiting one in a loop —
// and applies events once Kafka answers.
func TestConsumerStartsWhileKafkaDoesNotAnswer(t *testing.T) {
	pl := newPipeline(t)
	kafka := testenv.NewBlackhole(t, pl.env.Endpoints.KafkaBootstrap)
	kafka.Block()
	p := start(t, "consumer", nil, "consumer",
		"--database-url", pl.env.DatabaseURL, "--kafka-brokers", kafka.Addr(),
		"--name", "fulfillment", "--group", pl.env.Group, "--topics", pl.env.Topic, "--commit-interval", "200ms")
	testenv.Eventually(t, 2*time.Minute, "the consumer says it waits for Kafka", func() error {
		select {
		case <-p.Exited():
			t.Fatalf("the consumer exited while Kafka did not answer: %v\n%s", p.Err(), p.tail(10))
		default:
		}
		if logCount(t, p.Log, "kafka does not answer; waiting for it to check the dlq topics") == 0 {
			return fmt.Errorf("no such line in %s yet", p.Log)
		}
		return nil
	})
	kafka.Unblock()
	o := seedOrders(t, pl, 1, 1)[0]
	ev := createdEvent(o)
	newEventProducer(t, pl).send(t, ev)
	waitProcessed(t, pl, o.id, ev.id)
}
