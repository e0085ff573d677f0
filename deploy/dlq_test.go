package deploy_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/eventforge/eventforge/consumer/dlq"
)

// kafkaDefaultMaxMessageBytes is Kafka's default max.message.bytes, which
// compose leaves to the order topic.
const kafkaDefaultMaxMessageBytes = 1048588

// TestComposeDLQTopicCannotExpire: compose creates the order topic's DLQ
// topic with the settings a consumer gives it at start
// (dlq.TopicSettings: no retention, no compaction), the order topic's
// partition count, and room for the dlq.* headers above the order topic's
// record limit.
func TestComposeDLQTopicCannotExpire(t *testing.T) {
	c := loadCompose(t)
	src, dst := c.Services["kafka-topics"].Command, c.Services["kafka-dlq-topics"].Command
	if len(dst) == 0 {
		t.Fatal("compose has no kafka-dlq-topics service")
	}
	if got, want := flagValue(dst, "--topic"), dlq.Topic(flagValue(src, "--topic"), ""); got != want {
		t.Errorf("kafka-dlq-topics creates %q, want %q", got, want)
	}
	if got, want := flagValue(dst, "--partitions"), flagValue(src, "--partitions"); got != want {
		t.Errorf("kafka-dlq-topics: %s partitions, the order topic %s", got, want)
	}
	settings := map[string]string{}
	for i, a := range dst {
		if a == "--config" && i+1 < len(dst) {
			k, v, _ := strings.Cut(dst[i+1], "=")
			settings[k] = v
		}
	}
	for k, v := range dlq.TopicSettings {
		if settings[k] != v {
			t.Errorf("kafka-dlq-topics: %s=%q, want %q", k, settings[k], v)
		}
	}
	if e := dlq.Expiry(settings); e != nil {
		t.Errorf("kafka-dlq-topics lets dead letters expire: %v", e)
	}
	if n, _ := strconv.Atoi(settings["max.message.bytes"]); n < kafkaDefaultMaxMessageBytes+dlq.MessageHeadroom {
		t.Errorf("kafka-dlq-topics: max.message.bytes=%d, want at least %d", n, kafkaDefaultMaxMessageBytes+dlq.MessageHeadroom)
	}
	p, err := parseCompose(composePath, composeEnv)
	if err != nil {
		t.Fatal(err)
	}
	for name, svc := range p.Services {
		if _, ok := svc.DependsOn["kafka-dlq-topics"]; slices.Contains(svc.Command, "consumer") && !ok {
			t.Errorf("%s does not wait for kafka-dlq-topics", name)
		}
	}
}

// flagValue returns the argument after flag in cmd ("" when absent).
func flagValue(cmd []string, flag string) string {
	if i := slices.Index(cmd, flag); i >= 0 && i+1 < len(cmd) {
		return cmd[i+1]
	}
	return ""
}
