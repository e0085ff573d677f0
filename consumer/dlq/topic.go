package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TopicSettings are the settings every DLQ topic has: its records never
// expire (no time or size retention) and are never compacted away. A dead
// letter leaves the topic only through `eventforge dlq purge`, which records
// it in dlq_purged first; `eventforge verify` reports any other departure as
// a lost event. A dead letter's source record, on the other hand, expires
// with its topic's retention: the DLQ copy is then the only one left.
var TopicSettings = map[string]string{
	"retention.ms":    "-1",
	"retention.bytes": "-1",
	"cleanup.policy":  "delete",
}

// maxMessageBytes is the topic setting bounding one record batch.
const maxMessageBytes = "max.message.bytes"

// MessageHeadroom is how much larger a DLQ topic's max.message.bytes is
// than its source topic's: a dead-letter copy is the source record plus
// the dlq.* headers (at most ~2.5 KiB: dlq.error.message is cut at 2 KiB),
// so a record its source topic accepted fits in the DLQ.
const MessageHeadroom = 64 << 10

// Expiry returns what in a topic's settings lets its records be deleted
// without a purge: a finite retention.ms or retention.bytes, or
// compaction. Nil means none.
func Expiry(settings map[string]string) []string {
	var out []string
	for _, k := range []string{"retention.ms", "retention.bytes"} {
		if v, err := strconv.ParseInt(settings[k], 10, 64); err != nil || v >= 0 {
			out = append(out, fmt.Sprintf("%s=%s (want -1)", k, settings[k]))
		}
	}
	if p := settings["cleanup.policy"]; slices.Contains(strings.Split(p, ","), "compact") {
		out = append(out, fmt.Sprintf("cleanup.policy=%s (want delete)", p))
	}
	return out
}

// ReadSettings returns the settings of topics (ErrNoTopic wrapped for a
// topic that does not exist).
func ReadSettings(ctx context.Context, a *kafka.AdminClient, topics ...string) (map[string]map[string]string, error) {
	res := make([]kafka.ConfigResource, len(topics))
	for i, t := range topics {
		res[i] = kafka.ConfigResource{Type: kafka.ResourceTopic, Name: t}
	}
	got, err := a.DescribeConfigs(ctx, res)
	if err != nil {
		return nil, fmt.Errorf("describing the settings of %v: %w", topics, err)
	}
	out := make(map[string]map[string]string, len(got))
	for _, r := range got {
		switch r.Error.Code() {
		case kafka.ErrNoError:
		case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic:
			return nil, fmt.Errorf("%s: %w", r.Name, ErrNoTopic)
		default:
			return nil, fmt.Errorf("describing the settings of %s: %w", r.Name, r.Error)
		}
		m := make(map[string]string, len(r.Config))
		for k, e := range r.Config {
			m[k] = e.Value
		}
		out[r.Name] = m
	}
	return out, nil
}

// EnsureTopics makes sure every source topic has its DLQ topic (source +
// suffix) with TopicSettings, the source's partition count and a
// max.message.bytes MessageHeadroom above the source's. A missing DLQ topic
// is created so; an existing one whose settings differ is altered, and the
// changes made are returned (for the caller to log). It fails when a topic
// cannot be created or altered (e.g. not authorised): a consumer must not
// dead-letter into a topic that may delete its records unseen.
func EnsureTopics(ctx context.Context, a *kafka.AdminClient, sources []string, suffix string) ([]string, error) {
	desc, err := a.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames(sources))
	if err != nil {
		return nil, fmt.Errorf("describing topics %v: %w", sources, err)
	}
	srcSettings, err := ReadSettings(ctx, a, sources...)
	if err != nil {
		return nil, err
	}
	want := map[string]map[string]string{}
	var specs []kafka.TopicSpecification
	for _, t := range desc.TopicDescriptions {
		if t.Error.Code() != kafka.ErrNoError {
			return nil, fmt.Errorf("describing topic %s: %w", t.Name, t.Error)
		}
		settings, err := settingsFor(srcSettings[t.Name])
		if err != nil {
			return nil, fmt.Errorf("topic %s: %w", t.Name, err)
		}
		topic := Topic(t.Name, suffix)
		want[topic] = settings
		specs = append(specs, kafka.TopicSpecification{Topic: topic, NumPartitions: len(t.Partitions), ReplicationFactor: -1, Config: settings})
	}
	res, err := a.CreateTopics(ctx, specs)
	if err != nil {
		return nil, fmt.Errorf("creating dlq topics: %w", err)
	}
	var existing []string
	var errs []error
	for _, r := range res {
		switch r.Error.Code() {
		case kafka.ErrNoError:
		case kafka.ErrTopicAlreadyExists:
			existing = append(existing, r.Topic)
		default:
			errs = append(errs, fmt.Errorf("creating dlq topic %s: %w", r.Topic, r.Error))
		}
	}
	if len(errs) > 0 || len(existing) == 0 {
		return nil, errors.Join(errs...)
	}
	have, err := ReadSettings(ctx, a, existing...)
	if err != nil {
		return nil, err
	}
	var changes []string
	var alter []kafka.ConfigResource
	for _, topic := range existing {
		var entries []kafka.ConfigEntry
		for _, k := range sortedKeys(want[topic]) {
			if k == maxMessageBytes && atLeast(have[topic][k], want[topic][k]) || k != maxMessageBytes && !differs(k, have[topic][k], want[topic][k]) {
				continue
			}
			entries = append(entries, kafka.ConfigEntry{Name: k, Value: want[topic][k], IncrementalOperation: kafka.AlterConfigOpTypeSet})
			changes = append(changes, fmt.Sprintf("%s: %s %s → %s", topic, k, have[topic][k], want[topic][k]))
		}
		if len(entries) > 0 {
			alter = append(alter, kafka.ConfigResource{Type: kafka.ResourceTopic, Name: topic, Config: entries})
		}
	}
	if len(alter) == 0 {
		return nil, nil
	}
	altered, err := a.IncrementalAlterConfigs(ctx, alter)
	if err != nil {
		return nil, fmt.Errorf("setting %s: %w", strings.Join(changes, ", "), err)
	}
	for _, r := range altered {
		if r.Error.Code() != kafka.ErrNoError {
			errs = append(errs, fmt.Errorf("setting the dlq settings of %s (%s): %w", r.Name, strings.Join(changes, ", "), r.Error))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return changes, nil
}

// settingsFor returns the settings of the DLQ topic of a source topic with
// the given settings.
func settingsFor(source map[string]string) (map[string]string, error) {
	limit, err := strconv.Atoi(source[maxMessageBytes])
	if err != nil {
		return nil, fmt.Errorf("reading %s %q: %w", maxMessageBytes, source[maxMessageBytes], err)
	}
	out := map[string]string{maxMessageBytes: strconv.Itoa(limit + MessageHeadroom)}
	for k, v := range TopicSettings {
		out[k] = v
	}
	return out, nil
}

// differs reports whether setting k's value have is not want: a
// cleanup.policy is compared as a set.
func differs(k, have, want string) bool {
	if k == "cleanup.policy" {
		h := strings.Split(have, ",")
		slices.Sort(h)
		return strings.Join(h, ",") != want
	}
	return have != want
}

// atLeast reports whether the number have is at least want.
func atLeast(have, want string) bool {
	h, err1 := strconv.Atoi(have)
	w, err2 := strconv.Atoi(want)
	return err1 == nil && err2 == nil && h >= w
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
