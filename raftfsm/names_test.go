package raftfsm

import (
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestValidateDatabaseNameMatchesRule checks the byte loop against the rule
// written as a regular expression.
func TestValidateDatabaseNameMatchesRule(t *testing.T) {
	rule := regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$`)
	for _, name := range []string{"", "a", "db", "_x", ".x", "-x", "x.y-z_1", "é", "a b", "a$1", strings.Repeat("a", 128), strings.Repeat("a", 129)} {
		if got, want := ValidateDatabaseName(name) == nil, rule.MatchString(name); got != want {
			t.Errorf("%q: valid %v, rule says %v", name, got, want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.StringOfN(rapid.SampledFrom([]rune("aZ09_.-$ é/")), 0, 130, -1).Draw(t, "name")
		if got, want := ValidateDatabaseName(name) == nil, rule.MatchString(name); got != want {
			t.Fatalf("%q: valid %v, rule says %v", name, got, want)
		}
	})
}
