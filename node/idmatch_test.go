package node

import (
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"", "", true},
		{"", "a", false},
		{"*", "", true},
		{"*", "anything", true},
		{"**", "", true},
		{"?", "", false},
		{"?", "a", true},
		{"?", "ab", false},
		{"?", "é", true}, // one character, two bytes
		{"a*", "a", true},
		{"a*", "abc", true},
		{"a*", "ba", false},
		{"*a", "aXa", true},
		{"*a", "aXb", false},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "aXcYb", false},
		{"*b?d", "abcbxd", true}, // the first b is not the one
		{"*b?d", "abcabd", false},
		{"1?", "1", false},
		{"1?", "12", true},
		{"a?c*", "abcdef", true},
		{"x*", "ab", false},
		{"*/*", "orders/1", true},
		{"*/*", "orders", false},
	} {
		if got := globMatch(tc.pattern, tc.name); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestIDFilter(t *testing.T) {
	f := (&listArgs{ByID: true, Prefix: "Users/", Matches: "1*|*9||", Exclude: "1?|?", StartAfter: "USERS/10"}).filter()
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"users/1", false},   // excluded by "?"
		{"users/10", false},  // startAfter is exclusive
		{"users/100", true},  // matches 1*
		{"users/11", false},  // excluded by 1?
		{"users/19", false},  // excluded by 1?
		{"users/29", true},   // matches *9
		{"users/2", false},   // excluded by "?" (and matches nothing)
		{"users/200", false}, // matches no alternative
		{"USERS/109", true},  // case-insensitive
		{"orders/109", false},
		{"users", false},
	} {
		if got := f.keep(strings.ToLower(tc.id)); got != tc.want {
			t.Errorf("keep(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
	// Empty parameters (RavenDB's clients send "matches=&exclude=") filter
	// nothing.
	all := (&listArgs{ByID: true, Prefix: "a", Matches: "|", Exclude: ""}).filter()
	if !all.keep("a") || !all.keep("ab") || all.keep("b") {
		t.Fatal("an empty matches or exclude filters ids")
	}
}

// globReference is globMatch as a regular expression: '*' is .*, '?' is
// one character, everything else is literal.
func globReference(pattern string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`(?s)^`)
	for _, r := range pattern {
		switch r {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}

// TestGlobMatchAgreesWithRegexp holds the matcher to a simple reference on
// strings from a small alphabet (so matches are common), with wildcards on
// both sides and multi-byte and case-varying letters.
func TestGlobMatchAgreesWithRegexp(t *testing.T) {
	alphabet := []rune{'a', 'b', 'A', 'é', 'É', '/', '*', '?', '.'}
	str := func(max int) *rapid.Generator[string] {
		return rapid.Custom(func(t *rapid.T) string {
			return string(rapid.SliceOfN(rapid.SampledFrom(alphabet), 0, max).Draw(t, "runes"))
		})
	}
	rapid.Check(t, func(t *rapid.T) {
		pattern := strings.ToLower(str(8).Draw(t, "pattern"))
		name := strings.ToLower(str(12).Draw(t, "name"))
		want := globReference(pattern).MatchString(name)
		if got := globMatch(pattern, name); got != want {
			t.Fatalf("globMatch(%q, %q) = %v, the reference says %v", pattern, name, got, want)
		}
		// Alternatives: any one that is not empty matching is enough.
		other := strings.ToLower(str(4).Draw(t, "other"))
		ps := parseIDPatterns(pattern + "|" + other)
		wantAny := pattern != "" && want || other != "" && globReference(other).MatchString(name)
		if got := ps.matchAny(name); got != wantAny {
			t.Fatalf("%q.matchAny(%q) = %v, want %v", ps, name, got, wantAny)
		}
	})
}
