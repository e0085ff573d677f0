package localstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// topicReadyTimeout bounds the wait for created topics to have a leader on
// every partition.
const topicReadyTimeout = 30 * time.Second

// EnsureTopics creates the topics that do not exist on the cluster at
// bootstrap, with replication factor 1, and waits until every partition has
// a leader. A topic that exists with fewer partitions is grown; one with more
// partitions than asked for is an error (Kafka cannot shrink a topic).
// Calling it again with the same topics does nothing.
func EnsureTopics(ctx context.Context, bootstrap string, topics []TopicSpec) error {
	return ensureTopics(ctx, bootstrap, topics, slog.Default())
}

func ensureTopics(ctx context.Context, bootstrap string, topics []TopicSpec, log *slog.Logger) error {
	if len(topics) == 0 {
		return nil
	}
	a, err := newAdmin(bootstrap, log)
	if err != nil {
		return err
	}
	defer a.close()

	topics = withDLQTopic(topics)
	specs := make([]kafka.TopicSpecification, 0, len(topics))
	for _, t := range topics {
		if t.Name == "" || t.Partitions < 1 {
			return fmt.Errorf("ensuring topics: invalid topic %+v", t)
		}
		spec := kafka.TopicSpecification{Topic: t.Name, NumPartitions: t.Partitions, ReplicationFactor: 1}
		if t.Name == DefaultDLQTopic {
			spec.Config = DLQTopicSettings
		}
		specs = append(specs, spec)
	}
	res, err := a.admin.CreateTopics(ctx, specs, kafka.SetAdminOperationTimeout(topicReadyTimeout))
	if err != nil {
		return fmt.Errorf("creating topics: %w", err)
	}
	var errs []error
	for _, r := range res {
		switch r.Error.Code() {
		case kafka.ErrNoError:
			log.Info("topic created", "topic", r.Topic)
		case kafka.ErrTopicAlreadyExists:
		default:
			errs = append(errs, fmt.Errorf("creating topic %s: %w", r.Topic, r.Error))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return waitTopics(ctx, a.admin, topics, log)
}

// DefaultDLQTopic is the dead-letter topic of DefaultTopic, created with
// it: the consumers would create it at start, with the same settings.
const DefaultDLQTopic = DefaultTopic + ".dlq"

// DLQTopicSettings are the settings DefaultDLQTopic is created with: those
// of consumer/dlq.TopicSettings (its records never expire and are never
// compacted; consumer/dlq's tests hold the two equal), and a
// max.message.bytes 64 KiB above Kafka's default for the dlq.* headers of
// a dead-letter copy.
var DLQTopicSettings = map[string]string{
	"retention.ms":      "-1",
	"retention.bytes":   "-1",
	"cleanup.policy":    "delete",
	"max.message.bytes": "1114124",
}

// withDLQTopic adds DefaultDLQTopic, with DefaultTopic's partitions, to
// topics that hold DefaultTopic and not it.
func withDLQTopic(topics []TopicSpec) []TopicSpec {
	var src *TopicSpec
	for i := range topics {
		switch topics[i].Name {
		case DefaultDLQTopic:
			return topics
		case DefaultTopic:
			src = &topics[i]
		}
	}
	if src == nil {
		return topics
	}
	return append(slices.Clip(topics), TopicSpec{Name: DefaultDLQTopic, Partitions: src.Partitions})
}

// waitTopics waits until each topic has its partitions, each with a leader,
// growing topics that have too few.
func waitTopics(ctx context.Context, a *kafka.AdminClient, topics []TopicSpec, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, topicReadyTimeout)
	defer cancel()
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	grown := map[string]bool{}
	for {
		desc, err := a.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames(names))
		pending := ""
		if err != nil {
			pending = err.Error()
		} else {
			pending, err = checkTopics(topics, desc.TopicDescriptions)
			if err != nil {
				return err
			}
			for _, t := range topics {
				if n := partitionsOf(desc.TopicDescriptions, t.Name); n > 0 && n < t.Partitions && !grown[t.Name] {
					if err := growTopic(ctx, a, t); err != nil {
						return err
					}
					log.Info("topic grown", "topic", t.Name, "partitions", t.Partitions, "previous_partitions", n)
					grown[t.Name] = true
				}
			}
		}
		if pending == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for topics: %s: %w", pending, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkTopics compares described topics with the wanted ones. It returns a
// description of what is not ready yet ("" when all are), or an error for
// what waiting cannot fix.
func checkTopics(want []TopicSpec, got []kafka.TopicDescription) (string, error) {
	for _, w := range want {
		var d *kafka.TopicDescription
		for i := range got {
			if got[i].Name == w.Name {
				d = &got[i]
			}
		}
		switch {
		case d == nil:
			return fmt.Sprintf("topic %s not described", w.Name), nil
		case d.Error.Code() == kafka.ErrUnknownTopicOrPart || d.Error.Code() == kafka.ErrLeaderNotAvailable:
			return fmt.Sprintf("topic %s: %v", w.Name, d.Error), nil
		case d.Error.Code() != kafka.ErrNoError:
			return "", fmt.Errorf("describing topic %s: %w", w.Name, d.Error)
		case len(d.Partitions) > w.Partitions:
			return "", fmt.Errorf("topic %s has %d partitions, want %d: delete it to recreate it", w.Name, len(d.Partitions), w.Partitions)
		case len(d.Partitions) < w.Partitions:
			return fmt.Sprintf("topic %s has %d of %d partitions", w.Name, len(d.Partitions), w.Partitions), nil
		}
		for _, p := range d.Partitions {
			if p.Leader == nil {
				return fmt.Sprintf("topic %s partition %d has no leader", w.Name, p.Partition), nil
			}
		}
	}
	return "", nil
}

func partitionsOf(got []kafka.TopicDescription, name string) int {
	for _, d := range got {
		if d.Name == name && d.Error.Code() == kafka.ErrNoError {
			return len(d.Partitions)
		}
	}
	return 0
}

func growTopic(ctx context.Context, a *kafka.AdminClient, t TopicSpec) error {
	res, err := a.CreatePartitions(ctx, []kafka.PartitionsSpecification{{Topic: t.Name, IncreaseTo: t.Partitions}})
	if err != nil {
		return fmt.Errorf("growing topic %s to %d partitions: %w", t.Name, t.Partitions, err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			return fmt.Errorf("growing topic %s to %d partitions: %w", t.Name, t.Partitions, r.Error)
		}
	}
	return nil
}
