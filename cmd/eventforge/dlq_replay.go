package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/schollz/progressbar/v3"

	"github.com/eventforge/eventforge/consumer/dlq"
)

type dlqReplayCmd struct {
	dlqTopicFlags
	dlqFilterFlags
	Position    string `arg:"" optional:"" help:"Replay only the record at <partition>:<offset>."`
	All         bool   `name:"all" help:"Replay every record that matches (required when no position or filter is given)."`
	DryRun      bool   `name:"dry-run" help:"Print what would be replayed and publish nothing."`
	Purge       bool   `name:"purge" help:"Then purge, per partition, the records from the first held up to the first not replayed (each recorded in dlq_purged first)."`
	DatabaseURL string `name:"database-url" log:"url" help:"PostgreSQL connection URL, for --purge: each purged record is recorded in dlq_purged before it is deleted." default:"${database_url}"`
}

// replayed is what a replay did with the matching entries of one DLQ
// partition: for each, in offset order, the entry that replays its event
// (itself, or the newest entry of the same event).
type replayed struct {
	low     int64 // the partition's first held offset when it was read
	offsets []int64
	by      []dlqPos // by[i] replays offsets[i]
}

// dlqPos is a DLQ entry's partition and offset.
type dlqPos struct {
	partition int32
	offset    int64
}

func (c *dlqReplayCmd) Run(env *runEnv) error {
	match, err := c.matcher()
	if err != nil {
		return err
	}
	r, err := dlq.NewReader(c.KafkaBrokers)
	if err != nil {
		return err
	}
	defer r.Close()
	now := time.Now()
	sel, err := c.selectEntries(env, r, match, now)
	if err != nil {
		return err
	}
	if sel.selected == 0 {
		fmt.Printf("%s: %d records held, none matches: nothing to replay\n", c.Topic, sel.held)
		return nil
	}
	if c.DryRun {
		return c.printReplays(env, r, sel, match, now)
	}
	out, err := c.replay(env, r, sel, match, now)
	fmt.Fprintf(os.Stderr, "%d records match, %d distinct events to replay\n", sel.selected, out.replays)
	fmt.Printf("replayed %d of %d events; %d failed\n", len(out.acked), out.replays, len(out.failed))
	for i, res := range out.failed {
		if i == 20 {
			fmt.Printf("… %d more failures (see the log)\n", len(out.failed)-i)
			break
		}
		fmt.Printf("  not replayed: %d:%d event %s: %v\n", res.Partition, res.Offset, res.EventID, res.Err)
	}
	if err != nil {
		return err
	}
	if err := c.purgeReplayed(env, r, coveredPrefix(sel.parts, out.acked)); err != nil {
		return err
	}
	if len(out.failed) > 0 {
		return fmt.Errorf("%d of %d replays failed", len(out.failed), out.replays)
	}
	return nil
}

// Validate refuses a replay that names neither a position, nor filters,
// nor --all, and a position that does not parse: kong calls it while it
// parses the command line, so these are usage errors.
func (c *dlqReplayCmd) Validate() error {
	_, err := c.matcher()
	return err
}

// matcher returns what selects an entry: the filters and the position.
func (c *dlqReplayCmd) matcher() (func(dlq.Entry, time.Time) bool, error) {
	f := c.filter()
	if c.Position == "" && f.IsZero() && !c.All {
		return nil, errors.New("say what to replay: a position <partition>:<offset>, filters (e.g. --event-id), or --all")
	}
	if c.Position == "" {
		return f.Match, nil
	}
	_, p, o, ok := dlq.ParsePosition(c.Position)
	if !ok {
		return nil, fmt.Errorf("position %q: want <partition>:<offset>", c.Position)
	}
	return func(e dlq.Entry, now time.Time) bool { return e.Partition == p && e.Offset == o && f.Match(e, now) }, nil
}

// selection is what a first pass over the DLQ found.
type selection struct {
	held, selected int
	newest         dlq.Newest          // which entry replays each selected event
	parts          map[int32]*replayed // filled by the second pass
}

// selectEntries reads the DLQ once: which entry replays each selected
// event.
func (c *dlqReplayCmd) selectEntries(env *runEnv, r *kafka.Consumer, match func(dlq.Entry, time.Time) bool, now time.Time) (*selection, error) {
	sel := &selection{parts: map[int32]*replayed{}}
	err := c.scan(env, r, func(e dlq.Entry) error {
		sel.held++
		if sel.parts[e.Partition] == nil {
			sel.parts[e.Partition] = &replayed{low: e.Offset}
		}
		if match(e, now) {
			sel.selected++
			sel.newest.Add(e)
		}
		return nil
	})
	return sel, err
}

// printReplays prints what a replay would publish.
func (c *dlqReplayCmd) printReplays(env *runEnv, r *kafka.Consumer, sel *selection, match func(dlq.Entry, time.Time) bool, now time.Time) error {
	l := &listing{held: sel.held, summary: dlq.NewSummary()}
	err := c.scan(env, r, func(e dlq.Entry) error {
		if match(e, now) && sel.newest.Replays(e) {
			l.summary.Add(e)
			e.Value = nil
			l.rows = append(l.rows, listRow{Entry: e})
		}
		return nil
	})
	fmt.Fprintf(os.Stderr, "%d records match, %d distinct events to replay\n", sel.selected, l.summary.Total)
	printList(os.Stdout, c.Topic, l, now)
	return err
}

// replayOutcome is what a replay did.
type replayOutcome struct {
	replays int             // entries replayed (one per event)
	acked   map[dlqPos]bool // their positions, once acknowledged
	failed  []dlq.Result
}

// replay reads the DLQ a second time and replays the entry that replays
// each selected event, noting for every selected entry which one that is.
func (c *dlqReplayCmd) replay(env *runEnv, r *kafka.Consumer, sel *selection, match func(dlq.Entry, time.Time) bool, now time.Time) (*replayOutcome, error) {
	var tick func()
	if sel.selected > 1 {
		bar := progressbar.NewOptions(sel.newest.Events(), progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription("replaying"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		tick = func() { _ = bar.Add(1) }
		defer func() { _ = bar.Finish() }()
	}
	p, err := dlq.NewProducer(dlq.ReplayConfig(c.KafkaBrokers), nil)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	out := &replayOutcome{acked: map[dlqPos]bool{}}
	rp := dlq.NewReplayer(p, now, func(res dlq.Result) {
		if tick != nil {
			tick()
		}
		if res.Err != nil {
			out.failed = append(out.failed, res)
			env.logger.Error("replay failed", "event_id", res.EventID, "order_id", string(res.Key), "dlq_position", res.Position(),
				"topic", res.OriginalTopic, "err", res.Err)
			return
		}
		out.acked[dlqPos{res.Partition, res.Offset}] = true
		env.logger.Info("replayed", "event_id", res.EventID, "dlq_position", res.Position(), "topic", res.OriginalTopic)
	})
	err = c.scan(env, r, func(e dlq.Entry) error {
		if !match(e, now) {
			return nil
		}
		if bp, bo, ok := sel.newest.ReplayedBy(e); ok {
			pr := sel.parts[e.Partition]
			pr.offsets = append(pr.offsets, e.Offset)
			pr.by = append(pr.by, dlqPos{bp, bo})
		}
		if !sel.newest.Replays(e) {
			return nil
		}
		out.replays++
		return rp.Add(env.ctx, e)
	})
	if err == nil {
		err = rp.Wait(env.ctx)
	}
	return out, err
}

// purgeReplayed purges what through names (--purge), or prints the
// command that does.
func (c *dlqReplayCmd) purgeReplayed(env *runEnv, r *kafka.Consumer, through map[int32]int64) error {
	if len(through) == 0 {
		return nil
	}
	if !c.Purge {
		args := make([]string, 0, len(through))
		for _, pid := range slices.Sorted(maps.Keys(through)) {
			args = append(args, fmt.Sprintf("--through %d:%d", pid, through[pid]))
		}
		fmt.Printf("purge what was replayed with: eventforge dlq purge --topic %s %s --yes\n", c.Topic, strings.Join(args, " "))
		return nil
	}
	plans, err := dlq.PlanThrough(r, c.Topic, through)
	if err != nil {
		return err
	}
	return purge(env, r, c.Topic, c.DatabaseURL, plans)
}

// coveredPrefix returns, per partition, the last offset of the run of
// entries from its first held offset whose events were replayed (acked):
// Kafka deletes prefixes only, so a purge of what was replayed stops at
// the first entry that was not (not selected, or its replay failed).
func coveredPrefix(parts map[int32]*replayed, acked map[dlqPos]bool) map[int32]int64 {
	out := map[int32]int64{}
	for pid, pr := range parts {
		next := pr.low
		for i, off := range pr.offsets {
			if off != next || !acked[pr.by[i]] {
				break
			}
			next = off + 1
		}
		if next > pr.low {
			out[pid] = next - 1
		}
	}
	return out
}
