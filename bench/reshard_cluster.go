package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/node"
)

// reshardNodes is the size of the local cluster the resharding rows start.
const reshardNodes = 3

// benchCluster is a local cluster of in-process nodes with clustered
// embedded NATS servers, its data in a temporary directory.
type benchCluster struct {
	dir   string
	nodes []*node.Node
	urls  []string
}

// startCluster starts reshardNodes nodes in dir: A bootstraps, the others
// join it; every embedded NATS server routes to the others. It returns
// once every node's /cluster lists them all and names a leader.
func startCluster(ctx context.Context, hc *http.Client, dir string, logger *slog.Logger) (*benchCluster, error) {
	routes, err := freePorts(reshardNodes)
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
	c.nodes = nil
	errs = append(errs, os.RemoveAll(c.dir))
	return errors.Join(errs...)
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago, drawn below the kernel's ephemeral range: a port handed out for
// ":0" is also a candidate source port for every outgoing connection on
// the machine, so between picking it and the node binding it a client
// could take it. All n stay bound until all are picked, so none repeats.
func freePorts(n int) ([]int, error) {
	lo := ephemeralLow()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n && tries < 1000; tries++ {
		p := 10000 + rand.IntN(lo-10000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use (or one of ours already)
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("pick %d free ports: found %d in 10000..%d", n, len(ports), lo-1)
	}
	return ports, nil
}

// ephemeralLow is the lowest port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 11000 {
		return 32768
	}
	return lo
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
