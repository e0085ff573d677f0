package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/cdc/gap"
	"github.com/eventforge/eventforge/cdc/outbox"
	"github.com/eventforge/eventforge/cdc/slot"
)

type slotCmd struct {
	Status  slotStatusCmd  `cmd:"" help:"Show the replication slot: holder, confirmed/restart LSN, lag and retained WAL."`
	Drop    slotDropCmd    `cmd:"" help:"Drop the replication slot (refused while a reader streams from it)."`
	CatchUp slotCatchUpCmd `cmd:"" name:"catch-up" help:"Advance the stopped reader's slot to the WAL end when every outbox row is published (before pg_upgrade)."`
}

type slotFlags struct {
	DatabaseURL string `name:"database-url" log:"url" help:"PostgreSQL connection URL." default:"${database_url}"`
	Slot        string `name:"slot" help:"Logical replication slot." default:"${slot}"`
}

// connectPG opens one connection to the database at url.
func connectPG(env *runEnv, url string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(env.ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	return conn, nil
}

type slotStatusCmd struct {
	slotFlags
	JSON bool `name:"json" help:"Print JSON."`
}

func (c *slotStatusCmd) Run(env *runEnv) error {
	conn, err := connectPG(env, c.DatabaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(env.ctx)
	st, err := slot.ReadStatus(env.ctx, conn, c.Slot)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	holder := "none (inactive)"
	if st.ActivePID != nil {
		holder = fmt.Sprintf("pid %d", *st.ActivePID)
	}
	safe := "unlimited (max_slot_wal_keep_size = -1)"
	if st.SafeWALSizeBytes != nil {
		safe = byteSize(*st.SafeWALSizeBytes)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "slot\t%s (%s, database %s)\n", st.Slot, st.Plugin, st.Database)
	fmt.Fprintf(w, "active\t%s\n", holder)
	fmt.Fprintf(w, "current WAL\t%s\n", st.CurrentWALLSN)
	fmt.Fprintf(w, "confirmed_flush_lsn\t%s\n", st.ConfirmedFlushLSN)
	fmt.Fprintf(w, "restart_lsn\t%s\n", st.RestartLSN)
	fmt.Fprintf(w, "lag\t%s\n", byteSize(st.LagBytes))
	fmt.Fprintf(w, "retained WAL\t%s\n", byteSize(st.RetainedWALBytes))
	fmt.Fprintf(w, "wal_status\t%s\n", st.WALStatus)
	fmt.Fprintf(w, "safe WAL size\t%s\n", safe)
	return w.Flush()
}

type slotDropCmd struct {
	slotFlags
	Yes bool `name:"yes" help:"Confirm: the next reader recreates the slot and republishes the outbox rows from its checkpoint on (duplicates, no loss)."`
}

func (c *slotDropCmd) Run(env *runEnv) error {
	if !c.Yes {
		return errors.New("dropping a slot loses its position: the next reader recreates it and republishes every outbox row from its checkpoint on (consumers skip the duplicates), or refuses with --no-create-slot; pass --yes to drop it")
	}
	conn, err := connectPG(env, c.DatabaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(env.ctx)
	if err := slot.Drop(env.ctx, conn, c.Slot); err != nil {
		return err
	}
	fmt.Printf("dropped replication slot %s\n", c.Slot)
	return nil
}

type slotCatchUpCmd struct {
	slotFlags
	OutboxTable     string `name:"outbox-table" help:"Schema-qualified outbox table." default:"public.outbox"`
	DeadLetterTable string `name:"dead-letter-table" help:"Schema-qualified dead-letter table." default:"public.cdc_dead_letters"`
	CheckpointTable string `name:"checkpoint-table" help:"Schema-qualified table of the reader's slot checkpoint." default:"public.cdc_checkpoints"`
}

func (c *slotCatchUpCmd) Run(env *runEnv) error {
	var t gap.Tables
	for _, x := range []struct {
		dst  *outbox.Table
		name string
	}{{&t.Outbox, c.OutboxTable}, {&t.DeadLetters, c.DeadLetterTable}, {&t.Checkpoints, c.CheckpointTable}} {
		table, err := outbox.ParseTable(x.name)
		if err != nil {
			return err
		}
		*x.dst = table
	}
	conn, err := connectPG(env, c.DatabaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(env.ctx)
	from, to, err := gap.CatchUp(env.ctx, conn, t, c.Slot)
	if err != nil {
		return err
	}
	if to == from {
		fmt.Printf("replication slot %s is at %s: nothing to catch up\n", c.Slot, from)
		return nil
	}
	fmt.Printf("replication slot %s caught up from %s to %s: every outbox row is published\n", c.Slot, from, to)
	return nil
}

// byteSize prints n bytes with the exact count and a binary unit.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%d bytes (%.1f GiB)", n, float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d bytes (%.1f KiB)", n, float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
