package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/eventforge/eventforge/verify"
)

type verifyCmd struct {
	verify.Config `embed:""`
	JSON          bool `name:"json" help:"Print the report as one JSON object."`
	kafkaFlags
}

// Run audits durable state and exits 1 when the delivery contract is
// violated, when events stay unpublished beyond --grace, when events wait
// in the relay's dead-letter table for `eventforge outbox dead-letters
// replay`, or when the pipeline did not drain within --wait.
func (c *verifyCmd) Run(env *runEnv) error {
	rep, err := verify.Run(env.ctx, c.Config)
	if err != nil {
		return err
	}
	if c.JSON {
		err = rep.WriteJSON(os.Stdout)
	} else {
		err = rep.WriteTable(os.Stdout)
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("audit failed: %s", strings.Join(rep.Failures(), ", "))
	}
	return nil
}
