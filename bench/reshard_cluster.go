package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/freeport"
	"github.com/shardnode/shardnode/node"
)

// reshardNodes is the size of the local cluster the resharding rows start.
const reshardNodes = 3

// benchCluster is a local cluster of nodes with clustered embedded NATS
// servers, its data in a temporary directory: nodes in this process, or
// child processes (`shardnode serve`) when the run has a Binary.
type benchCluster struct {
	dir   string
	nodes []*node.Node
	procs []*childProc
	urls  []string
}

// startCluster starts reshardNodes nodes in dir, as child processes of
// binary when it is set: A bootstraps, the others join it; every embedded
// NATS server routes to the others. It returns once every node's /cluster
// lists them all and names a leader.
func startCluster(ctx context.Context, hc *http.Client, dir, binary string, logger *slog.Logger) (*benchCluster, error) {
	routes, err := freeport.Take(reshardNodes)
	if err != nil {
		return nil, err
	}
	c := &benchCluster{dir: dir}
	for i := range reshardNodes {
		tag := string(rune('A' + i))
		cfg := config.Default()
		cfg.Node.Tag = tag
		cfg.Node.DataDir = filepath.Join(dir, tag)
		cfg.HTTP.Addr = "127.0.0.1:0"
		cfg.Raft.Addr = "127.0.0.1:0"
		cfg.NATS.Listen = "127.0.0.1:0"
		cfg.NATS.ClusterListen = fmt.Sprintf("127.0.0.1:%d", routes[i])
		for j, p := range routes {
			if j != i {
				cfg.NATS.Routes = append(cfg.NATS.Routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		cfg.Cluster.Name = "benchreshard"
		if i > 0 {
			cfg.Raft.Bootstrap = false
			cfg.Raft.Join = c.urls[0]
		}
		if binary != "" {
			p, url, err := startClusterChild(ctx, hc, binary, &cfg)
			if err != nil {
				c.close()
				return nil, fmt.Errorf("start node %s: %w", tag, err)
			}
			c.procs = append(c.procs, p)
			c.urls = append(c.urls, url)
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		n, err := node.Start(sctx, &cfg, logger)
		cancel()
		if err != nil {
			c.close()
			return nil, fmt.Errorf("start node %s: %w", tag, err)
		}
		c.nodes = append(c.nodes, n)
		c.urls = append(c.urls, n.HTTPURL())
	}
	for _, u := range c.urls {
		err := waitUntil(ctx, 60*time.Second, func() error {
			var cl struct {
				Leader string
				Nodes  []json.RawMessage
			}
			if err := getJSON(ctx, hc, u+"/cluster", &cl); err != nil {
				return err
			}
			if cl.Leader == "" || len(cl.Nodes) != reshardNodes {
				return fmt.Errorf("%s/cluster: leader %q, %d nodes", u, cl.Leader, len(cl.Nodes))
			}
			return nil
		})
		if err != nil {
			c.close()
			return nil, fmt.Errorf("cluster of %d: %w", reshardNodes, err)
		}
	}
	return c, nil
}

// close stops the nodes, the joiners first, and deletes the data.
func (c *benchCluster) close() error {
	var errs []error
	for i := len(c.nodes) - 1; i >= 0; i-- {
		errs = append(errs, c.nodes[i].Close())
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		errs = append(errs, c.procs[i].stop())
	}
	c.nodes, c.procs = nil, nil
	errs = append(errs, os.RemoveAll(c.dir))
	return errors.Join(errs...)
}

// startClusterChild runs cfg's node as `binary serve` (see startServe).
func startClusterChild(ctx context.Context, hc *http.Client, binary string, cfg *config.Config) (*childProc, string, error) {
	extra := []string{"--tag", cfg.Node.Tag, "--cluster-name", cfg.Cluster.Name,
		"--nats-cluster-listen", cfg.NATS.ClusterListen, "--nats-routes", strings.Join(cfg.NATS.Routes, ","),
		fmt.Sprintf("--bootstrap=%v", cfg.Raft.Bootstrap)}
	if cfg.Raft.Join != "" {
		extra = append(extra, "--join", cfg.Raft.Join)
	}
	return startServe(ctx, hc, binary, "node "+cfg.Node.Tag, cfg.Node.DataDir, extra)
}

// waitUntil calls cond every 50 ms until it returns nil, and fails with its
// last error after timeout.
func waitUntil(ctx context.Context, timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// getJSON GETs url and decodes its 200 answer into v.
func getJSON(ctx context.Context, hc *http.Client, url string, v any) error {
	var buf bytes.Buffer
	if err := do(ctx, hc, http.MethodGet, url, nil, http.StatusOK, &buf); err != nil {
		return err
	}
	return json.Unmarshal(buf.Bytes(), v)
}

// sendJSON sends body with method, fails unless the status is want, and
// decodes the answer into v (if not nil).
func sendJSON(ctx context.Context, hc *http.Client, method, url string, body []byte, want int, v any) error {
	var buf bytes.Buffer
	if err := do(ctx, hc, method, url, body, want, &buf); err != nil {
		return err
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(buf.Bytes(), v)
}
