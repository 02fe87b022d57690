package rql

import (
	"encoding/json"
	"pgregory.net/rapid"
	"slices"
	"strings"
	"testing"
)

// sampleDocs decodes the test documents the way the server does.
func sampleDocs(t testing.TB, extra ...string) []map[string]any {
	t.Helper()
	raw := append([]string{
		`{"Name":"Alice","Age":30,"Address":{"City":"London","Zip":"E1"},"Active":true,"Manager":null,
		  "@metadata":{"@collection":"Users","@id":"users/1"}}`,
		`{"Name":"bob","Age":25,"Address":{"City":"Paris"},"Active":false,
		  "@metadata":{"@collection":"Users","@id":"users/2"}}`,
		`{"Name":"Carol","Age":"40","Address":null,"Manager":"users/1",
		  "@metadata":{"@collection":"Users","@id":"users/3"}}`,
		`{"Company":"companies/1","Total":100.5,"Lines":[1,2],
		  "@metadata":{"@collection":"Orders","@id":"orders/1"}}`,
	}, extra...)
	var docs []map[string]any
	for _, r := range raw {
		var d map[string]any
		if err := json.Unmarshal([]byte(r), &d); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, d)
	}
	return docs
}

func docID(d map[string]any) string { return lookup(d, idPath).(string) }

func TestMatches(t *testing.T) {
	docs := sampleDocs(t)
	params := map[string]any{"int": 26, "num": json.Number("26"), "name": "BOB", "nil": nil, "names": []any{"alice", "BOB"}}
	tests := []struct {
		q    string
		want string // matching ids, comma-separated
	}{
		{"from Users", "users/1,users/2,users/3"},
		{"from users", "users/1,users/2,users/3"},
		{"from 'ORDERS'", "orders/1"},
		{"from Nope", ""},
		{"from @all_docs", "users/1,users/2,users/3,orders/1"},
		// Case-insensitive strings.
		{"from Users where Name = 'ALICE'", "users/1"},
		{`from Users where Name == "Bob"`, "users/2"},
		{"from Users where Name = $name", "users/2"},
		{"from Users where Name != 'alice'", "users/2,users/3"},
		{"from Users where Name >= 'B' and Name < 'c'", "users/2"},
		{"from Users where Name <= 'ALICE'", "users/1"},
		// Numeric comparison; a string field never equals or orders against a number.
		{"from Users where Age > 26", "users/1"},
		{"from Users where Age >= 25", "users/1,users/2"},
		{"from Users where Age < $int", "users/2"},
		{"from Users where Age < $num", "users/2"},
		{"from Users where Age = 30.0", "users/1"},
		{"from Users where Age != 30", "users/2,users/3"},
		{"from Users where Age = '40'", "users/3"},
		{"from Users where Age > '1'", "users/3"},
		{"from Orders where Total = 100.5", "orders/1"},
		{"from Orders where Total > -1", "orders/1"},
		// Nested fields, null and missing.
		{"from Users where Address.City = 'paris'", "users/2"},
		{"from Users where Address.City = null", "users/3"},
		{"from Users where Address.City != null", "users/1,users/2"},
		{"from Users where Address.Zip = 'e1'", "users/1"},
		{"from Users where Address = null", "users/3"},
		{"from Users where Address != null", "users/1,users/2"},
		{"from Users where Manager = null", "users/1,users/2"},
		{"from Users where Manager = $nil", "users/1,users/2"},
		{"from Users where Manager != null", "users/3"},
		{"from Users where Manager > null", ""},
		{"from Users where Manager <= null", ""},
		{"from Users where Missing != 1", "users/1,users/2,users/3"},
		{"from Users where Missing < 1", ""},
		{"from Users where Name.First = 'Alice'", ""},
		// Objects and arrays are unequal to scalars.
		{"from @all_docs where Address = 'London'", ""},
		{"from @all_docs where Lines != 1", "users/1,users/2,users/3,orders/1"},
		// Booleans.
		{"from Users where Active = true", "users/1"},
		{"from Users where Active = FALSE", "users/2"},
		{"from Users where Active != true", "users/2,users/3"},
		{"from Users where Active < true", "users/2"},
		{"from Users where Active = 'true'", ""},
		// Document id.
		{"from @all_docs where id() = 'USERS/2'", "users/2"},
		{"from @all_docs where id() >= 'u'", "users/1,users/2,users/3"},
		// Precedence and parentheses.
		{"from Users where Name = 'alice' or Name = 'bob' and Age > 100", "users/1"},
		{"from Users where (Name = 'alice' or Name = 'bob') and Age > 100", ""},
		{"from Users where not Name = 'alice' and Age >= 25", "users/2"},
		{"from Users where not (Name = 'alice' and Age >= 25)", "users/2,users/3"},
		{"from Users where not not Active = true", "users/1"},
		{"from Users where (Name = 'alice' or Name = 'bob') and Age > 26", "users/1"},
		// in: equality with any of the values, by '=''s rules.
		{"from Users where Name in ('ALICE', 'carol')", "users/1,users/3"},
		{"from Users where Name in ($names)", "users/1,users/2"},
		{"from Users where Name in ()", ""},
		{"from Users where Age in (25, '40')", "users/2,users/3"},
		{"from Users where Manager in (null)", "users/1,users/2"},
		{"from Users where not Name in ('alice')", "users/2,users/3"},
		{"from @all_docs where id() in ('USERS/2', 'orders/1')", "users/2,orders/1"},
		// between: both ends included, same type only.
		{"from Users where Age between 25 and 30", "users/1,users/2"},
		{"from Users where Age between 26 and 29", ""},
		{"from Users where Age between '1' and '5'", "users/3"},
		{"from Users where Name between 'a' and 'B'", "users/1"},
		{"from Users where Missing between null and null", ""},
		// startsWith, endsWith: strings only, case-insensitively.
		{"from Users where startsWith(Name, 'AL')", "users/1"},
		{"from Users where startsWith(Name, '')", "users/1,users/2,users/3"},
		{"from Users where endsWith(Name, 'OL')", "users/3"},
		{"from Users where startsWith(Age, '4')", "users/3"},
		{"from Users where startsWith(Age, '3')", ""}, // 30 is a number
		{"from Users where startsWith(Address.City, 'lon')", "users/1"},
		{"from @all_docs where startsWith(id(), 'USERS/')", "users/1,users/2,users/3"},
		{"from @all_docs where endsWith(id(), '/1')", "users/1,orders/1"},
		{"from Users where startsWith(Name, 3)", ""},
		// exists: the field is there, whatever it holds.
		{"from Users where exists(Manager)", "users/1,users/3"},
		{"from Users where exists(Address.Zip)", "users/1"},
		{"from Users where not exists(Address.City)", "users/3"},
		{"from @all_docs where exists(Lines)", "orders/1"},
	}
	for _, tt := range tests {
		q, err := Parse(tt.q, params)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.q, err)
			continue
		}
		var got []string
		for _, d := range docs {
			if q.Matches(d) {
				got = append(got, docID(d))
			}
		}
		if g := strings.Join(got, ","); g != tt.want {
			t.Errorf("%s\n got %s\nwant %s", tt.q, g, tt.want)
		}
	}
}

func TestMatchesNoMetadata(t *testing.T) {
	q, _ := Parse("from Users", nil)
	if q.Matches(map[string]any{"Name": "x"}) || q.Matches(nil) {
		t.Error("document without @collection matched a collection query")
	}
	q, _ = Parse("from @all_docs where X = null", nil)
	if !q.Matches(nil) {
		t.Error("nil document should match @all_docs where X = null")
	}
}

func TestOrderBy(t *testing.T) {
	docs := sampleDocs(t, `{"Name":"alice","Age":30,"Active":true,"@metadata":{"@collection":"Users","@id":"users/4"}}`)
	docs = slices.DeleteFunc(docs, func(d map[string]any) bool { return docID(d) == "orders/1" })
	tests := []struct{ q, want string }{
		{"from Users", "users/1,users/2,users/3,users/4"},
		{"from Users order by Age", "users/2,users/1,users/4,users/3"},
		{"from Users order by Age desc", "users/3,users/1,users/4,users/2"},
		{"from Users order by Age desc, Name", "users/3,users/1,users/4,users/2"},
		{"from Users order by Age desc, Name desc", "users/3,users/4,users/1,users/2"},
		{"from Users order by Name", "users/1,users/4,users/2,users/3"},
		{"from Users order by Address.City", "users/3,users/4,users/1,users/2"},
		{"from Users order by Active desc, Age asc, id() desc", "users/4,users/1,users/2,users/3"},
		{"from Users order by id() desc", "users/4,users/3,users/2,users/1"},
		{"from Users order by Missing", "users/1,users/2,users/3,users/4"},
	}
	for _, tt := range tests {
		q, err := Parse(tt.q, nil)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.q, err)
		}
		sorted := slices.Clone(docs)
		slices.SortStableFunc(sorted, func(a, b map[string]any) int {
			if c := q.Compare(a, b); c != 0 {
				return c
			}
			return strings.Compare(docID(a), docID(b))
		})
		var got []string
		for _, d := range sorted {
			got = append(got, docID(d))
		}
		if g := strings.Join(got, ","); g != tt.want {
			t.Errorf("%s\n got %s\nwant %s", tt.q, g, tt.want)
		}
	}
}

// TestIDComparesAsTheStoreKeysIDs: id() equals exactly what a GET by id
// finds: the ids lower-cased whole, not under simple case folding, which
// would also equate a final sigma with a medial one.
func TestIDComparesAsTheStoreKeysIDs(t *testing.T) {
	doc := map[string]any{"@metadata": map[string]any{"@id": "ΟΔΟΣ/1", "@collection": "Streets"}}
	for q, want := range map[string]bool{
		"from @all_docs where id() = 'οδοσ/1'":  true,
		"from @all_docs where id() = 'ΟΔΟΣ/1'":  true,
		"from @all_docs where id() = 'οδος/1'":  false, // final sigma: GET ?id=οδος/1 is a 404
		"from @all_docs where id() != 'οδος/1'": true,
		"from @all_docs where id() > 'οδοσ/0'":  true,
		"from @all_docs where Name = 'x'":       false,
	} {
		parsed, err := Parse(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := parsed.Matches(doc); got != want {
			t.Errorf("%s: %v, want %v", q, got, want)
		}
	}
}

// TestOrderAgreesWithComparisons: order by a field (or id()) sorts two
// documents as where field > x / < x tells them apart, so keyset paging
// (where Name > $last order by Name) skips nothing; and strings sort as
// lower case ("a_b" before "apple"), the order of the listing and of ids.
func TestOrderAgreesWithComparisons(t *testing.T) {
	doc := func(id, name string) map[string]any {
		return map[string]any{"Name": name, "@metadata": map[string]any{"@id": id, "@collection": "K"}}
	}
	for _, field := range []string{"Name", "id()"} {
		order, err := Parse("from K order by "+field, nil)
		if err != nil {
			t.Fatal(err)
		}
		rapid.Check(t, func(t *rapid.T) {
			s := rapid.StringMatching(`[aAbB_\[\]^kKsSſσςΣ\x{212A}]{1,4}`)
			a, b := s.Draw(t, "a"), s.Draw(t, "b")
			da, db := doc(a, a), doc(b, b)
			after, err := Parse("from K where "+field+" > $p", map[string]any{"p": a})
			if err != nil {
				t.Fatal(err)
			}
			before, err := Parse("from K where "+field+" < $p", map[string]any{"p": a})
			if err != nil {
				t.Fatal(err)
			}
			c := order.Compare(da, db)
			if gt, lt := after.Matches(db), before.Matches(db); (gt && c >= 0) || (lt && c <= 0) {
				t.Fatalf("%s: order %q vs %q = %d, but where > %v, where < %v", field, a, b, c, gt, lt)
			}
		})
	}
	order, _ := Parse("from K order by Name", nil)
	if order.Compare(doc("x/1", "a_b"), doc("x/2", "apple")) >= 0 {
		t.Fatal(`"a_b" sorts after "apple"`)
	}
	byID, _ := Parse("from K order by id()", nil)
	if byID.Compare(doc("k/a_", ""), doc("k/aa", "")) >= 0 {
		t.Fatal(`id "k/a_" sorts after "k/aa"`)
	}
}
