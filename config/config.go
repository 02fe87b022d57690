// Package config holds a shardnode node's configuration: the Config struct,
// defaults that run on a laptop, loading with viper from a YAML file,
// SHARDNODE_* environment variables and command-line flags, and validation
// with errors that name the offending key.
//
// Every setting has a key of the form "section.key" (for example
// "node.data-dir"). Its environment variable is SHARDNODE_ followed by the key
// in upper case with dots and dashes turned into underscores (for example
// SHARDNODE_NODE_DATA_DIR). Precedence, lowest first: defaults, the config
// file, the environment, then the flags that were explicitly set.
package config

import (
	"path/filepath"
)

// Sizes used by the defaults.
const (
	// MiB is one mebibyte.
	MiB = 1 << 20
)

// Config is the whole configuration of one shardnode node.
type Config struct {
	// Node identifies this node and where it keeps its data.
	Node NodeConfig `yaml:"node" json:"node"`
	// HTTP configures the HTTP API listener.
	HTTP HTTPConfig `yaml:"http" json:"http"`
	// Raft configures the cluster-state raft group.
	Raft RaftConfig `yaml:"raft" json:"raft"`
	// NATS configures the data-plane bus.
	NATS NATSConfig `yaml:"nats" json:"nats"`
	// Cluster holds settings shared by every node of the cluster.
	Cluster ClusterConfig `yaml:"cluster" json:"cluster"`
	// Log configures logging.
	Log LogConfig `yaml:"log" json:"log"`
	// Resharding tunes the online bucket migration workers.
	Resharding ReshardingConfig `yaml:"resharding" json:"resharding"`
	// Storage tunes the document storage of the node's replicas.
	Storage StorageConfig `yaml:"storage" json:"storage"`
	// Debug holds settings for tests and fault drills.
	Debug DebugConfig `yaml:"debug" json:"debug"`
}

// StorageConfig is the "storage" section.
type StorageConfig struct {
	// DocCacheBytes is the memory, shared by every replica of the node, for
	// documents point reads found (storage.doc-cache-bytes); 0 disables the
	// cache.
	DocCacheBytes int64 `yaml:"doc-cache-bytes" json:"doc-cache-bytes"`
	// MemtableBudgetBytes is divided among the node's replicas for their
	// write buffers (storage.memtable-budget-bytes): each gets its share,
	// between 2 MiB and 32 MiB. Each replica's write-ahead log reserves
	// about 1.1 times its buffer on disk, so the budget also bounds that.
	MemtableBudgetBytes int64 `yaml:"memtable-budget-bytes" json:"memtable-budget-bytes"`
	// BlockCacheBytes is Pebble's block cache, shared by every replica of
	// the node (storage.block-cache-bytes): the blocks of keys and values
	// its reads found, uncompressed. A working set larger than it is read
	// from the files (the OS page cache) and decompressed again.
	BlockCacheBytes int64 `yaml:"block-cache-bytes" json:"block-cache-bytes"`
}

// ReshardingConfig is the "resharding" section.
type ReshardingConfig struct {
	// MigratorIntervalMs is how often (milliseconds) the documents migrator
	// sweeps for items in buckets their shard does not own, besides after
	// every ownership change (resharding.migrator-interval-ms).
	MigratorIntervalMs int64 `yaml:"migrator-interval-ms" json:"migrator-interval-ms"`
	// MaxSendBytesPerSec caps the bytes per second this node sends of the
	// buckets it moves out, over every migration at once, so that a large
	// move leaves CPU and disk to the foreground load; 0 is no limit
	// (resharding.max-send-bytes-per-sec). Only a bucket's copy while it
	// is Moving is held back, never the steps around the ownership flip,
	// where writes into the bucket wait.
	MaxSendBytesPerSec int64 `yaml:"max-send-bytes-per-sec" json:"max-send-bytes-per-sec"`
	// MaxAwaitingCleanup bounds a database's moved buckets whose source
	// cleanup is not recorded yet (OwnershipTransferred): at the bound,
	// resharding operations start no new bucket until some complete
	// (resharding.max-awaiting-cleanup; 0 is no bound). Each such bucket
	// is an entry of the database record, which every node holds and
	// every raft snapshot writes; with a source node down, a move of a
	// large range would otherwise grow it by an entry per bucket with
	// data until the node is back or removed. Read by the raft leader.
	MaxAwaitingCleanup int64 `yaml:"max-awaiting-cleanup" json:"max-awaiting-cleanup"`
}

// DebugConfig is the "debug" section.
type DebugConfig struct {
	// Failpoints pauses named steps, for fault tests: a comma-separated list
	// of name=duration, e.g. "resharding/before-cleanup=30s"
	// (debug.failpoints). Never set it in production.
	Failpoints string `yaml:"failpoints" json:"failpoints"`
	// Pprof serves Go's profiler under /debug/pprof/ on the HTTP API
	// (debug.pprof), for measuring a running node. It exposes internals:
	// enable it only where the HTTP address is trusted.
	Pprof bool `yaml:"pprof" json:"pprof"`
	// DialRewrites makes the node dial other addresses than the ones its
	// peers advertise, for its raft transport and its node-to-node HTTP: a
	// comma-separated list of from=to host:port pairs
	// (debug.dial-rewrites). Tests route every link between two nodes
	// through a proxy of their own this way, so that they can cut it.
	DialRewrites string `yaml:"dial-rewrites" json:"dial-rewrites"`
}

// NodeConfig is the "node" section.
type NodeConfig struct {
	// Tag is the node tag (node.tag): 1 to 4 uppercase letters A-Z.
	Tag string `yaml:"tag" json:"tag"`
	// DataDir is the data directory (node.data-dir).
	DataDir string `yaml:"data-dir" json:"data-dir"`
	// MaxProcs is how many goroutines run at once (Go's GOMAXPROCS) in
	// `shardnode serve` (node.max-procs); 0 leaves it to the server: the
	// GOMAXPROCS environment variable when set, else four per CPU. A
	// node's goroutines block in the kernel often (fdatasync, file reads,
	// Pebble's C allocations), and with one slot per CPU the runnable
	// ones wait meanwhile.
	MaxProcs int64 `yaml:"max-procs" json:"max-procs"`
}

// HTTPConfig is the "http" section.
type HTTPConfig struct {
	// Addr is the host:port the HTTP API listens on (http.addr).
	Addr string `yaml:"addr" json:"addr"`
	// MaxBodyBytes caps the size of a request body (http.max-body-bytes).
	MaxBodyBytes int64 `yaml:"max-body-bytes" json:"max-body-bytes"`
	// MaxDocumentBytes caps the size of one document
	// (http.max-document-bytes); it may not exceed MaxBodyBytes.
	MaxDocumentBytes int64 `yaml:"max-document-bytes" json:"max-document-bytes"`
}

// RaftConfig is the "raft" section.
type RaftConfig struct {
	// Addr is the host:port of the raft TCP transport (raft.addr).
	Addr string `yaml:"addr" json:"addr"`
	// Bootstrap (raft.bootstrap) makes a node with a fresh data directory and
	// no Join bootstrap a one-node cluster. It has no effect when Join is set
	// or the data directory already holds raft state.
	Bootstrap bool `yaml:"bootstrap" json:"bootstrap"`
	// Join is the HTTP(S) URL of an existing cluster member to join
	// (raft.join); empty means do not join.
	Join string `yaml:"join" json:"join"`
}

// NATSConfig is the "nats" section.
type NATSConfig struct {
	// URL points the node at an external NATS cluster (nats.url): one or more
	// comma-separated nats:// or tls:// URLs. Empty means run an embedded
	// NATS server.
	URL string `yaml:"url" json:"url"`
	// Listen is the client host:port of the embedded server (nats.listen).
	Listen string `yaml:"listen" json:"listen"`
	// ClusterListen is the host:port on which the embedded server accepts
	// routes from its peers (nats.cluster-listen); empty means no clustering.
	ClusterListen string `yaml:"cluster-listen" json:"cluster-listen"`
	// Routes are the peers' route URLs (nats.routes), nats-route:// or
	// nats://. In the environment or a flag they are comma-separated.
	Routes []string `yaml:"routes" json:"routes"`
	// ClusterAdvertise is the route address the embedded server gives its
	// peers to pass on to each other (nats.cluster-advertise), when they
	// must reach it at another address than ClusterListen (NAT, a proxy);
	// empty means ClusterListen.
	ClusterAdvertise string `yaml:"cluster-advertise" json:"cluster-advertise"`
}

// ClusterConfig is the "cluster" section.
type ClusterConfig struct {
	// Name is the cluster name (cluster.name); it namespaces NATS subjects
	// and names the embedded NATS cluster.
	Name string `yaml:"name" json:"name"`
}

// LogConfig is the "log" section.
type LogConfig struct {
	// Level is the minimum level logged (log.level): debug, info, warn or
	// error.
	Level string `yaml:"level" json:"level"`
	// Format is the log format (log.format): text or json.
	Format string `yaml:"format" json:"format"`
}

// Default returns the configuration used when nothing else is set: a
// one-node cluster on the loopback interface with data under
// ./shardnode-data.
func Default() Config {
	return Config{
		Node: NodeConfig{
			Tag:     "A",
			DataDir: "./shardnode-data",
		},
		HTTP: HTTPConfig{
			Addr:             "127.0.0.1:8080",
			MaxBodyBytes:     64 * MiB,
			MaxDocumentBytes: 16 * MiB,
		},
		Raft: RaftConfig{
			Addr:      "127.0.0.1:7070",
			Bootstrap: true,
			Join:      "",
		},
		NATS: NATSConfig{
			URL:           "",
			Listen:        "127.0.0.1:4222",
			ClusterListen: "",
			Routes:        nil,
		},
		Cluster: ClusterConfig{
			Name: "shardnode",
		},
		Log: LogConfig{
			Level:  "info",
			Format: "text",
		},
		Resharding: ReshardingConfig{MigratorIntervalMs: 10000, MaxAwaitingCleanup: 10000},
		Storage:    StorageConfig{DocCacheBytes: 128 * MiB, MemtableBudgetBytes: 256 * MiB, BlockCacheBytes: 256 * MiB},
	}
}

// RaftDir is the directory for the raft log, stable store and snapshots:
// <data-dir>/raft.
func (c *Config) RaftDir() string { return filepath.Join(c.Node.DataDir, "raft") }

// NATSDir is the embedded NATS server's JetStream store directory:
// <data-dir>/nats.
func (c *Config) NATSDir() string { return filepath.Join(c.Node.DataDir, "nats") }

// DatabasesDir is the directory that holds the databases' shard replicas:
// <data-dir>/databases.
func (c *Config) DatabasesDir() string { return filepath.Join(c.Node.DataDir, "databases") }

// field ties a key to the Config field that holds it and, optionally, to a
// command-line flag. ptr is a *string, *bool, *int64 or *[]string.
type field struct {
	key   string
	flag  string
	ptr   any
	usage string
}

// fields lists every key, in a stable order, with pointers into c.
func (c *Config) fields() []field {
	return []field{
		{"node.tag", "tag", &c.Node.Tag, "node tag: 1 to 4 uppercase letters A-Z"},
		{"node.data-dir", "data-dir", &c.Node.DataDir, "data directory"},
		{"node.max-procs", "", &c.Node.MaxProcs, "goroutines running at once (GOMAXPROCS) in serve; 0 is the GOMAXPROCS environment variable, else four per CPU"},
		{"http.addr", "http-addr", &c.HTTP.Addr, "host:port of the HTTP API"},
		{"http.max-body-bytes", "", &c.HTTP.MaxBodyBytes, "maximum request body size in bytes"},
		{"http.max-document-bytes", "", &c.HTTP.MaxDocumentBytes, "maximum document size in bytes"},
		{"raft.addr", "raft-addr", &c.Raft.Addr, "host:port of the raft transport"},
		{"raft.bootstrap", "bootstrap", &c.Raft.Bootstrap, "bootstrap a one-node cluster when the data dir is fresh and no join is given"},
		{"raft.join", "join", &c.Raft.Join, "HTTP URL of an existing cluster member to join"},
		{"nats.url", "nats-url", &c.NATS.URL, "comma-separated nats:// or tls:// URLs of an external NATS cluster; empty runs an embedded server"},
		{"nats.listen", "nats-listen", &c.NATS.Listen, "host:port for clients of the embedded NATS server"},
		{"nats.cluster-listen", "nats-cluster-listen", &c.NATS.ClusterListen, "host:port for routes between embedded NATS servers; empty disables clustering"},
		{"nats.routes", "nats-routes", &c.NATS.Routes, "comma-separated nats-route:// URLs of the peers' embedded NATS servers"},
		{"nats.cluster-advertise", "", &c.NATS.ClusterAdvertise, "host:port peers pass on to each other to reach this node's routes; empty is nats.cluster-listen"},
		{"cluster.name", "cluster-name", &c.Cluster.Name, "cluster name"},
		{"log.level", "log-level", &c.Log.Level, "log level: debug, info, warn or error"},
		{"log.format", "log-format", &c.Log.Format, "log format: text or json"},
		{"resharding.migrator-interval-ms", "", &c.Resharding.MigratorIntervalMs, "documents migrator sweep interval in milliseconds"},
		{"resharding.max-send-bytes-per-sec", "", &c.Resharding.MaxSendBytesPerSec, "bytes per second this node sends of the buckets it moves out, all migrations together; 0 is no limit"},
		{"resharding.max-awaiting-cleanup", "", &c.Resharding.MaxAwaitingCleanup, "moved buckets of a database that may wait for their source cleanup before operations start no new bucket; 0 is no bound"},
		{"debug.failpoints", "", &c.Debug.Failpoints, "fault-test pauses: name=duration,... (never in production)"},
		{"debug.pprof", "pprof", &c.Debug.Pprof, "serve Go's profiler under /debug/pprof/ on the HTTP address"},
		{"debug.dial-rewrites", "", &c.Debug.DialRewrites, "from=to,... host:port pairs: peers' raft and HTTP addresses this node dials elsewhere (fault tests cut links this way)"},
		{"storage.doc-cache-bytes", "", &c.Storage.DocCacheBytes, "memory for documents point reads found, shared by the node's replicas; 0 disables it"},
		{"storage.memtable-budget-bytes", "", &c.Storage.MemtableBudgetBytes, "write buffers of the node's replicas, divided among them (2 to 32 MiB each)"},
		{"storage.block-cache-bytes", "", &c.Storage.BlockCacheBytes, "Pebble's block cache, shared by the node's replicas (at least 8MiB)"},
	}
}

// Keys returns every configuration key ("section.key"), in a stable order.
func Keys() []string {
	var c Config
	fs := c.fields()
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = f.key
	}
	return keys
}
