package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// newBucketsCancelCmd returns `shardnode buckets cancel`.
func newBucketsCancelCmd() *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "cancel --db DB --id OP",
		Short: "Stop a resharding operation from moving more buckets",
		Long: `Cancel a running resharding operation: it starts no more bucket
migrations. A bucket already migrating finishes its move (stopping it half
way would leave its documents on two shards), so every bucket of the range
ends either where it was or on the target shard. The command prints the
operation as it is after the cancel; "buckets status --id OP" shows the last
migration finishing, and "buckets status --id OP --follow" waits for it and
prints the final figures.`,
		Example: `  shardnode buckets cancel --db shop --id 3f9c2a1b7d4e5f60`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.id == "" {
				return errors.New("--id is required: the operation to cancel (see \"buckets status\")")
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			b, err := c.send(cmd.Context(), "DELETE", dbPath(f.db, "resharding", f.id), nil, nil)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(cmd.OutOrStdout(), b)
			}
			var op operation
			if err := json.Unmarshal(b, &op); err != nil {
				return fmt.Errorf("decode operation: %w", err)
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), renderOperation(op, time.Now()))
			return err
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&f.id, "id", "", "the operation to cancel")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the node's JSON answer as is")
	return cmd
}
