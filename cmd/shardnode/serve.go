package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/node"
)

func newServeCmd() *cobra.Command {
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a shardnode node",
		Long: `Run a shardnode node until SIGINT or SIGTERM.

With no flags it runs a one-node cluster: tag A, data in ./shardnode-data,
HTTP on 127.0.0.1:8080, raft on 127.0.0.1:7070, an embedded NATS server on
127.0.0.1:4222. A new data directory bootstraps a new cluster; an existing
one restarts with its state.

Configuration comes from defaults, a YAML file (--config), environment
variables SHARDNODE_<SECTION>_<KEY> (e.g. SHARDNODE_HTTP_ADDR) and flags,
each overriding the one before.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(cmd.Flags())
			if err != nil {
				return err
			}
			logger := newLogger(cfg)
			setSchedulerProcs(cfg.Node.MaxProcs, logger)
			if cpuProfile != "" {
				stopProfile, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stopProfile()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			n, err := node.Start(ctx, cfg, logger)
			if err != nil {
				return fmt.Errorf("start node: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "shardnode node %s serving on %s (data in %s)\n", cfg.Node.Tag, n.HTTPURL(), cfg.Node.DataDir)
			<-ctx.Done()
			logger.Info("shutting down")
			return n.Close()
		},
	}
	config.BindFlags(cmd.Flags())
	// For `shardnode bench`, which runs its node as a child process: the
	// node's own CPU profile, from start to shutdown.
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the node, from start to shutdown, to FILE")
	_ = cmd.Flags().MarkHidden("cpuprofile")
	cmd.SetContext(context.Background())
	return cmd
}

func newLogger(cfg *config.Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
