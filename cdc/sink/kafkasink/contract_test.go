package kafkasink_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/cdc/sink"
	"github.com/eventforge/eventforge/cdc/sink/kafkasink"
	"github.com/eventforge/eventforge/cdc/sink/sinktest"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/testenv"
)

// topicLimit is the max.message.bytes the contract suite's topic gets, so
// that a record of sinktest's oversized payload is refused for good.
const topicLimit = 4000

// TestContract runs the sink contract suite against the Kafka driver as
// the relay opens it, on real Kafka.
func TestContract(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) sinktest.Destination {
			env := testenv.New(t)
			bootstrap := env.Endpoints.KafkaBootstrap
			limitTopic(t, bootstrap, env.Topic, topicLimit)
			return sinktest.Destination{
				Driver:    kafkasink.Driver{Bootstrap: bootstrap, Extra: kafkasink.Config{}.RelaySettings(2500, 16<<20), Logger: logger},
				Name:      env.Topic,
				Oversized: 5 * topicLimit,
				Read: func(t *testing.T) []sinktest.Stored {
					recs, err := testenv.ReadTopic(bootstrap, env.Topic)
					if err != nil {
						t.Fatal(err)
					}
					out := make([]sinktest.Stored, 0, len(recs))
					for _, r := range recs {
						out = append(out, sinktest.Stored{Key: r.Key, ID: r.Headers[contract.HeaderID]})
					}
					return out
				},
			}
		},
		Unreachable: func(t *testing.T) (sink.Driver, string) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			cfg := kafkasink.Config{ProducerSettings: map[string]string{"request.timeout.ms": "100", "socket.timeout.ms": "100", "reconnect.backoff.max.ms": "100"}}
			return kafkasink.Driver{Bootstrap: addr, Extra: cfg.RelaySettings(2500, 16<<20), Logger: logger}, "unreachable.orders"
		},
	})
}

// limitTopic sets the topic-level max.message.bytes of topic.
func limitTopic(t *testing.T, bootstrap, topic string, limit int) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap, "log_level": 0})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.IncrementalAlterConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic,
		Config: []kafka.ConfigEntry{{Name: "max.message.bytes", Value: fmt.Sprint(limit), IncrementalOperation: kafka.AlterConfigOpTypeSet}}}})
	if err == nil && res[0].Error.Code() != kafka.ErrNoError {
		err = res[0].Error
	}
	if err != nil {
		t.Fatalf("limiting %s to %d bytes: %v", topic, limit, err)
	}
}
