package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as a human-readable table.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("logical events", r.LogicalEvents)
	row("deliveries", r.Deliveries)
	row("duplicate deliveries", r.DuplicateDeliveries)
	row("  published again by the relay", r.RelayDuplicates)
	row("  DLQ replays", r.DLQReplays)
	names := make([]string, 0, len(r.BusinessChanges))
	for n := range r.BusinessChanges {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		row("business changes ("+n+")", r.BusinessChanges[n])
		row("  pending ("+n+")", r.Pending[n])
		row("  dead-lettered ("+n+")", r.DeadLettered[n])
		row("  purged from the DLQ ("+n+")", r.Purged[n])
		row("  unattributed marks ("+n+")", r.UnattributedMarks[n])
	}
	row("unpublished", r.Unpublished)
	row("unpublished beyond the grace", r.UnpublishedPastGrace)
	row("dead-lettered by the relay", r.RelayDeadLettered)
	row("  replayed from the relay's dead letters", r.RelayReplayed)
	row("slot lag bytes", r.SlotLagBytes)
	row("lost", r.Lost)
	row("  dead letters that left the DLQ without a purge record", r.DeadLettersLost)
	row("duplicate effects", r.DuplicateEffects)
	row("marks without effect", r.MarksWithoutEffect)
	row("effects without mark", r.EffectsWithoutMark)
	row("ordering violations", r.OrderingViolations)
	if !r.Drained {
		row("drained", "no: the pipeline did not drain within --wait")
	}
	verdict := "OK: no event lost, no effect applied twice"
	switch {
	case !r.ContractKept():
		verdict = "VIOLATED"
	case !r.OK():
		verdict = "FAILED: " + strings.Join(r.Failures(), ", ")
	}
	row("verdict", verdict)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, v := range r.Violations {
		if _, err := fmt.Fprintln(w, "  -", v); err != nil {
			return err
		}
	}
	return nil
}
