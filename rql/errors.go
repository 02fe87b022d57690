package rql

import (
	"fmt"
	"unicode/utf8"
)

// ParseError describes a syntax or parameter error in an RQL query.
type ParseError struct {
	// Pos is the 0-based byte offset of the offending token in Query.
	Pos int
	// Msg describes what went wrong.
	Msg string
	// Query is the full query text that failed to parse.
	Query string
}

// snippetLen is the maximum number of query bytes quoted in an error message.
const snippetLen = 20

// Error formats the error as `rql: <msg> at position <pos>: near "<text>"`.
func (e *ParseError) Error() string {
	return fmt.Sprintf("rql: %s at position %d: %s", e.Msg, e.Pos, e.snippet())
}

// snippet quotes the query text starting at Pos, cut at a rune boundary.
func (e *ParseError) snippet() string {
	if e.Pos < 0 || e.Pos >= len(e.Query) {
		return "near end of query"
	}
	s := e.Query[e.Pos:]
	if len(s) <= snippetLen {
		return fmt.Sprintf("near %q", s)
	}
	cut := snippetLen
	for cut > 1 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("near %q...", s[:cut])
}
