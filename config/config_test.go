package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// writeFile writes content to name in a fresh temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// env returns a lookup function over a fixed map.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// flags returns a flag set with BindFlags applied and args parsed.
func flags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("shardnode", pflag.ContinueOnError)
	BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

// clearEnv makes sure no SHARDNODE_* variable from the outside leaks into a
// test that reads the process environment.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, EnvPrefix+"_") {
			t.Setenv(name, "")
		}
	}
}

func mustLoad(t *testing.T, file string, lookup func(string) (string, bool), fs *pflag.FlagSet) *Config {
	t.Helper()
	c, err := LoadFrom(file, lookup, fs)
	if err != nil {
		t.Fatalf("LoadFrom: %v", err)
	}
	return c
}

// wantKeyError checks that err contains an *Error for key whose text
// mentions the key.
func wantKeyError(t *testing.T, err error, key string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error naming %s, got nil", key)
	}
	if !strings.Contains(err.Error(), "config: "+key) {
		t.Fatalf("error does not name %s: %v", key, err)
	}
	found := false
	for _, e := range flattenErrors(err) {
		var ke *Error
		if errors.As(e, &ke) && ke.Key == key {
			found = true
		}
	}
	if !found {
		t.Fatalf("no *Error with Key %q in %v", key, err)
	}
}

func flattenErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flattenErrors(e)...)
		}
		return out
	}
	return []error{err}
}

func TestDefaults(t *testing.T) {
	d := Default()
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	want := Config{
		Node:       NodeConfig{Tag: "A", DataDir: "./shardnode-data"},
		HTTP:       HTTPConfig{Addr: "127.0.0.1:8080", MaxBodyBytes: 64 << 20, MaxDocumentBytes: 16 << 20},
		Raft:       RaftConfig{Addr: "127.0.0.1:7070", Bootstrap: true},
		NATS:       NATSConfig{Listen: "127.0.0.1:4222"},
		Cluster:    ClusterConfig{Name: "shardnode"},
		Log:        LogConfig{Level: "info", Format: "text"},
		Resharding: ReshardingConfig{MigratorIntervalMs: 10000, MaxAwaitingCleanup: 10000},
		Storage:    StorageConfig{DocCacheBytes: 128 << 20, MemtableBudgetBytes: 256 << 20, BlockCacheBytes: 256 << 20},
	}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("Default() = %+v, want %+v", d, want)
	}

	// Loading with nothing set gives the defaults, with or without flags.
	for _, fs := range []*pflag.FlagSet{nil, flags(t)} {
		c := mustLoad(t, "", env(nil), fs)
		if !reflect.DeepEqual(*c, want) {
			t.Fatalf("Load with nothing set = %+v, want %+v", *c, want)
		}
	}
}

func TestLoadProcessEnvDefaults(t *testing.T) {
	clearEnv(t)
	c, err := Load(flags(t))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*c, Default()) {
		t.Fatalf("Load() = %+v, want defaults", *c)
	}
}

func TestDirs(t *testing.T) {
	c := Default()
	c.Node.DataDir = "/var/lib/shardnode"
	if got := c.RaftDir(); got != filepath.Join("/var/lib/shardnode", "raft") {
		t.Errorf("RaftDir = %q", got)
	}
	if got := c.NATSDir(); got != filepath.Join("/var/lib/shardnode", "nats") {
		t.Errorf("NATSDir = %q", got)
	}
	if got := c.DatabasesDir(); got != filepath.Join("/var/lib/shardnode", "databases") {
		t.Errorf("DatabasesDir = %q", got)
	}
}

const fullYAML = `
node:
  tag: BC
  data-dir: /data/b
http:
  addr: 0.0.0.0:9090
  max-body-bytes: 1048576
  max-document-bytes: 4KiB
raft:
  addr: 10.0.0.2:7071
  bootstrap: false
  join: http://10.0.0.1:8080
nats:
  listen: 10.0.0.2:4223
  cluster-listen: 10.0.0.2:6222
  routes:
    - nats-route://10.0.0.1:6222
    - nats-route://10.0.0.3:6222
cluster:
  name: prod-1
log:
  level: debug
  format: json
`

func TestFileOnly(t *testing.T) {
	p := writeFile(t, "shardnode.yaml", fullYAML)
	c := mustLoad(t, p, env(nil), nil)
	want := Config{
		Node:       NodeConfig{Tag: "BC", DataDir: "/data/b"},
		HTTP:       HTTPConfig{Addr: "0.0.0.0:9090", MaxBodyBytes: 1 << 20, MaxDocumentBytes: 4 << 10},
		Raft:       RaftConfig{Addr: "10.0.0.2:7071", Bootstrap: false, Join: "http://10.0.0.1:8080"},
		NATS:       NATSConfig{Listen: "10.0.0.2:4223", ClusterListen: "10.0.0.2:6222", Routes: []string{"nats-route://10.0.0.1:6222", "nats-route://10.0.0.3:6222"}},
		Cluster:    ClusterConfig{Name: "prod-1"},
		Log:        LogConfig{Level: "debug", Format: "json"},
		Resharding: ReshardingConfig{MigratorIntervalMs: 10000, MaxAwaitingCleanup: 10000},
		Storage:    StorageConfig{DocCacheBytes: 128 << 20, MemtableBudgetBytes: 256 << 20, BlockCacheBytes: 256 << 20},
	}
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("got  %+v\nwant %+v", *c, want)
	}
}

func TestPartialFileKeepsDefaults(t *testing.T) {
	p := writeFile(t, "c.yml", "node:\n  tag: Q\n")
	c := mustLoad(t, p, env(nil), nil)
	want := Default()
	want.Node.Tag = "Q"
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("got %+v, want %+v", *c, want)
	}
}

func TestConfigFileFromFlagAndEnv(t *testing.T) {
	p := writeFile(t, "c.yaml", "node:\n  tag: F\n")
	c := mustLoad(t, "", env(nil), flags(t, "--config", p))
	if c.Node.Tag != "F" {
		t.Fatalf("--config: tag = %q, want F", c.Node.Tag)
	}
	c = mustLoad(t, "", env(map[string]string{ConfigFileEnv: p}), flags(t))
	if c.Node.Tag != "F" {
		t.Fatalf("%s: tag = %q, want F", ConfigFileEnv, c.Node.Tag)
	}
	// --config wins over SHARDNODE_CONFIG.
	other := writeFile(t, "o.yaml", "node:\n  tag: O\n")
	c = mustLoad(t, "", env(map[string]string{ConfigFileEnv: other}), flags(t, "--config", p))
	if c.Node.Tag != "F" {
		t.Fatalf("--config and %s: tag = %q, want F", ConfigFileEnv, c.Node.Tag)
	}
}

func TestMissingFile(t *testing.T) {
	_, err := LoadFrom(filepath.Join(t.TempDir(), "nope.yaml"), env(nil), nil)
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("want an error naming the missing file, got %v", err)
	}
}

func TestBadYAML(t *testing.T) {
	p := writeFile(t, "bad.yaml", "node: [\n")
	_, err := LoadFrom(p, env(nil), nil)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Fatalf("want a parse error naming the file, got %v", err)
	}
}

func TestEnvOverridesFile(t *testing.T) {
	p := writeFile(t, "c.yaml", fullYAML)
	clearEnv(t)
	t.Setenv("SHARDNODE_NODE_TAG", "E")
	t.Setenv("SHARDNODE_NODE_DATA_DIR", "/env/data")
	t.Setenv("SHARDNODE_RAFT_BOOTSTRAP", "true")
	t.Setenv("SHARDNODE_HTTP_MAX_BODY_BYTES", "2MiB")
	t.Setenv("SHARDNODE_LOG_LEVEL", "warn")
	c, err := Load(flags(t, "--config", p))
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.Tag != "E" || c.Node.DataDir != "/env/data" || !c.Raft.Bootstrap ||
		c.HTTP.MaxBodyBytes != 2<<20 || c.Log.Level != "warn" {
		t.Fatalf("env did not override file: %+v", *c)
	}
	// Keys not in the environment still come from the file.
	if c.HTTP.Addr != "0.0.0.0:9090" || c.Cluster.Name != "prod-1" || len(c.NATS.Routes) != 2 {
		t.Fatalf("file values lost: %+v", *c)
	}
}

func TestEmptyEnvIsUnset(t *testing.T) {
	p := writeFile(t, "c.yaml", "node:\n  tag: F\n")
	c := mustLoad(t, p, env(map[string]string{"SHARDNODE_NODE_TAG": ""}), nil)
	if c.Node.Tag != "F" {
		t.Fatalf("tag = %q, want F (empty env counts as unset)", c.Node.Tag)
	}
}

func TestFlagOverridesEnv(t *testing.T) {
	p := writeFile(t, "c.yaml", fullYAML)
	e := env(map[string]string{
		"SHARDNODE_NODE_TAG":       "E",
		"SHARDNODE_HTTP_ADDR":      "127.0.0.1:1111",
		"SHARDNODE_RAFT_BOOTSTRAP": "true",
		"SHARDNODE_NATS_ROUTES":    "nats-route://e:1",
		"SHARDNODE_LOG_LEVEL":      "warn",
	})
	fs := flags(t, "--config", p, "--tag", "FL", "--http-addr", ":2222",
		"--bootstrap=false", "--nats-routes", "nats-route://f:1,nats://g:2")
	c := mustLoad(t, "", e, fs)
	if c.Node.Tag != "FL" || c.HTTP.Addr != ":2222" || c.Raft.Bootstrap {
		t.Fatalf("flags did not override env: %+v", *c)
	}
	if want := []string{"nats-route://f:1", "nats://g:2"}; !reflect.DeepEqual(c.NATS.Routes, want) {
		t.Fatalf("routes = %q, want %q", c.NATS.Routes, want)
	}
	// A flag that was not set does not override env or file, even though
	// it has a default.
	if c.Log.Level != "warn" {
		t.Fatalf("unset --log-level overrode env: level = %q", c.Log.Level)
	}
	if c.Node.DataDir != "/data/b" || c.Raft.Addr != "10.0.0.2:7071" {
		t.Fatalf("unset flags overrode file: %+v", *c)
	}
}

func TestFlagOverridesFile(t *testing.T) {
	p := writeFile(t, "c.yaml", fullYAML)
	c := mustLoad(t, p, env(nil), flags(t, "--data-dir", "/flag", "--cluster-name", "fl", "--log-format", "text"))
	if c.Node.DataDir != "/flag" || c.Cluster.Name != "fl" || c.Log.Format != "text" {
		t.Fatalf("flags did not override file: %+v", *c)
	}
}

// TestEnvOnlyKey is the viper pitfall of DESIGN §8: a key set only in the
// environment (absent from the file) must still be picked up.
func TestEnvOnlyKey(t *testing.T) {
	p := writeFile(t, "c.yaml", "node:\n  tag: B\n")
	clearEnv(t)
	t.Setenv("SHARDNODE_NATS_CLUSTER_LISTEN", "127.0.0.1:6222")
	t.Setenv("SHARDNODE_RAFT_JOIN", "https://a.example:8443")
	t.Setenv("SHARDNODE_NODE_DATA_DIR", "/only/env")
	t.Setenv("SHARDNODE_HTTP_MAX_DOCUMENT_BYTES", "1024")
	t.Setenv("SHARDNODE_STORAGE_BLOCK_CACHE_BYTES", "1GiB")
	for _, file := range []string{p, ""} {
		c, err := LoadFrom(file, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.NATS.ClusterListen != "127.0.0.1:6222" || c.Raft.Join != "https://a.example:8443" ||
			c.Node.DataDir != "/only/env" || c.HTTP.MaxDocumentBytes != 1024 || c.Storage.BlockCacheBytes != 1<<30 {
			t.Fatalf("file %q: env-only keys not picked up: %+v", file, *c)
		}
	}
}

func TestRoutesCommaSeparatedFromEnv(t *testing.T) {
	e := env(map[string]string{
		"SHARDNODE_NATS_CLUSTER_LISTEN": ":6222",
		"SHARDNODE_NATS_ROUTES":         " nats-route://a:6222, nats://b:6222 ,,nats-route://c:6222",
	})
	c := mustLoad(t, "", e, nil)
	want := []string{"nats-route://a:6222", "nats://b:6222", "nats-route://c:6222"}
	if !reflect.DeepEqual(c.NATS.Routes, want) {
		t.Fatalf("routes = %q, want %q", c.NATS.Routes, want)
	}

	// A comma-separated string in the file works too, and env replaces a
	// file list.
	p := writeFile(t, "c.yaml", "nats:\n  cluster-listen: :6222\n  routes: nats-route://x:1,nats-route://y:1\n")
	c = mustLoad(t, p, env(nil), nil)
	if want := []string{"nats-route://x:1", "nats-route://y:1"}; !reflect.DeepEqual(c.NATS.Routes, want) {
		t.Fatalf("file string routes = %q, want %q", c.NATS.Routes, want)
	}
	p = writeFile(t, "c.yaml", "nats:\n  cluster-listen: :6222\n  routes: [nats-route://x:1]\n")
	c = mustLoad(t, p, env(map[string]string{"SHARDNODE_NATS_ROUTES": "nats://z:1"}), nil)
	if want := []string{"nats://z:1"}; !reflect.DeepEqual(c.NATS.Routes, want) {
		t.Fatalf("env over file list routes = %q, want %q", c.NATS.Routes, want)
	}
}

func TestValidationErrorsNameKey(t *testing.T) {
	cases := []struct {
		key    string
		mutate func(*Config)
		msg    string // part of the message
	}{
		{"node.tag", func(c *Config) { c.Node.Tag = "" }, "uppercase"},
		{"node.tag", func(c *Config) { c.Node.Tag = "ABCDE" }, "uppercase"},
		{"node.tag", func(c *Config) { c.Node.Tag = "a" }, "uppercase"},
		{"node.tag", func(c *Config) { c.Node.Tag = "A1" }, "uppercase"},
		{"node.data-dir", func(c *Config) { c.Node.DataDir = "" }, "empty"},
		{"node.max-procs", func(c *Config) { c.Node.MaxProcs = -1 }, "0 (automatic) to 1024"},
		{"node.max-procs", func(c *Config) { c.Node.MaxProcs = 5000 }, "0 (automatic) to 1024"},
		{"storage.block-cache-bytes", func(c *Config) { c.Storage.BlockCacheBytes = 1 << 20 }, "at least 8MiB"},
		{"http.addr", func(c *Config) { c.HTTP.Addr = "foo" }, `"foo": missing port`},
		{"http.addr", func(c *Config) { c.HTTP.Addr = "host:http" }, "port"},
		{"http.addr", func(c *Config) { c.HTTP.Addr = "host:65536" }, "port"},
		{"http.addr", func(c *Config) { c.HTTP.Addr = "a:b:1" }, "too many colons"},
		{"http.addr", func(c *Config) { c.HTTP.Addr = "" }, "host:port"},
		{"http.max-body-bytes", func(c *Config) { c.HTTP.MaxBodyBytes = 0 }, "positive"},
		{"http.max-document-bytes", func(c *Config) { c.HTTP.MaxDocumentBytes = -1 }, "positive"},
		{"http.max-document-bytes", func(c *Config) { c.HTTP.MaxDocumentBytes = c.HTTP.MaxBodyBytes + 1 }, "exceed"},
		{"raft.addr", func(c *Config) { c.Raft.Addr = "7070" }, "missing port"},
		{"raft.join", func(c *Config) { c.Raft.Join = "10.0.0.1:8080" }, "http"},
		{"raft.join", func(c *Config) { c.Raft.Join = "ftp://x" }, "http:// or https://"},
		{"raft.join", func(c *Config) { c.Raft.Join = "http://" }, "missing host"},
		{"nats.url", func(c *Config) { c.NATS.URL = "http://x:4222" }, "nats:// or tls://"},
		{"nats.url", func(c *Config) { c.NATS.URL = "nats://a:4222,localhost:4222" }, "nats://"},
		{"nats.url", func(c *Config) { c.NATS.URL = "nats://a:4222,,nats://b" }, "empty"},
		{"nats.listen", func(c *Config) { c.NATS.Listen = "x" }, "missing port"},
		{"nats.listen", func(c *Config) { c.NATS.Listen = "" }, "embedded"},
		{"nats.cluster-listen", func(c *Config) { c.NATS.ClusterListen = "x:-1" }, "port"},
		{"nats.routes", func(c *Config) {
			c.NATS.ClusterListen = ":6222"
			c.NATS.Routes = []string{"nats-route://a:6222", "http://b:6222"}
		}, "nats-route:// or nats://"},
		{"nats.routes", func(c *Config) { c.NATS.Routes = []string{"nats-route://a:6222"} }, "cluster-listen"},
		{"nats.cluster-advertise", func(c *Config) { c.NATS.ClusterAdvertise = "a:6222" }, "cluster-listen"},
		{"nats.cluster-advertise", func(c *Config) { c.NATS.ClusterListen, c.NATS.ClusterAdvertise = ":6222", "a" }, "missing port"},
		{"debug.dial-rewrites", func(c *Config) { c.Debug.DialRewrites = "a:1" }, "from=to"},
		{"debug.dial-rewrites", func(c *Config) { c.Debug.DialRewrites = "a:1=b" }, "missing port"},
		{"debug.dial-rewrites", func(c *Config) { c.Debug.DialRewrites = "a:1=b:2,a:1=c:3" }, "twice"},
		{"cluster.name", func(c *Config) { c.Cluster.Name = "" }, "empty"},
		{"cluster.name", func(c *Config) { c.Cluster.Name = "a.b" }, "letters"},
		{"log.level", func(c *Config) { c.Log.Level = "verbose" }, "debug, info, warn, error"},
		{"log.format", func(c *Config) { c.Log.Format = "xml" }, "text or json"},
		{"nats.cluster-listen", func(c *Config) { c.NATS.ClusterListen = c.NATS.Listen }, "same address as nats.listen"},
		{"raft.addr", func(c *Config) { c.HTTP.Addr, c.Raft.Addr = ":9000", "127.0.0.1:9000" }, "same address as http.addr"},
	}
	for _, tc := range cases {
		c := Default()
		tc.mutate(&c)
		err := c.Validate()
		wantKeyError(t, err, tc.key)
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %q does not contain %q", tc.key, err, tc.msg)
		}
	}
}

func TestParseDialRewrites(t *testing.T) {
	got, err := ParseDialRewrites(" 127.0.0.1:7071=127.0.0.1:9001, ,127.0.0.1:8081=127.0.0.1:9002")
	if err != nil || len(got) != 2 || got["127.0.0.1:7071"] != "127.0.0.1:9001" || got["127.0.0.1:8081"] != "127.0.0.1:9002" {
		t.Fatalf("ParseDialRewrites = %v, %v", got, err)
	}
	if got, err := ParseDialRewrites(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}
}

func TestValidationAccepts(t *testing.T) {
	c := Default()
	c.Node.Tag = "ZZZZ"
	c.HTTP.Addr = ":0"
	c.Raft.Addr = "[::1]:0"
	c.Raft.Join = "https://node-a.example:8443/"
	c.NATS.URL = "nats://a:4222, tls://b:4443,nats://c"
	c.NATS.Listen = ""
	c.NATS.ClusterListen = "127.0.0.1:0"
	c.NATS.Routes = []string{"nats-route://a:6222", "nats://b:6222"}
	c.Cluster.Name = "my_cluster-2"
	for _, lvl := range []string{"debug", "info", "warn", "error"} {
		c.Log.Level = lvl
		if err := c.Validate(); err != nil {
			t.Fatalf("level %s: %v", lvl, err)
		}
	}
}

func TestValidationReportsAll(t *testing.T) {
	c := Default()
	c.Node.Tag = "x"
	c.HTTP.Addr = "foo"
	c.Log.Level = "loud"
	err := c.Validate()
	for _, k := range []string{"node.tag", "http.addr", "log.level"} {
		wantKeyError(t, err, k)
	}
	if got := err.Error(); !strings.Contains(got, `config: http.addr "foo": missing port`) {
		t.Fatalf("error text %q lacks the documented form", got)
	}
}

// TestValidationFromEnv: a value that fails its check names where it came
// from, as a value of the wrong type does.
func TestValidationFromEnv(t *testing.T) {
	_, err := LoadFrom("", env(map[string]string{"SHARDNODE_RAFT_ADDR": "nohost"}), nil)
	wantKeyError(t, err, "raft.addr")
	if !strings.Contains(err.Error(), "(from env SHARDNODE_RAFT_ADDR)") {
		t.Fatalf("error %q does not name its source", err)
	}
	p := writeFile(t, "c.yaml", "node:\n  tag: a1\n")
	_, err = LoadFrom(p, env(nil), nil)
	if err == nil || !strings.Contains(err.Error(), "(from file "+p+")") {
		t.Fatalf("error %v does not name the file", err)
	}
}

func TestRedactsPasswords(t *testing.T) {
	c := Default()
	c.NATS.URL = "http://user:s3cret@x:4222"
	c.Raft.Join = "ftp://user:hunter2@x"
	err := c.Validate()
	wantKeyError(t, err, "nats.url")
	wantKeyError(t, err, "raft.join")
	if s := err.Error(); strings.Contains(s, "s3cret") || strings.Contains(s, "hunter2") {
		t.Fatalf("error leaks a password: %v", err)
	}
}

func TestUnknownFileKey(t *testing.T) {
	for _, tc := range []struct {
		yaml, key, hint string
	}{
		{"node:\n  tagg: B\n", "node.tagg", "did you mean node.tag?"},
		{"nodes:\n  tag: B\n", "nodes.tag", ""},
		{"http:\n  addr: :1\n  tls:\n    cert: x\n", "http.tls.cert", ""},
		{"verbose: true\n", "verbose", ""},
		{"log:\n  levl: debug\n", "log.levl", "did you mean log.level?"},
		{"node:\n  tag: ~\n  bogus: ~\n", "node.bogus", ""},
	} {
		p := writeFile(t, "c.yaml", tc.yaml)
		_, err := LoadFrom(p, env(nil), nil)
		wantKeyError(t, err, tc.key)
		if !strings.Contains(err.Error(), "unknown key") || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q should say unknown key in %s", tc.key, err, p)
		}
		if tc.hint != "" && !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("%s: error %q lacks hint %q", tc.key, err, tc.hint)
		}
	}
}

func TestKeysAreCaseInsensitiveInFile(t *testing.T) {
	p := writeFile(t, "c.yaml", "Node:\n  Tag: K\n")
	if c := mustLoad(t, p, env(nil), nil); c.Node.Tag != "K" {
		t.Fatalf("tag = %q, want K", c.Node.Tag)
	}
}

func TestWrongTypeRejected(t *testing.T) {
	for _, tc := range []struct {
		yaml, key string
	}{
		{"raft:\n  bootstrap: maybe\n", "raft.bootstrap"},
		{"raft:\n  bootstrap: 3\n", "raft.bootstrap"},
		{"http:\n  addr: [1, 2]\n", "http.addr"},
		{"http:\n  addr:\n    host: x\n", "http.addr"},
		{"node:\n  tag: 7\n", "node.tag"},
		{"http:\n  max-body-bytes: lots\n", "http.max-body-bytes"},
		{"http:\n  max-body-bytes: 1.5\n", "http.max-body-bytes"},
		{"http:\n  max-body-bytes: true\n", "http.max-body-bytes"},
		{"nats:\n  routes: [1, 2]\n", "nats.routes"},
		{"nats:\n  routes:\n    a: b\n", "nats.routes"},
		{"node: 5\n", "node"},
		{"log: [debug]\n", "log"},
	} {
		p := writeFile(t, "c.yaml", tc.yaml)
		_, err := LoadFrom(p, env(nil), nil)
		wantKeyError(t, err, tc.key)
		if !strings.Contains(err.Error(), "expected") {
			t.Errorf("%s: error %q should say what was expected", tc.key, err)
		}
	}

	// A section that is not a mapping is one error, not one per key in it.
	p := writeFile(t, "c.yaml", "node: 5\n")
	_, err := LoadFrom(p, env(nil), nil)
	if n := len(flattenErrors(err)); n != 1 {
		t.Errorf("want 1 error for a scalar section, got %d: %v", n, err)
	}
	// Empty and null sections and null values fall back to the defaults.
	p = writeFile(t, "c.yaml", "node:\nhttp: {}\nlog:\n  level: ~\n")
	if c := mustLoad(t, p, env(nil), nil); !reflect.DeepEqual(*c, Default()) {
		t.Errorf("empty sections: got %+v, want defaults", *c)
	}

	// From the environment, the error names the variable.
	_, err = LoadFrom("", env(map[string]string{"SHARDNODE_RAFT_BOOTSTRAP": "maybe"}), nil)
	wantKeyError(t, err, "raft.bootstrap")
	if !strings.Contains(err.Error(), "SHARDNODE_RAFT_BOOTSTRAP") {
		t.Errorf("error %q should name the environment variable", err)
	}
	_, err = LoadFrom("", env(map[string]string{"SHARDNODE_HTTP_MAX_BODY_BYTES": "64MB"}), nil)
	wantKeyError(t, err, "http.max-body-bytes")
	// A rate of bytes takes a size's units, and is never negative.
	c, err := LoadFrom("", env(map[string]string{"SHARDNODE_RESHARDING_MAX_SEND_BYTES_PER_SEC": "20MiB"}), nil)
	if err != nil || c.Resharding.MaxSendBytesPerSec != 20*MiB {
		t.Errorf("max-send-bytes-per-sec 20MiB: %+v %v", c.Resharding, err)
	}
	_, err = LoadFrom("", env(map[string]string{"SHARDNODE_RESHARDING_MAX_SEND_BYTES_PER_SEC": "-1"}), nil)
	wantKeyError(t, err, "resharding.max-send-bytes-per-sec")
	// The bound on moved buckets waiting for their cleanup: 10,000 unless
	// set, 0 for none, never negative.
	if c, err := LoadFrom("", env(nil), nil); err != nil || c.Resharding.MaxAwaitingCleanup != 10000 {
		t.Errorf("default max-awaiting-cleanup: %+v %v", c.Resharding, err)
	}
	if c, err := LoadFrom("", env(map[string]string{"SHARDNODE_RESHARDING_MAX_AWAITING_CLEANUP": "0"}), nil); err != nil || c.Resharding.MaxAwaitingCleanup != 0 {
		t.Errorf("max-awaiting-cleanup 0: %+v %v", c.Resharding, err)
	}
	_, err = LoadFrom("", env(map[string]string{"SHARDNODE_RESHARDING_MAX_AWAITING_CLEANUP": "-5"}), nil)
	wantKeyError(t, err, "resharding.max-awaiting-cleanup")
	// A count is not a size: no unit, and the message says so.
	for _, v := range []string{"abc", "10KiB"} {
		_, err = LoadFrom("", env(map[string]string{"SHARDNODE_RESHARDING_MIGRATOR_INTERVAL_MS": v}), nil)
		wantKeyError(t, err, "resharding.migrator-interval-ms")
		if strings.Contains(err.Error(), "bytes") {
			t.Errorf("migrator-interval-ms %q: error %q speaks of bytes", v, err)
		}
	}
}

func TestJSONFileRoundTrip(t *testing.T) {
	// The struct tags match the keys: a marshalled Config loads back equal.
	c := Default()
	c.Node.Tag = "J"
	c.NATS.ClusterListen = ":6222"
	c.NATS.Routes = []string{"nats-route://a:1"}
	c.HTTP.MaxBodyBytes = 5 << 30
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, "c.json", string(data))
	got := mustLoad(t, p, env(nil), nil)
	if !reflect.DeepEqual(*got, c) {
		t.Fatalf("round trip: got %+v, want %+v", *got, c)
	}
}

func TestBindFlags(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	BindFlags(fs)
	for _, name := range []string{"config", "tag", "data-dir", "http-addr", "raft-addr", "bootstrap",
		"join", "nats-url", "nats-listen", "nats-cluster-listen", "nats-routes", "cluster-name",
		"log-level", "log-format"} {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("flag --%s not registered", name)
			continue
		}
		if f.Usage == "" {
			t.Errorf("flag --%s has no help text", name)
		}
	}
	if u := fs.Lookup("data-dir").Usage; !strings.Contains(u, "SHARDNODE_NODE_DATA_DIR") {
		t.Errorf("--data-dir help %q does not name its env variable", u)
	}
	// Only the flags the caller defined are used.
	partial := pflag.NewFlagSet("y", pflag.ContinueOnError)
	partial.String("tag", "", "")
	if err := partial.Parse([]string{"--tag", "P"}); err != nil {
		t.Fatal(err)
	}
	if c := mustLoad(t, "", env(nil), partial); c.Node.Tag != "P" {
		t.Fatalf("tag = %q, want P", c.Node.Tag)
	}
}

func TestEnvNameAndKeys(t *testing.T) {
	if got := EnvName("nats.cluster-listen"); got != "SHARDNODE_NATS_CLUSTER_LISTEN" {
		t.Fatalf("EnvName = %q", got)
	}
	if got := EnvName("node.data-dir"); got != "SHARDNODE_NODE_DATA_DIR" {
		t.Fatalf("EnvName = %q", got)
	}
	keys := Keys()
	if len(keys) != 26 || keys[0] != "node.tag" || keys[2] != "node.max-procs" || keys[13] != "nats.cluster-advertise" || keys[18] != "resharding.max-send-bytes-per-sec" || keys[19] != "resharding.max-awaiting-cleanup" || keys[20] != "debug.failpoints" || keys[21] != "debug.pprof" || keys[22] != "debug.dial-rewrites" || keys[23] != "storage.doc-cache-bytes" || keys[24] != "storage.memtable-budget-bytes" || keys[25] != "storage.block-cache-bytes" {
		t.Fatalf("Keys = %q", keys)
	}
}
