package config

import (
	"fmt"
	"strings"
	"time"
)

// ParseFailpoints parses debug.failpoints: "name=duration,name=duration".
func ParseFailpoints(s string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, d, ok := strings.Cut(part, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want name=duration", part)
		}
		dur, err := time.ParseDuration(d)
		if err != nil || dur < 0 {
			return nil, fmt.Errorf("%q: bad duration", part)
		}
		out[name] = dur
	}
	return out, nil
}

// ParseDialRewrites parses debug.dial-rewrites: "host:port=host:port,...",
// the address a node dials instead of each listed one.
func ParseDialRewrites(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		from, to, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want from=to", part)
		}
		for _, a := range []string{from, to} {
			if msg := checkAddr(a); msg != "" {
				return nil, fmt.Errorf("%q: %s", a, msg)
			}
		}
		if _, dup := out[from]; dup {
			return nil, fmt.Errorf("%q is rewritten twice", from)
		}
		out[from] = to
	}
	return out, nil
}
