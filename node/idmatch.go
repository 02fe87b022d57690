package node

import (
	"strings"
	"unicode/utf8"
)

// idPatterns is a parsed RavenDB `matches` or `exclude` parameter: wildcard
// patterns separated by '|', applied to the part of a document id after the
// listing's prefix. Empty alternatives are dropped, as RavenDB drops them.
// Patterns and ids are compared lower-cased, because ids are
// case-insensitive here.
type idPatterns []string

// parseIDPatterns splits s at '|' and lower-cases each alternative.
func parseIDPatterns(s string) idPatterns {
	var out idPatterns
	for _, p := range strings.Split(s, "|") {
		if p != "" {
			out = append(out, strings.ToLower(p))
		}
	}
	return out
}

// matchAny reports whether one of the patterns matches lowerRest, a lower-cased
// id remainder.
func (ps idPatterns) matchAny(lowerRest string) bool {
	for _, p := range ps {
		if globMatch(p, lowerRest) {
			return true
		}
	}
	return false
}

// globMatch reports whether name matches pattern as a whole, where '*' in
// pattern stands for any run of characters (also none) and '?' for exactly
// one character; every other character stands for itself. It compares
// runes as they are (callers lower-case both sides) and takes time
// O(len(pattern) * len(name)) at worst: on a mismatch only the last '*'
// is retried, one character further on.
func globMatch(pattern, name string) bool {
	px, nx := 0, 0
	starPx, starNx := -1, -1 // the last '*' seen, and how far into name it reaches
	for px < len(pattern) || nx < len(name) {
		if px < len(pattern) {
			c, pw := utf8.DecodeRuneInString(pattern[px:])
			if c == '*' {
				starPx, starNx = px, nx
				px += pw
				continue
			}
			if nx < len(name) {
				r, nw := utf8.DecodeRuneInString(name[nx:])
				if c == '?' || c == r {
					px, nx = px+pw, nx+nw
					continue
				}
			}
		}
		if starPx < 0 || starNx >= len(name) {
			return false
		}
		// Let the last '*' take one more character and go on after it.
		_, nw := utf8.DecodeRuneInString(name[starNx:])
		starNx += nw
		px, nx = starPx+1, starNx
	}
	return true
}

// idFilter decides which ids a listing by prefix keeps. Every field is
// lower-case.
type idFilter struct {
	prefix     string
	matches    idPatterns // empty: every remainder matches
	exclude    idPatterns // empty: none is excluded
	startAfter string     // "": start at the first id
}

// keep reports whether the lower-cased id lower is listed.
func (f *idFilter) keep(lower string) bool {
	if !strings.HasPrefix(lower, f.prefix) {
		return false
	}
	if f.startAfter != "" && lower <= f.startAfter {
		return false
	}
	rest := lower[len(f.prefix):]
	if len(f.matches) > 0 && !f.matches.matchAny(rest) {
		return false
	}
	return !f.exclude.matchAny(rest)
}
