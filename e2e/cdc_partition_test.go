//go:build exactlyonce

package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/testenv"
)

// partitionHold is how long the leader's link stays cut: longer than the
// server takes to drop its connections (keepalives, wal_sender_timeout),
// so the standby takes over, and shorter than the readers'
// --unhealthy-after, so the cut leader's producer still holds its records
// when the link comes back.
const partitionHold = 60 * time.Second

// TestRelayPartitionedLeader cuts the publishing reader off the network
// (its own network namespace, its link taken down) under load: the server
// drops its connections, the standby takes over, and the link comes back
// while the old leader's producer still holds records. Without
// --exactly-once those are delivered late — duplicates behind newer
// events of their orders, counted; with it the new leader's producer
// fenced the old one and a read_committed reader sees nothing it sent
// after the takeover.
func TestRelayPartitionedLeader(t *testing.T) {
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"at-least-once", nil}, {"exactly-once", []string{"--exactly-once"}}} {
		t.Run(mode.name, func(t *testing.T) {
			net := testenv.NewNetwork(t)
			hosts := map[string]*testenv.NetHost{"cdc-a": net.AddHost(t), "cdc-b": net.AddHost(t)}
			pg := testenv.NewPrivate(t, testenv.WithoutKafka(), testenv.WithClientNetwork(net))
			kafka := startNemesisKafka(t, net.HostAddr)
			env := pg.Env(t)
			env.Endpoints.KafkaBootstrap = kafka.Bootstrap
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := localstack.EnsureTopics(ctx, kafka.Bootstrap, []localstack.TopicSpec{{Name: env.Topic, Partitions: 6}}); err != nil {
				t.Fatal(err)
			}
			metrics := map[string]string{}
			procs := map[string]*proc{}
			for _, name := range []string{"cdc-a", "cdc-b"} {
				metrics[name] = hosts[name].Addr + ":9464"
				args := append([]string{"cdc", "--database-url", viaBridge(env.DatabaseURL, net.HostAddr), "--kafka-brokers", kafka.ExternalBootstrap,
					"--slot", env.Slot, "--topic", "order=" + env.Topic, "--status-interval", "500ms", "--standby-retry", "250ms",
					"--unhealthy-after", "5m", "--metrics-addr", metrics[name]}, mode.flags...)
				procs[name] = startIn(t, hosts[name], name, nil, args...)
				if name == "cdc-a" {
					waitMetric(t, metrics[name], "eventforge_cdc_active", time.Minute, "cdc-a active", func(v float64) bool { return v == 1 })
				}
			}
			l := startLoad(env.Pool, 50, 2*time.Millisecond)
			waitMetric(t, metrics["cdc-a"], "eventforge_cdc_events_published_total", time.Minute, "cdc-a publishing", func(v float64) bool { return v >= 300 })

			if err := hosts["cdc-a"].Cut(); err != nil {
				t.Fatal(err)
			}
			cut := time.Now()
			waitMetric(t, metrics["cdc-b"], "eventforge_cdc_active", partitionHold, "cdc-b took over", func(v float64) bool { return v == 1 })
			takeover := time.Since(cut)
			waitMetric(t, metrics["cdc-b"], "eventforge_cdc_events_published_total", partitionHold, "cdc-b publishing", func(v float64) bool { return v >= 100 })
			if rest := partitionHold - time.Since(cut); rest > 0 {
				time.Sleep(rest)
			}
			if err := hosts["cdc-a"].Heal(); err != nil {
				t.Fatal(err)
			}
			// The healed leader sends what its producer held, then finds
			// its connections gone.
			testenv.Eventually(t, 2*time.Minute, "cdc-a noticed it lost the leadership", func() error {
				if sessionEnds(t, procs["cdc-a"]) == 0 {
					return fmt.Errorf("no session or connection end in %s", procs["cdc-a"].Log)
				}
				return nil
			})
			l.stop()
			c := waitDelivered(t, env, 3*time.Minute)
			late := lateRecords(t, env)
			fenced := fencedLines(t, procs["cdc-a"].Log)
			t.Logf("%s: takeover %.1f s after the cut; %d duplicate records, %d of them late (behind a newer event of their order); the old leader's log names fencing %d times",
				mode.name, takeover.Seconds(), c.Duplicates, late, fenced)
			if mode.flags != nil && (c.Duplicates != 0 || late != 0) {
				t.Errorf("exactly-once: %d duplicates, %d late records visible to a read_committed reader; want none", c.Duplicates, late)
			}
		})
	}
}

// lateRecords counts the records a read_committed reader finds behind a
// newer event of their order in its partition: an old leader's late
// deliveries (the outbox load numbers each order's events, payload seq).
func lateRecords(t *testing.T, env *testenv.Env) int {
	t.Helper()
	recs, err := testenv.ReadTopic(env.Endpoints.KafkaBootstrap, env.Topic)
	if err != nil {
		t.Fatal(err)
	}
	sort.SliceStable(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
	seq := map[string]int{}
	for _, e := range storedEvents(t, env.Pool) {
		seq[e.id] = e.seq
	}
	newest := map[string]int{}
	late := 0
	for _, r := range recs {
		s, ok := seq[r.Headers[contract.HeaderID]]
		if !ok {
			continue
		}
		if n, seen := newest[r.Key]; seen && s < n {
			late++
			continue
		}
		newest[r.Key] = max(newest[r.Key], s)
	}
	return late
}

// fencedLines counts the lines of the log at path that say the producer
// was fenced.
func fencedLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(strings.ToLower(line), "fenced") {
			n++
		}
	}
	return n
}
