package node

import (
	"net/url"
	"slices"
	"testing"
)

// queryValues gives the values url.ParseQuery gives for a key, for any raw
// query, valid or not.
func FuzzQueryValues(f *testing.F) {
	for _, s := range []string{
		"", "id=users/1", "id=a&id=b", "id=a%2Fb", "id=a+b", "i%64=x", "id=%zz&id=ok",
		"id=a;b&id=c", "id", "id=&id==", "x=1&id=2&y=3", "&&id=1&&", "id=%E2%82%AC", "%=1&id=2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw)
		want := q["id"]
		got := queryValues(nil, raw, "id")
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("queryValues(%q) = %q, url.ParseQuery gives %q", raw, got, want)
		}
	})
}
