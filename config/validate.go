package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Error is a problem with one configuration key. Load and Validate return
// *Error values, joined with errors.Join when several keys are wrong; use
// errors.As to get at them.
type Error struct {
	// Key is the key, e.g. "http.addr".
	Key string
	// Value is the offending value, or nil when it does not help.
	Value any
	// Source says where the value came from, e.g. "env SHARDNODE_HTTP_ADDR",
	// "flag --http-addr" or "file shardnode.yaml"; empty when not known.
	Source string
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as `config: KEY "VALUE": MSG (from SOURCE)`.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	b.WriteString(e.Key)
	switch v := e.Value.(type) {
	case nil:
	case string, []string:
		fmt.Fprintf(&b, " %q", v)
	default:
		fmt.Fprintf(&b, " %v", v)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	if e.Source != "" {
		b.WriteString(" (from ")
		b.WriteString(e.Source)
		b.WriteString(")")
	}
	return b.String()
}

// maxProcsLimit bounds node.max-procs: far past any use, short of a typo
// that would start thousands of threads.
const maxProcsLimit = 1024

// Validate checks every key and returns all problems found, each an *Error
// naming its key, joined with errors.Join; nil if the configuration is good.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key string, value any, format string, args ...any) {
		errs = append(errs, &Error{Key: key, Value: value, Msg: fmt.Sprintf(format, args...)})
	}

	// node
	if !validTag(c.Node.Tag) {
		bad("node.tag", c.Node.Tag, "must be 1 to 4 uppercase letters A-Z")
	}
	if strings.TrimSpace(c.Node.DataDir) == "" {
		bad("node.data-dir", c.Node.DataDir, "must not be empty")
	}

	// http
	if msg := checkAddr(c.HTTP.Addr); msg != "" {
		bad("http.addr", c.HTTP.Addr, "%s", msg)
	}
	if c.Node.MaxProcs < 0 || c.Node.MaxProcs > maxProcsLimit {
		bad("node.max-procs", c.Node.MaxProcs, "must be 0 (automatic) to %d", maxProcsLimit)
	}
	if c.Storage.MemtableBudgetBytes < 2<<20 {
		bad("storage.memtable-budget-bytes", c.Storage.MemtableBudgetBytes, "must be at least 2MiB")
	}
	if c.Storage.BlockCacheBytes < 8<<20 {
		bad("storage.block-cache-bytes", c.Storage.BlockCacheBytes, "must be at least 8MiB")
	}
	if c.Storage.DocCacheBytes < 0 {
		bad("storage.doc-cache-bytes", c.Storage.DocCacheBytes, "must be 0 (no cache) or positive")
	}
	if c.HTTP.MaxBodyBytes <= 0 {
		bad("http.max-body-bytes", c.HTTP.MaxBodyBytes, "must be positive")
	}
	if c.HTTP.MaxDocumentBytes <= 0 {
		bad("http.max-document-bytes", c.HTTP.MaxDocumentBytes, "must be positive")
	} else if c.HTTP.MaxBodyBytes > 0 && c.HTTP.MaxDocumentBytes > c.HTTP.MaxBodyBytes {
		bad("http.max-document-bytes", c.HTTP.MaxDocumentBytes,
			"must not exceed http.max-body-bytes (%d)", c.HTTP.MaxBodyBytes)
	}

	// raft
	if msg := checkAddr(c.Raft.Addr); msg != "" {
		bad("raft.addr", c.Raft.Addr, "%s", msg)
	}
	if c.Raft.Join != "" {
		if msg := checkURL(c.Raft.Join, "http", "https"); msg != "" {
			bad("raft.join", redactURL(c.Raft.Join), "%s", msg)
		}
	}

	// nats
	if c.NATS.URL != "" {
		for _, u := range strings.Split(c.NATS.URL, ",") {
			u = strings.TrimSpace(u)
			if u == "" {
				bad("nats.url", redactURL(c.NATS.URL), "empty URL in comma-separated list")
				continue
			}
			if msg := checkURL(u, "nats", "tls"); msg != "" {
				bad("nats.url", redactURL(u), "%s", msg)
			}
		}
	}
	if c.NATS.Listen == "" {
		if c.NATS.URL == "" {
			bad("nats.listen", c.NATS.Listen, "must be set when nats.url is empty (embedded NATS server)")
		}
	} else if msg := checkAddr(c.NATS.Listen); msg != "" {
		bad("nats.listen", c.NATS.Listen, "%s", msg)
	}
	if c.NATS.ClusterListen != "" {
		if msg := checkAddr(c.NATS.ClusterListen); msg != "" {
			bad("nats.cluster-listen", c.NATS.ClusterListen, "%s", msg)
		}
	}
	for _, r := range c.NATS.Routes {
		if msg := checkURL(r, "nats-route", "nats"); msg != "" {
			bad("nats.routes", redactURL(r), "%s", msg)
		}
	}
	if c.NATS.ClusterAdvertise != "" {
		if msg := checkAddr(c.NATS.ClusterAdvertise); msg != "" {
			bad("nats.cluster-advertise", c.NATS.ClusterAdvertise, "%s", msg)
		} else if c.NATS.ClusterListen == "" {
			bad("nats.cluster-advertise", c.NATS.ClusterAdvertise, "needs nats.cluster-listen to be set")
		}
	}
	if len(c.NATS.Routes) > 0 && c.NATS.URL == "" && c.NATS.ClusterListen == "" {
		bad("nats.routes", nil, "routes need nats.cluster-listen to be set")
	}

	// Two listeners on one address: the second would fail to bind, and
	// for the embedded NATS server only after a 10 s start-up timeout.
	listeners := []struct{ key, addr string }{{"http.addr", c.HTTP.Addr}, {"raft.addr", c.Raft.Addr}}
	if c.NATS.URL == "" {
		listeners = append(listeners, struct{ key, addr string }{"nats.listen", c.NATS.Listen}, struct{ key, addr string }{"nats.cluster-listen", c.NATS.ClusterListen})
	}
	for i, a := range listeners {
		for _, b := range listeners[i+1:] {
			if sameListener(a.addr, b.addr) {
				bad(b.key, b.addr, "is the same address as %s", a.key)
			}
		}
	}

	// cluster
	if msg := checkClusterName(c.Cluster.Name); msg != "" {
		bad("cluster.name", c.Cluster.Name, "%s", msg)
	}

	// log
	if c.Resharding.MigratorIntervalMs < 10 {
		bad("resharding.migrator-interval-ms", c.Resharding.MigratorIntervalMs, "must be at least 10")
	}
	if c.Resharding.MaxAwaitingCleanup < 0 {
		bad("resharding.max-awaiting-cleanup", c.Resharding.MaxAwaitingCleanup, "must be 0 (no bound) or positive")
	}
	if c.Resharding.MaxSendBytesPerSec < 0 {
		bad("resharding.max-send-bytes-per-sec", c.Resharding.MaxSendBytesPerSec, "must be 0 (no limit) or positive")
	}
	if _, err := ParseFailpoints(c.Debug.Failpoints); err != nil {
		bad("debug.failpoints", c.Debug.Failpoints, "%s", err.Error())
	}
	if _, err := ParseDialRewrites(c.Debug.DialRewrites); err != nil {
		bad("debug.dial-rewrites", c.Debug.DialRewrites, "%s", err.Error())
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", c.Log.Level, "must be one of debug, info, warn, error")
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", c.Log.Format, "must be text or json")
	}

	return errors.Join(errs...)
}

// ValidTag reports whether tag is a valid node tag: 1 to 4 uppercase
// letters A-Z.
func ValidTag(tag string) bool { return validTag(tag) }

// CheckAddr returns what is wrong with a host:port address, or "" (see
// the node's raft.addr).
func CheckAddr(addr string) string { return checkAddr(addr) }

// CheckURL returns what is wrong with raw as a URL with one of the schemes
// and a host, or "".
func CheckURL(raw string, schemes ...string) string { return checkURL(raw, schemes...) }

// sameListener reports whether two listen addresses would bind the same
// port: equal ports (not 0, which picks a free one) on equal hosts, or
// where either host means every interface.
func sameListener(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || pa == "0" {
		return false
	}
	any := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || any(ha) || any(hb)
}

// validTag reports whether tag is 1 to 4 uppercase letters A-Z.
func validTag(tag string) bool {
	if len(tag) < 1 || len(tag) > 4 {
		return false
	}
	for i := 0; i < len(tag); i++ {
		if tag[i] < 'A' || tag[i] > 'Z' {
			return false
		}
	}
	return true
}

// checkAddr returns what is wrong with a host:port address, or "". The host
// may be empty (all interfaces); port 0 means "pick a free port".
func checkAddr(addr string) string {
	if addr == "" {
		return "must be host:port"
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return strings.TrimSuffix(ae.Err, " in address")
		}
		return err.Error()
	}
	return checkPort(port)
}

// checkPort returns what is wrong with a port number, or "".
func checkPort(port string) string {
	if port == "" {
		return "missing port"
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Sprintf("port %q is not a number from 0 to 65535", port)
	}
	return ""
}

// checkURL returns what is wrong with u as a URL with one of the schemes and
// a host, or "".
func checkURL(raw string, schemes ...string) string {
	want := strings.Join(schemes, ":// or ") + "://"
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Sprintf("must be a URL starting with %s: %v", want, err)
	}
	ok := false
	for _, s := range schemes {
		if strings.EqualFold(u.Scheme, s) {
			ok = true
		}
	}
	if !ok {
		return "must be a URL starting with " + want
	}
	if u.Hostname() == "" {
		return "missing host"
	}
	if p := u.Port(); p != "" {
		if msg := checkPort(p); msg != "" {
			return msg
		}
	}
	return ""
}

// redactURL hides a password in a URL so that errors do not leak it.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		if j := strings.Index(raw, "://"); j >= 0 && j < i {
			return raw[:j+3] + "xxxxx" + raw[i:]
		}
		return "xxxxx" + raw[i:]
	}
	return raw
}

// checkClusterName returns what is wrong with a cluster name, or "". The name
// is used as a NATS subject token and NATS cluster name, so it is limited to
// letters, digits, '-' and '_'.
func checkClusterName(name string) string {
	if name == "" {
		return "must not be empty"
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
		default:
			return "may only contain letters, digits, '-' and '_'"
		}
	}
	return ""
}
