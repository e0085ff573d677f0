package dlq

import (
	"maps"
	"strconv"
	"testing"

	"github.com/eventforge/eventforge/internal/localstack"
)

func TestExpiry(t *testing.T) {
	tests := []struct {
		name     string
		settings map[string]string
		want     int // problems found
	}{
		{"dlq settings", TopicSettings, 0},
		{"broker default retention", map[string]string{"retention.ms": "604800000", "retention.bytes": "-1", "cleanup.policy": "delete"}, 1},
		{"size retention", map[string]string{"retention.ms": "-1", "retention.bytes": "1073741824", "cleanup.policy": "delete"}, 1},
		{"compacted", map[string]string{"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "compact,delete"}, 1},
		{"nothing known", map[string]string{}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Expiry(tt.settings); len(got) != tt.want {
				t.Fatalf("Expiry(%v) = %v, want %d problems", tt.settings, got, tt.want)
			}
		})
	}
}

// TestLocalStackDLQTopicSettings: `eventforge stack` creates the order
// topic's DLQ topic with the settings a consumer gives it.
func TestLocalStackDLQTopicSettings(t *testing.T) {
	got := maps.Clone(localstack.DLQTopicSettings)
	limit, err := strconv.Atoi(got[maxMessageBytes])
	if err != nil || limit < 1048588+MessageHeadroom {
		t.Errorf("local stack DLQ max.message.bytes %q, want at least Kafka's default 1048588 + %d", got[maxMessageBytes], MessageHeadroom)
	}
	delete(got, maxMessageBytes)
	if !maps.Equal(got, TopicSettings) {
		t.Errorf("local stack DLQ topic settings %v, want %v", got, TopicSettings)
	}
	if localstack.DefaultDLQTopic != Topic(localstack.DefaultTopic, "") {
		t.Errorf("local stack DLQ topic %s, want %s", localstack.DefaultDLQTopic, Topic(localstack.DefaultTopic, ""))
	}
}
