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
