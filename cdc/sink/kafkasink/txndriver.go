package kafkasink

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/eventforge/eventforge/cdc/sink"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/kafkaconf"
	"github.com/eventforge/eventforge/internal/kafkaread"
)

// TxnDriver opens the relay's transactional publishers: its
// sink.TransactionalDriver.
type TxnDriver struct {
	Bootstrap string
	// TransactionalID is the relay's stable transactional.id
	// (TransactionalID).
	TransactionalID string
	// PositionTopic is the compacted topic of positions; PositionKey the
	// relay's key on it.
	PositionTopic, PositionKey string
	// Timeout is the transaction timeout.
	Timeout time.Duration
	// Extra librdkafka settings applied last (message.timeout.ms is the
	// transaction timeout and cannot be set).
	Extra  kafka.ConfigMap
	Logger *slog.Logger
}

// TransactionalID is the relay's stable transactional.id for slot of
// database: every relay of one slot shares it, so a new leader fences the
// old one.
func TransactionalID(database, slot string) string {
	return "eventforge-cdc/" + database + "/" + slot
}

// Open implements sink.Driver: it initialises transactions, fencing every
// older publisher of the relay.
func (d TxnDriver) Open(name string, onDelivery sink.DeliveryFunc) (sink.Sink, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.Timeout+30*time.Second)
	defer cancel()
	return NewTxn(ctx, TxnOptions{Bootstrap: d.Bootstrap, ClientID: name, TransactionalID: d.TransactionalID,
		PositionTopic: d.PositionTopic, PositionKey: d.PositionKey, Timeout: d.Timeout, Extra: d.Extra}, d.Logger, onDelivery)
}

// Permanent implements sink.Driver (Permanent).
func (TxnDriver) Permanent(err error) bool { return Permanent(err) }

// ErrorCode implements sink.Driver (ErrorCode).
func (TxnDriver) ErrorCode(err error) string { return ErrorCode(err) }

// Position implements sink.TransactionalDriver: the newest committed
// position record of the relay's key.
func (d TxnDriver) Position(ctx context.Context) (sink.Position, bool, error) {
	r, err := kafkaread.New(d.Bootstrap)
	if err != nil {
		return sink.Position{}, false, err
	}
	defer r.Close()
	recs, err := r.ReadAll(ctx, d.PositionTopic)
	if err != nil {
		return sink.Position{}, false, fmt.Errorf("reading the position topic %s: %w", d.PositionTopic, err)
	}
	var (
		pos   sink.Position
		found bool
	)
	for _, rec := range recs {
		if rec.Key != d.PositionKey {
			continue
		}
		if err := json.Unmarshal(rec.Value, &pos); err != nil {
			return sink.Position{}, false, fmt.Errorf("position record at %s[%d]@%d: %w", d.PositionTopic, rec.Partition, rec.Offset, err)
		}
		found = true
	}
	return pos, found, nil
}

// Published implements sink.TransactionalDriver: the event IDs (header
// id) of the committed records of dests stamped at or after since.
func (d TxnDriver) Published(ctx context.Context, dests []string, since time.Time) (map[string]bool, error) {
	r, err := kafkaread.New(d.Bootstrap)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out := map[string]bool{}
	for _, topic := range dests {
		from, err := r.OffsetsAt(topic, since)
		if err != nil {
			return nil, err
		}
		recs, err := r.ReadFrom(ctx, topic, from)
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			out[rec.Headers[contract.HeaderID]] = true
		}
	}
	return out, nil
}

// EnsurePositionTopic creates the compacted position topic when it does not
// exist: one partition, the cluster's default replication factor.
func EnsurePositionTopic(ctx context.Context, bootstrap, topic string) error {
	cfg := kafkaconf.Tool(bootstrap, "eventforge-cdc-admin")
	a, err := kafka.NewAdminClient(&cfg)
	if err != nil {
		return fmt.Errorf("creating kafka admin client: %w", err)
	}
	defer a.Close()
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: topic, NumPartitions: 1, ReplicationFactor: -1,
		Config: map[string]string{"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}}})
	if err != nil {
		return fmt.Errorf("creating the position topic %s: %w", topic, err)
	}
	if c := res[0].Error.Code(); c != kafka.ErrNoError && c != kafka.ErrTopicAlreadyExists {
		return fmt.Errorf("creating the position topic %s: %w", topic, res[0].Error)
	}
	return nil
}
