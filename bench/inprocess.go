package bench

import (
	"context"
	"log/slog"

	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/node"
)

// startNode starts a one-node cluster with its data in dir, on random
// loopback ports.
func startNode(ctx context.Context, dir string, logger *slog.Logger) (*node.Node, error) {
	cfg := config.Default()
	cfg.Node.DataDir = dir
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Raft.Addr = "127.0.0.1:0"
	cfg.NATS.Listen = "127.0.0.1:0"
	return node.Start(ctx, &cfg, logger)
}
