package testcluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/node"
)

// Mode says how members run.
type Mode int

const (
	// InProcess runs every node inside the test process.
	InProcess Mode = iota
	// Processes runs every node as a child process of the built binary.
	Processes
)

// Options shape a cluster.
type Options struct {
	// Nodes is the member count (default 3).
	Nodes int
	// Mode picks in-process nodes or child processes.
	Mode Mode
	// ExternalNATS runs one nats-server process and points every node at
	// it (nats.url) instead of embedding servers.
	ExternalNATS bool
	// Verbose sends node logs to stderr (in-process) or keeps them in each
	// member's node.log (processes, always). SHARDNODE_TEST_VERBOSE=1 in
	// the environment sets it for every cluster a test run starts.
	Verbose bool
	// Failpoints is debug.failpoints for every node (fault tests).
	Failpoints string
	// MigratorInterval is resharding.migrator-interval-ms (0: default).
	MigratorIntervalMs int64
	// MaxSendBytesPerSec is resharding.max-send-bytes-per-sec (0: no
	// limit).
	MaxSendBytesPerSec int64
	// MaxAwaitingCleanup is resharding.max-awaiting-cleanup (0: the
	// default).
	MaxAwaitingCleanup int64
	// CuttableLinks routes every link between two members (raft, the
	// embedded NATS servers' routes, node-to-node HTTP) through a proxy
	// of the test's own, so that Cut, Isolate and Heal can break and
	// restore it. Not with ExternalNATS.
	CuttableLinks bool
}

// Cluster is a running test cluster.
type Cluster struct {
	t       testing.TB
	opts    Options
	dir     string
	natsURL string
	nats    *exec.Cmd
	links   *links
	Members []*Member
}

// Member is one node of the cluster, with ports fixed for its lifetime.
type Member struct {
	c               *Cluster
	Tag             string
	Dir             string
	HTTPPort        int
	RaftPort        int
	NATSPort        int
	NATSClusterPort int
	mu              sync.Mutex
	inproc          *node.Node
	proc            *exec.Cmd
	exited          chan struct{}
}

// Start starts a cluster and waits until every member serves and sees
// all the others.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if os.Getenv("SHARDNODE_TEST_VERBOSE") == "1" {
		opts.Verbose = true
	}
	c := &Cluster{t: t, opts: opts, dir: t.TempDir()}
	if opts.ExternalNATS {
		c.startNATS()
	}
	for i := 0; i < opts.Nodes; i++ {
		tag := string(rune('A' + i))
		m := &Member{c: c, Tag: tag, Dir: filepath.Join(c.dir, tag), HTTPPort: freePort(t), RaftPort: freePort(t), NATSPort: freePort(t), NATSClusterPort: freePort(t)}
		c.Members = append(c.Members, m)
	}
	if opts.CuttableLinks {
		if opts.ExternalNATS {
			t.Fatal("CuttableLinks needs the embedded NATS servers")
		}
		// Before c.Close's cleanup, so that it runs after it: the nodes
		// stop while their links still work.
		c.startLinks()
	}
	t.Cleanup(c.Close)
	for _, m := range c.Members {
		m.Start()
	}
	c.WaitMembers(len(c.Members))
	return c
}

// URL is member i's HTTP base URL.
func (c *Cluster) URL(i int) string { return c.Members[i].URL() }

// URL is the member's HTTP base URL.
func (m *Member) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", m.HTTPPort) }

// config is the member's node configuration.
func (m *Member) config() config.Config {
	cfg := config.Default()
	cfg.Node.Tag = m.Tag
	cfg.Node.DataDir = m.Dir
	cfg.HTTP.Addr = addr(m.HTTPPort)
	cfg.Raft.Addr = addr(m.RaftPort)
	cfg.Cluster.Name = "test"
	if m.c.natsURL != "" {
		cfg.NATS.URL = m.c.natsURL
	} else {
		cfg.NATS.Listen = addr(m.NATSPort)
		cfg.NATS.ClusterListen = addr(m.NATSClusterPort)
		for _, o := range m.c.Members {
			if o != m {
				cfg.NATS.Routes = append(cfg.NATS.Routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.NATSClusterPort))
			}
		}
	}
	if l := m.c.links; l != nil {
		i := m.index()
		cfg.NATS.Routes = nil
		var rewrites []string
		for j, o := range m.c.Members {
			if j == i {
				continue
			}
			ml := l.out[i][j]
			cfg.NATS.Routes = append(cfg.NATS.Routes, "nats-route://"+ml.nats.addr())
			rewrites = append(rewrites, addr(o.RaftPort)+"="+ml.raft.addr(), addr(o.HTTPPort)+"="+ml.http.addr())
		}
		cfg.NATS.ClusterAdvertise = l.advertise[i].addr()
		cfg.Debug.DialRewrites = strings.Join(rewrites, ",")
	}
	cfg.Debug.Failpoints = m.c.opts.Failpoints
	if m.c.opts.MigratorIntervalMs > 0 {
		cfg.Resharding.MigratorIntervalMs = m.c.opts.MigratorIntervalMs
	}
	cfg.Resharding.MaxSendBytesPerSec = m.c.opts.MaxSendBytesPerSec
	if m.c.opts.MaxAwaitingCleanup > 0 {
		cfg.Resharding.MaxAwaitingCleanup = m.c.opts.MaxAwaitingCleanup
	}
	if m != m.c.Members[0] {
		cfg.Raft.Bootstrap = false
		cfg.Raft.Join = m.c.Members[0].URL()
	}
	return cfg
}

// index is the member's position in the cluster.
func (m *Member) index() int {
	for i, o := range m.c.Members {
		if o == m {
			return i
		}
	}
	panic("member " + m.Tag + " is not in its cluster")
}

// Start starts (or restarts) the member and waits until it serves.
func (m *Member) Start() {
	t := m.c.t
	t.Helper()
	if m.c.opts.Mode == Processes {
		m.startProcess()
	} else {
		m.startInProcess()
	}
	WaitFor(t, 60*time.Second, "node "+m.Tag+" to serve", func() error {
		_, err := Expect(200, "GET", m.URL()+"/healthz", "")
		return err
	})
}

func (m *Member) startInProcess() {
	cfg := m.config()
	var logger *slog.Logger
	if m.c.opts.Verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := node.Start(ctx, &cfg, logger)
	if err != nil {
		m.c.t.Fatalf("start node %s: %v", m.Tag, err)
	}
	m.mu.Lock()
	m.inproc = n
	m.mu.Unlock()
}

// StartInProcess starts the member in this process and returns the error
// node.Start returned, if any, instead of failing the test: for tests of
// start-up refusals. ctx bounds the start; tweak changes the member's
// configuration for this start only.
func (m *Member) StartInProcess(ctx context.Context, tweak ...func(*config.Config)) error {
	cfg := m.config()
	for _, f := range tweak {
		f(&cfg)
	}
	n, err := node.Start(ctx, &cfg, nil)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.inproc = n
	m.mu.Unlock()
	return nil
}

func (m *Member) startProcess() {
	cfg := m.config()
	args := []string{"serve",
		"--tag", cfg.Node.Tag, "--data-dir", cfg.Node.DataDir,
		"--http-addr", cfg.HTTP.Addr, "--raft-addr", cfg.Raft.Addr,
		"--cluster-name", cfg.Cluster.Name,
		fmt.Sprintf("--bootstrap=%v", cfg.Raft.Bootstrap),
	}
	if cfg.Raft.Join != "" {
		args = append(args, "--join", cfg.Raft.Join)
	}
	if cfg.NATS.URL != "" {
		args = append(args, "--nats-url", cfg.NATS.URL)
	} else {
		args = append(args, "--nats-listen", cfg.NATS.Listen, "--nats-cluster-listen", cfg.NATS.ClusterListen,
			"--nats-routes", strings.Join(cfg.NATS.Routes, ","))
	}
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		m.c.t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(m.Dir, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		m.c.t.Fatal(err)
	}
	cmd := exec.Command(Binary(m.c.t), args...)
	cmd.Env = append(os.Environ(), "SHARDNODE_DEBUG_FAILPOINTS="+cfg.Debug.Failpoints,
		"SHARDNODE_DEBUG_DIAL_REWRITES="+cfg.Debug.DialRewrites, "SHARDNODE_NATS_CLUSTER_ADVERTISE="+cfg.NATS.ClusterAdvertise,
		fmt.Sprintf("SHARDNODE_RESHARDING_MIGRATOR_INTERVAL_MS=%d", cfg.Resharding.MigratorIntervalMs),
		fmt.Sprintf("SHARDNODE_RESHARDING_MAX_AWAITING_CLEANUP=%d", cfg.Resharding.MaxAwaitingCleanup))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		m.c.t.Fatalf("start node %s: %v", m.Tag, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	m.mu.Lock()
	m.proc, m.exited = cmd, exited
	m.mu.Unlock()
}

// Running reports whether the member is up (not stopped or killed).
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inproc != nil || m.proc != nil
}

// Kill ends the member at once: SIGKILL for a process; for an in-process
// node, the closest thing (Close without grace is not possible in-process,
// so it closes it).
func (m *Member) Kill() {
	m.mu.Lock()
	p, exited, n := m.proc, m.exited, m.inproc
	m.proc, m.inproc = nil, nil
	m.mu.Unlock()
	if p != nil {
		_ = p.Process.Signal(syscall.SIGKILL)
		<-exited
	}
	if n != nil {
		_ = n.Close()
	}
}

// Stop ends the member gracefully (SIGTERM, or Close in-process).
func (m *Member) Stop() {
	m.mu.Lock()
	p, exited, n := m.proc, m.exited, m.inproc
	m.proc, m.inproc = nil, nil
	m.mu.Unlock()
	if p != nil {
		_ = p.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = p.Process.Signal(syscall.SIGKILL)
			<-exited
		}
	}
	if n != nil {
		_ = n.Close()
	}
}

// Pause freezes a member process (SIGSTOP) and returns once every thread
// of it has stopped; Resume thaws it. The kernel stops a process only when
// one of its threads runs to take the signal, which on a loaded machine
// can be milliseconds after kill returns: a request sent in that gap would
// still be served by the "frozen" node.
func (m *Member) Pause() {
	m.signal(syscall.SIGSTOP)
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for !stopped(p.Process.Pid) {
		if time.Now().After(deadline) {
			m.c.t.Fatalf("node %s: not stopped 10 s after SIGSTOP", m.Tag)
		}
		time.Sleep(time.Millisecond)
	}
}

// stopped reports whether every thread of process pid is in the stopped
// state (T) according to /proc. Where /proc cannot be read it reports true:
// there is nothing better to wait on.
func stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // the thread ended
		}
		// The state follows the command name, which is in parentheses
		// and may itself hold spaces or parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return true
		}
		if st := b[i+2]; st != 'T' && st != 't' {
			return false
		}
	}
	return true
}

// Resume continues a paused member process (SIGCONT).
func (m *Member) Resume() { m.signal(syscall.SIGCONT) }

func (m *Member) signal(sig syscall.Signal) {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		m.c.t.Fatalf("node %s: signals need a process member", m.Tag)
	}
	_ = p.Process.Signal(sig)
}

// Log returns the tail of a process member's log, for failure messages.
func (m *Member) Log() string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, "node.log"))
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// Close stops every member and the external NATS server.
func (c *Cluster) Close() {
	for _, m := range c.Members {
		m.Resume2()
		m.Stop()
	}
	if c.nats != nil {
		_ = c.nats.Process.Signal(syscall.SIGKILL)
		_ = c.nats.Wait()
	}
	if c.t.Failed() && c.opts.Mode == Processes {
		for _, m := range c.Members {
			c.t.Logf("--- node %s log tail ---\n%s", m.Tag, m.Log())
		}
	}
}

// Resume2 thaws a possibly paused process without failing (for cleanup).
func (m *Member) Resume2() {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p != nil {
		_ = p.Process.Signal(syscall.SIGCONT)
	}
}

// WaitMembers waits until every running member's /cluster lists want
// nodes and names a leader.
func (c *Cluster) WaitMembers(want int) {
	c.t.Helper()
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		WaitFor(c.t, 60*time.Second, "node "+m.Tag+" to see the cluster", func() error {
			r, err := Expect(200, "GET", m.URL()+"/cluster", "")
			if err != nil {
				return err
			}
			cl := r.JSON(c.t)
			if cl["Leader"] == "" || len(cl["Nodes"].([]any)) != want {
				return fmt.Errorf("cluster view %s", r.Body)
			}
			return nil
		})
	}
}

// WaitAllUp waits until every running member's /cluster shows every
// running member Up: after a partition heals, until the nodes hear each
// other's heartbeats again over the bus.
func (c *Cluster) WaitAllUp() {
	c.t.Helper()
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		WaitFor(c.t, 60*time.Second, "node "+m.Tag+" to see every running node up", func() error {
			r, err := Expect(200, "GET", m.URL()+"/cluster", "")
			if err != nil {
				return err
			}
			for _, n := range r.JSON(c.t)["Nodes"].([]any) {
				nm := n.(map[string]any)
				for _, o := range c.Members {
					if o.Tag == nm["Tag"] && o.Running() && nm["Status"] != "Up" {
						return fmt.Errorf("node %s sees %s %v", m.Tag, o.Tag, nm["Status"])
					}
				}
			}
			return nil
		})
	}
}

// Leader returns the index of the member that is raft leader.
func (c *Cluster) Leader() int {
	c.t.Helper()
	var leader int
	WaitFor(c.t, 30*time.Second, "a leader", func() error {
		for i, m := range c.Members {
			if !m.Running() {
				continue
			}
			r, err := Expect(200, "GET", m.URL()+"/cluster", "")
			if err != nil {
				continue
			}
			tag, _ := r.JSON(c.t)["Leader"].(string)
			for j, o := range c.Members {
				if o.Tag == tag && o.Running() {
					leader = j
					return nil
				}
			}
			_ = i
		}
		return fmt.Errorf("no running member names a running leader")
	})
	return leader
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds cmd/shardnode once per test binary and returns its path.
func Binary(t testing.TB) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "shardnode-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "shardnode")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/shardnode/shardnode/cmd/shardnode").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build shardnode: %v", buildErr)
	}
	return binPath
}

// startNATS runs one nats-server process (built from the nats-server
// module) on a free port.
func (c *Cluster) startNATS() {
	bin := natsBinary(c.t)
	port := freePort(c.t)
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(port))
	logf, _ := os.Create(filepath.Join(c.dir, "nats-server.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start nats-server: %v", err)
	}
	c.nats = cmd
	c.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	WaitFor(c.t, 30*time.Second, "nats-server to listen", func() error {
		conn, err := dialTCP(addr(port))
		if err != nil {
			return err
		}
		r := bufio.NewReader(conn)
		line, err := r.ReadString('\n')
		conn.Close()
		if err != nil || !strings.HasPrefix(line, "INFO") {
			return fmt.Errorf("no INFO from nats-server: %q %v", line, err)
		}
		return nil
	})
}

var (
	natsOnce sync.Once
	natsPath string
	natsErr  error
)

// natsBinary builds the nats-server command from the module once.
func natsBinary(t testing.TB) string {
	natsOnce.Do(func() {
		if p, err := exec.LookPath("nats-server"); err == nil {
			natsPath = p
			return
		}
		dir, err := os.MkdirTemp("", "nats-server-bin-")
		if err != nil {
			natsErr = err
			return
		}
		natsPath = filepath.Join(dir, "nats-server")
		out, err := exec.Command("go", "build", "-o", natsPath, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			natsErr = fmt.Errorf("go build nats-server: %v\n%s", err, out)
		}
	})
	if natsErr != nil {
		t.Fatalf("nats-server binary: %v", natsErr)
	}
	return natsPath
}
