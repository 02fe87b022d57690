package document

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestParseSplitsMetadata(t *testing.T) {
	cases := []struct {
		in, body, col string
	}{
		{`{"Name": "x", "@metadata": {"@collection": "Users", "x": [1,{"}":2}]}, "Age": 3}`, `{"Name":"x","Age":3}`, "Users"},
		{`{"@metadata":{"@collection":"Users"}}`, `{}`, "Users"},
		{`{}`, `{}`, ""},
		{` { "a" : "q\"@metadata\"" , "b":[{}] } `, `{"a":"q\"@metadata\"","b":[{}]}`, ""},
		{`{"@metadata":{"@collection":null},"a":1}`, `{"a":1}`, ""},
		{`{"a":{"@metadata":{"@collection":"Nested"}}}`, `{"a":{"@metadata":{"@collection":"Nested"}}}`, ""},
		// Escapes spell the same keys: a client's metadata never passes as
		// body data.
		{`{"\u0040metadata":{"@collection":"Spoof","@id":"fake"},"v":1}`, `{"v":1}`, "Spoof"},
		{`{"v":1,"@meta\u0064ata":{"\u0040collection":"Spoof"}}`, `{"v":1}`, "Spoof"},
		{`{"a":1,"\u0040metadata":{},"b":2}`, `{"a":1,"b":2}`, ""},
	}
	for _, c := range cases {
		p, err := Parse([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if string(p.Body) != c.body || p.Collection != c.col {
			t.Errorf("%s: got %s %q, want %s %q", c.in, p.Body, p.Collection, c.body, c.col)
		}
	}
}

func TestParseRejects(t *testing.T) {
	cases := map[string]error{
		`[1,2]`:                           ErrNotObject,
		`"s"`:                             ErrNotObject,
		`null`:                            ErrNotObject,
		`{"a":`:                           ErrMalformed,
		``:                                ErrMalformed,
		`{"a":1}{`:                        ErrMalformed,
		`{"@metadata":5}`:                 ErrBadMetadata,
		`{"@metadata":{"@collection":1}}`: ErrBadMetadata,
		`{"\u0040metadata":[]}`:           ErrBadMetadata,
		`{"a":1e400}`:                     ErrMalformed,
		"{\"a\":\"\xff\"}":                ErrMalformed,
	}
	for in, want := range cases {
		if _, err := Parse([]byte(in)); !errors.Is(err, want) {
			t.Errorf("%q: err %v, want %v", in, err, want)
		}
	}
}

func TestRenderIsValidJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456700, time.UTC)
	for _, body := range []string{`{}`, `{"a":1}`} {
		out := Render(nil, []byte(body), Metadata{ID: "users/\"1\"\x01\x7f", Collection: "Users", ChangeVector: "A:1-abc", LastModified: at, Bucket: 7, Shard: 2})
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		md := m["@metadata"].(map[string]any)
		if md["@id"] != "users/\"1\"\x01\x7f" || md["@last-modified"] != "2026-01-02T03:04:05.1234567Z" || md["@shard"] != 2.0 || md["@bucket"] != 7.0 {
			t.Errorf("metadata %v", md)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"a":1,"@metadata":{"@collection":"U"}}`))
	f.Add([]byte(`{"a":"\\\"","b":[1,{"c":null}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := Parse(in)
		if err != nil {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(p.Body, &m); err != nil {
			t.Fatalf("body %s of %s is not an object: %v", p.Body, in, err)
		}
		if _, ok := m["@metadata"]; ok {
			t.Fatalf("metadata left in %s", p.Body)
		}
	})
}

func TestParseValidMatchesParse(t *testing.T) {
	for _, in := range []string{
		`{"a":1,"@metadata":{"@collection":"U"},"b":"x y\" z"}`,
		`{ "a" : [ 1 , 2 ], "@metadata": {"@collection":"U"} }`,
		`{"s":"tab\there","t":"q\\\" "}`,
		`{}`,
		`[1]`,
	} {
		want, werr := Parse([]byte(in))
		got, gerr := ParseValid([]byte(in))
		if (werr == nil) != (gerr == nil) || string(want.Body) != string(got.Body) || want.Collection != got.Collection {
			t.Errorf("%s: Parse %s %q %v, ParseValid %s %q %v", in, want.Body, want.Collection, werr, got.Body, got.Collection, gerr)
		}
	}
}

// FuzzParseValidOwned: splitting in place (ParseOwned, ParseValidOwned) gives exactly what Parse gives,
// wherever "@metadata" sits and however often it appears, and the known
// compact hint only skips work.
func FuzzParseValidOwned(f *testing.F) {
	for _, s := range []string{
		`{"@metadata":{"@collection":"U"},"a":1}`,
		`{"a":1,"@metadata":{"@collection":"U"}}`,
		`{"a":1,"@metadata":{"@collection":"U"},"b":2}`,
		`{"@metadata":{"@collection":"U"}}`,
		`{"@metadata":{"@collection":"U"},"@metadata":{"@collection":"V"}}`,
		`{"@metadata":{"@collection":null},"x":"@metadata"}`,
		`{"@metadata":[1],"a":1}`,
		`{ "a" : 1 , "@metadata" : { "@collection" : "U" } }`,
		`{}`,
		`[{"@metadata":{}}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		want, werr := Parse(in)
		got, gerr := ParseOwned(append([]byte(nil), in...))
		if (werr == nil) != (gerr == nil) || string(want.Body) != string(got.Body) || want.Collection != got.Collection {
			t.Fatalf("%s: Parse %s %q %v, ParseOwned %s %q %v", in, want.Body, want.Collection, werr, got.Body, got.Collection, gerr)
		}
		if _, err := Validate(in); err != nil {
			return
		}
		for _, hint := range []bool{false, true} {
			c := append([]byte(nil), in...)
			if hint {
				if !compact(c) {
					continue
				}
			}
			got, gerr := ParseValidOwned(c, hint)
			if (werr == nil) != (gerr == nil) || string(want.Body) != string(got.Body) || want.Collection != got.Collection {
				t.Fatalf("%s (hint %v): Parse %s %q %v, ParseValidOwned %s %q %v", in, hint, want.Body, want.Collection, werr, got.Body, got.Collection, gerr)
			}
		}
	})
}

// skipStringBytewise is the byte-at-a-time definition skipString must match.
func skipStringBytewise(c []byte, i int) int {
	for j := i + 1; j < len(c); j++ {
		switch c[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(c)
}

// FuzzSkipString: the quote-jumping skipString ends every string, escaped
// quotes and runs of backslashes included, where the byte loop does.
func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"a\\"b"`, `"a\\\"b"`, `"\\\\\\"`, `"unterminated\"`, `""`, `"x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, c []byte) {
		if len(c) == 0 || c[0] != '"' {
			return
		}
		if got, want := skipString(c, 0), skipStringBytewise(c, 0); got != want {
			t.Fatalf("%q: skipString %d, byte loop %d", c, got, want)
		}
	})
}

// TestOwnedBodiesEndWhereTheyEnd: a body split in place from part of a
// larger buffer cannot be appended to over the bytes that follow it.
func TestOwnedBodiesEndWhereTheyEnd(t *testing.T) {
	for _, doc := range []string{`{"a":1}`, `{"@metadata":{"@collection":"U"},"a":1}`, `{"a":1,"@metadata":{"@collection":"U"}}`, `{"@metadata":{}}`} {
		buf := []byte(doc + `,"next command"`)
		p, err := ParseValidOwned(buf[:len(doc)], true)
		if err != nil {
			t.Fatal(err)
		}
		_ = append(p.Body, "XXXXXXXXXXXXXXXX"...)
		if string(buf[len(doc):]) != `,"next command"` {
			t.Fatalf("%s: appending to its body wrote over the next bytes: %s", doc, buf)
		}
	}
}
