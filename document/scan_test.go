package document

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

var scanSeeds = []string{
	`{}`, `[]`, `""`, `0`, `-0.5e+10`, `true`, `false`, `null`, ` {"a" : [1, 2 ,{"b":null}] } `,
	`{"a":"\u00e9\n\"x\\"}`, `"\ud83d\ude00"`, `{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `-`, `1e`, `"\x"`,
	`"\u12g4"`, "\"a\x01\"", `{"a" 1}`, `{1:2}`, `[1 2]`, `tru`, `nul`, `{"a":1}x`, `"unterminated`,
	"\xff", `"` + "\xff\xfe" + `"`, `1e400`, `-1E+309`, `[1e308, 1e-400]`, strings.Repeat("9", 309), `{"a":"\u0040"}`, strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"a":{"a":1},"b":[{"a":1,"b":2}]}`, `{"A":1,"a":2}`, `{"x":{"a":1,"a":2}}`,
	`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k3":17}`,
	`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17}`,
}

// acceptable is Validate's rule by other means: valid JSON that is UTF-8,
// that encoding/json decodes (it refuses numbers beyond float64), and
// whose objects name each key once (compared as decoded).
func acceptable(b []byte) bool {
	var v any
	return json.Valid(b) && utf8.Valid(b) && json.Unmarshal(b, &v) == nil && !duplicateKeys(b)
}

// duplicateKeys reports whether an object of valid JSON b has a key twice.
func duplicateKeys(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if k, isString := tok.(string); isString && top != nil && top.object && top.key {
			if top.keys[k] {
				return true
			}
			top.keys[k] = true
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, object: true, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true // a value ended: a key comes next
		}
	}
}

// FuzzValidateMatchesEncodingJSON checks the one-pass validator against
// encoding/json: the same inputs are accepted (less text that is not
// UTF-8, and numbers out of float64's range), and compaction gives the
// same bytes.
func FuzzValidateMatchesEncodingJSON(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		compact, err := Validate(b)
		if want := acceptable(b); (err == nil) != want {
			t.Fatalf("Validate(%q) = %v, encoding/json valid = %v", b, err, want)
		}
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Offset < 0 || se.Offset > len(b) {
				t.Fatalf("Validate(%q) error %v has no offset within the input", b, err)
			}
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, b); err != nil {
			t.Fatal(err)
		}
		got := AppendCompact(nil, b)
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("AppendCompact(%q) = %q, json.Compact %q", b, got, want.Bytes())
		}
		if compact != bytes.Equal(got, b) {
			t.Fatalf("Validate(%q) says compact=%v", b, compact)
		}
	})
}

func TestValidateSeeds(t *testing.T) {
	for _, s := range scanSeeds {
		_, err := Validate([]byte(s))
		if (err == nil) != acceptable([]byte(s)) {
			t.Errorf("Validate(%q) = %v, encoding/json disagrees", s, err)
		}
	}
	_, err := Validate([]byte(`{"a": tru}`))
	var se *SyntaxError
	if !errors.As(err, &se) || se.Offset != 9 {
		t.Fatalf("error %v, want offset 9", err)
	}
}

func TestMembersElementsUnquote(t *testing.T) {
	body := []byte(" { \"Commands\" : [ {\"Id\":\"a\\u00e9\", \"TYPE\":\"PUT\",\"Document\": {\"x\": [1, \"}\"]}} , {\"id\":\"b\"} ], \"n\":-1.5e3 } ")
	if _, err := Validate(body); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var cmds [][]byte
	err := Members(body, func(k, v []byte) error {
		keys = append(keys, string(k))
		if KeyIs(k, "commands") {
			return Elements(v, func(e []byte) error { cmds = append(cmds, e); return nil })
		}
		if string(v) != "-1.5e3" {
			t.Fatalf("value %q", v)
		}
		return nil
	})
	if err != nil || strings.Join(keys, ",") != `"Commands","n"` || len(cmds) != 2 {
		t.Fatalf("keys %q cmds %q err %v", keys, cmds, err)
	}
	got := map[string]string{}
	if err := Members(cmds[0], func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if got[`"Document"`] != `{"x": [1, "}"]}` || got[`"TYPE"`] != `"PUT"` {
		t.Fatalf("members %q", got)
	}
	id, err := Unquote([]byte(got[`"Id"`]))
	if err != nil || id != "aé" {
		t.Fatalf("Unquote = %q %v", id, err)
	}
	if !KeyIs([]byte(`"TYPE"`), "Type") || KeyIs([]byte(`"Typ"`), "Type") || KeyIs([]byte(`"@d"`), "`d") {
		t.Fatal("KeyIs")
	}
	if err := Members([]byte(`[1]`), func(k, v []byte) error { return nil }); !errors.Is(err, ErrNotObject) {
		t.Fatalf("Members of an array: %v", err)
	}
}

// BenchmarkParse1KiB parses a ~1 KiB client document (the PUT path).
func BenchmarkParse1KiB(b *testing.B) {
	doc := []byte(`{"name":"` + strings.Repeat("x", 900) + `","age":42,"tags":["a","b"],"@metadata":{"@collection":"Users"}}`)
	b.SetBytes(int64(len(doc)))
	for i := 0; i < b.N; i++ {
		if _, err := Parse(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONCompact1KiB is the baseline Parse used before: encoding/json's
// validating compaction of the same document.
func BenchmarkJSONCompact1KiB(b *testing.B) {
	doc := []byte(`{"name":"` + strings.Repeat("x", 900) + `","age":42,"tags":["a","b"],"@metadata":{"@collection":"Users"}}`)
	b.SetBytes(int64(len(doc)))
	var buf bytes.Buffer
	for i := 0; i < b.N; i++ {
		buf.Reset()
		if err := json.Compact(&buf, doc); err != nil {
			b.Fatal(err)
		}
	}
}
