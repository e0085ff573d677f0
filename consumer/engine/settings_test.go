package engine

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestConsumerSettingsFetchWait: a fetch wait asks the broker to hold each
// fetch for up to that long, gathering up to fetchGatherBytes, in settings
// librdkafka accepts; without one librdkafka's defaults answer a fetch as
// soon as any record is there.
func TestConsumerSettingsFetchWait(t *testing.T) {
	if fetchGatherBytes > partitionFetchBytes || partitionFetchBytes > fetchMaxBytes {
		t.Fatalf("fetch.min.bytes %d must be at most max.partition.fetch.bytes %d, itself at most fetch.max.bytes %d, "+
			"or one partition's records could never end the wait", fetchGatherBytes, partitionFetchBytes, fetchMaxBytes)
	}
	o := Options{Settings: DefaultSettings()}
	o.Group = "settings-test"
	for _, tt := range []struct {
		wait               time.Duration
		wantWait, wantMin  any
		wantLibrdkafkaDflt bool
	}{
		{wait: 0, wantLibrdkafkaDflt: true},
		{wait: 25 * time.Millisecond, wantWait: 25, wantMin: fetchGatherBytes},
		{wait: DefaultFetchWait, wantWait: int(DefaultFetchWait / time.Millisecond), wantMin: fetchGatherBytes},
	} {
		o.FetchWait = tt.wait
		s := consumerSettings(o)
		gotWait, hasWait := s["fetch.wait.max.ms"]
		gotMin, hasMin := s["fetch.min.bytes"]
		if tt.wantLibrdkafkaDflt {
			if hasWait || hasMin {
				t.Errorf("FetchWait 0 sets fetch.wait.max.ms %v, fetch.min.bytes %v; want librdkafka's defaults", gotWait, gotMin)
			}
		} else if gotWait != tt.wantWait || gotMin != tt.wantMin {
			t.Errorf("FetchWait %v: fetch.wait.max.ms %v, fetch.min.bytes %v; want %v, %v", tt.wait, gotWait, gotMin, tt.wantWait, tt.wantMin)
		}
		// librdkafka validates every property when the client is created;
		// no broker is needed for that.
		cfg := kafka.ConfigMap{"bootstrap.servers": "127.0.0.1:1"}
		for k, v := range s {
			cfg[k] = v
		}
		c, err := kafka.NewConsumer(&cfg)
		if err != nil {
			t.Fatalf("FetchWait %v: librdkafka refuses the settings: %v", tt.wait, err)
		}
		c.Close()
	}
}
