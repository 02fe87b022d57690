package rql

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseValid(t *testing.T) {
	params := map[string]any{
		"p0": "Alice", "p1": 42, "p2": json.Number("1.5"), "p3": nil, "p4": true, "n": 10,
		"list": []any{"x", json.Number("2"), nil}, "empty": []any{},
	}
	tests := []struct{ in, want string }{
		{"from Orders", "from Orders"},
		{"FROM Orders", "from Orders"},
		{"  from\tOrders\n", "from Orders"},
		{"from @all_docs", "from @all_docs"},
		{"from @ALL_DOCS", "from @all_docs"},
		{"from 'Order Lines'", "from 'Order Lines'"},
		{`from "Orders"`, "from Orders"},
		{"from 'where'", "from 'where'"},
		{"from Users_2", "from Users_2"},
		{"from Users where Name = 'x'", "from Users where Name = 'x'"},
		{"from Users where Name == \"x\"", "from Users where Name = 'x'"},
		{`from Users where Name = 'it\'s \"q\" \\ \n'`, "from Users where Name = 'it\\'s \"q\" \\\\ \n'"},
		{"from Users where Age <> 3", "from Users where Age != 3"},
		{"from Users where Age != -3.25", "from Users where Age != -3.25"},
		{"from Users where Age < 1e3", "from Users where Age < 1000"},
		{"from Users where Age <= 2.5E-3", "from Users where Age <= 0.0025"},
		{"from Users where Age > 0", "from Users where Age > 0"},
		{"from Users where Age >= 007", "from Users where Age >= 7"},
		{"from Users where Age>=1 and(Name='x')", "from Users where (Age >= 1 and Name = 'x')"},
		{"from Users where Active = TRUE", "from Users where Active = true"},
		{"from Users where Active = false", "from Users where Active = false"},
		{"from Users where Manager = NULL", "from Users where Manager = null"},
		{"from Users where Address.City = 'London'", "from Users where Address.City = 'London'"},
		{"from Users where a.b.c = 1", "from Users where a.b.c = 1"},
		{"from Users where id() = 'users/1'", "from Users where id() = 'users/1'"},
		{"from Users where ID ( ) = 'users/1'", "from Users where id() = 'users/1'"},
		{"from Users where @metadata.@collection = 'Users'", "from Users where @metadata.@collection = 'Users'"},
		{"from Users where id = 1", "from Users where id = 1"},
		{"from Users where where = 1", "from Users where where = 1"},
		{"from Users where a.and = 1", "from Users where a.and = 1"},
		{"from Users where Name = $p0", "from Users where Name = 'Alice'"},
		{"from Users where Age = $p1 or Age = $p2", "from Users where (Age = 42 or Age = 1.5)"},
		{"from Users where X = $p3 and Y = $p4", "from Users where (X = null and Y = true)"},
		// Precedence: or < and < not < comparison.
		{"from U where a = 1 or b = 2 and c = 3", "from U where (a = 1 or (b = 2 and c = 3))"},
		{"from U where a = 1 and b = 2 or c = 3", "from U where ((a = 1 and b = 2) or c = 3)"},
		{"from U where not a = 1 and b = 2", "from U where ((not a = 1) and b = 2)"},
		{"from U where not not a = 1", "from U where (not (not a = 1))"},
		{"from U where not (a = 1 and b = 2)", "from U where (not (a = 1 and b = 2))"},
		{"from U where (a = 1 or b = 2) and c = 3", "from U where ((a = 1 or b = 2) and c = 3)"},
		{"from U where ((a = 1))", "from U where a = 1"},
		{"from U where a = 1 or b = 2 or c = 3", "from U where ((a = 1 or b = 2) or c = 3)"},
		{"from U where a = 1 AND b = 2 Or NOT c = 3", "from U where ((a = 1 and b = 2) or (not c = 3))"},
		// Order by, limit, offset.
		{"from U order by Name", "from U order by Name"},
		{"from U order by Name asc, Age DESC, id()", "from U order by Name, Age desc, id()"},
		{"from U where a = 1 order by a.b desc limit 10 offset 5", "from U where a = 1 order by a.b desc limit 10 offset 5"},
		{"from U offset 5 limit 10", "from U limit 10 offset 5"},
		{"from U limit 0", "from U limit 0"},
		{"from U offset 0", "from U"},
		{"from U limit $n", "from U limit 10"},
		{"from U order by limit limit 1", "from U order by limit limit 1"},
		// RavenDB's clients' paging: limit skip, take; an unset count is null.
		{"from U limit 5, 10", "from U limit 10 offset 5"},
		{"from U limit $p3, $n", "from U limit 10"},
		{"from U limit 0, 0", "from U limit 0"},
		{"from U limit $n, $p3", "from U offset 10"},
		{"from U limit null", "from U"},
		{"from U offset null", "from U"},
		// in, between and the predicate functions.
		{"from U where Name in ('a', $p0, 3)", "from U where Name in ('a', 'Alice', 3)"},
		{"from U where Name IN ($list)", "from U where Name in ('x', 2, null)"},
		{"from U where Name in ($empty)", "from U where Name in ()"},
		{"from U where Name in ()", "from U where Name in ()"},
		{"from U where Name in ($list, 'y')", "from U where Name in ('x', 2, null, 'y')"},
		{"from U where id() in ('users/1')", "from U where id() in ('users/1')"},
		{"from U where Age between 1 and $p1 and b = 2", "from U where (Age between 1 and 42 and b = 2)"},
		{"from U where not Age BETWEEN 1 AND 2", "from U where (not Age between 1 and 2)"},
		{"from U where startsWith(Name, 'al') or ENDSWITH(Name, $p0)", "from U where (startsWith(Name, 'al') or endsWith(Name, 'Alice'))"},
		{"from U where exists(Address.City) and not exists(id())", "from U where (exists(Address.City) and (not exists(id())))"},
		{"from U where exists = true", "from U where exists = true"},
		{"from U where in in (1) and between between 1 and 2", "from U where (in in (1) and between between 1 and 2)"},
		{"from U where startsWith.x = 1", "from U where startsWith.x = 1"},
		// include: paths whose values are ids; '[]' marks an array and is dropped.
		{"from Orders include Company", "from Orders include Company"},
		{"from Orders where a = 1 order by b include Company, Lines[].Product, 'Odd Name'.x limit 5", "from Orders where a = 1 order by b include Company, Lines.Product, 'Odd Name'.x limit 5"},
		{"from Orders INCLUDE @metadata.@id", "from Orders include @metadata.@id"},
		{"from 'include' include include", "from 'include' include include"},
	}
	for _, tt := range tests {
		q, err := Parse(tt.in, params)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if got := q.String(); got != tt.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		q2, err := Parse(q.String(), nil)
		if err != nil {
			t.Errorf("reparse %q: %v", q.String(), err)
		} else if q2.String() != q.String() {
			t.Errorf("round trip %q -> %q", q.String(), q2.String())
		}
	}
}

func TestParseFields(t *testing.T) {
	q, err := Parse("from 'My Orders' where a = 1 order by b.c desc, id() limit 3 offset 4", nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Collection != "My Orders" || q.AllDocs || q.Limit != 3 || q.Offset != 4 {
		t.Errorf("got %+v", q)
	}
	c, ok := q.Where.(*Comparison)
	if !ok || strings.Join(c.Field, ".") != "a" || c.Op != Eq || c.Value != 1.0 {
		t.Errorf("where = %#v", q.Where)
	}
	if len(q.OrderBy) != 2 || strings.Join(q.OrderBy[0].Field, ".") != "b.c" || !q.OrderBy[0].Desc ||
		strings.Join(q.OrderBy[1].Field, ".") != "@metadata.@id" || q.OrderBy[1].Desc {
		t.Errorf("order by = %+v", q.OrderBy)
	}
	q, err = Parse("from @all_docs", nil)
	if err != nil || !q.AllDocs || q.Where != nil || q.Limit != -1 || q.Offset != 0 {
		t.Errorf("@all_docs: %+v, %v", q, err)
	}
}

func TestParseErrors(t *testing.T) {
	params := map[string]any{"p0": 1, "s": "x", "obj": map[string]any{}, "arr": []any{"a", "b"}, "nested": []any{1, []any{}}}
	tests := []struct {
		in  string
		pos int
		msg string
	}{
		{"", 0, "empty query"},
		{"   ", 0, "empty query"},
		{"select * from X", 0, "expected 'from', found 'select'"},
		{"  Orders", 2, "expected 'from'"},
		{"from", 4, "expected collection name, found end of query"},
		{"from where", 5, "expected collection name, found 'where'"},
		{"from ''", 5, "empty collection name"},
		{"from @foo", 5, "unknown source @foo"},
		{"from Orders # x", 12, "unexpected character '#'"},
		{"from Orders where A = 1 & B = 2", 24, "unexpected character '&'"},
		{"from Orders where A ! 1", 20, "unexpected character '!'"},
		{"from Orders where A = \xff", 22, "invalid UTF-8 byte 0xff"},
		{"from Orders where Name = 'abc", 25, "unterminated string"},
		{`from Orders where Name = "abc\`, 25, "unterminated string"},
		{`from Orders where Name = 'a\qb'`, 27, `invalid escape sequence \q`},
		{"from Orders where A =", 21, "expected value, found end of query"},
		{"from Orders where A = and B = 1", 22, "expected value, found 'and'"},
		{"from Orders where A = )", 22, "expected value, found ')'"},
		{"from Orders where A 1", 20, "expected comparison operator, 'in' or 'between', found number 1"},
		{"from Orders where", 17, "expected field name, found end of query"},
		{"from Orders where and = 1", 18, "expected field name, found 'and'"},
		{"from Orders where '' = 1", 18, "empty field name"},
		{"from Orders where A. = 1", 21, "expected field name after '.', found '='"},
		{"from Orders where id( = 1", 22, "expected ')', found '='"},
		{"from Orders where (A = 1", 24, "expected ')' to close '(' at position 18, found end of query"},
		{"from Orders where ((A = 1) or B = 2", 35, "expected ')' to close '(' at position 18"},
		{"from Orders where A = 1)", 23, "expected end of query, found ')'"},
		{"from Orders where A = 1 B = 2", 24, "expected end of query, found 'B'"},
		{"from Orders where A = 1 order Name", 30, "expected 'by', found 'Name'"},
		{"from Orders order by", 20, "expected field name, found end of query"},
		{"from Orders order by A,", 23, "expected field name"},
		{"from Orders order by A limit 1 where B = 1", 31, "expected end of query, found 'where'"},
		{"from Orders limit -5", 18, "limit must be an integer from 0 to 2147483647, found -5"},
		{"from Orders offset -1", 19, "offset must be an integer from 0 to 2147483647, found -1"},
		{"from Orders limit 1.5", 18, "limit must be an integer from 0 to 2147483647, found 1.5"},
		{"from Orders limit 1e12", 18, "limit must be an integer from 0 to 2147483647, found 1e12"},
		{"from Orders limit 99999999999", 18, "limit must be an integer from 0 to 2147483647, found 99999999999"},
		{"from Orders limit", 17, "expected non-negative integer, found end of query"},
		{"from Orders limit 'x'", 18, "expected non-negative integer, found string 'x'"},
		{"from Orders limit $s", 18, "limit must be an integer from 0 to 2147483647, found 'x'"},
		{"from Orders limit 1 limit 2", 20, "duplicate 'limit' clause"},
		{"from Orders offset 1 limit 2 OFFSET 3", 29, "duplicate 'offset' clause"},
		{"from Orders where A = 1.2.3", 22, `bad number "1.2.3"`},
		{"from Orders where A = 12abc", 22, `bad number "12abc"`},
		{"from Orders where A = 1and B = 2", 22, `bad number "1and"`},
		{"from Orders where A = 1e", 22, `bad number "1e"`},
		{"from Orders where A = 1.", 22, `bad number "1."`},
		{"from Orders where A = 1e999", 22, "number 1e999 out of range"},
		{"from Orders where A = -", 22, "unexpected character '-'"},
		{"from Orders where A = $p9", 22, "unknown parameter $p9"},
		{"from Orders where A = $", 22, "expected parameter name after '$'"},
		{"from Orders where A = $obj", 22, "parameter $obj is a JSON object: a parameter must be null, a bool, a number or a string"},
		{"from Orders limit 1, 2 offset 3", 23, "duplicate 'offset' clause"},
		{"from Orders offset 3 limit 1, 2", 28, "'limit offset, count' after an 'offset' clause"},
		{"from Orders limit 1,", 20, "expected non-negative integer, found end of query"},
		{"from Orders limit -1, 2", 18, "limit must be an integer from 0 to 2147483647, found -1"},
		{"from Orders where A in 1", 23, "expected '(' after 'in'"},
		{"from Orders where A in (1 2)", 26, "expected ',' or ')' to close '(' at position 23"},
		{"from Orders where A in (, 1)", 24, "expected value, found ','"},
		{"from Orders where A in (1,)", 26, "expected value, found ')'"},
		{"from Orders where A in ($obj)", 24, "parameter $obj is a JSON object"},
		{"from Orders where A in ($nested)", 24, "parameter $nested: element 1 is a JSON array"},
		{"from Orders where A between 1 or 2", 30, "expected 'and' of 'between', found 'or'"},
		{"from Orders where A between 1", 29, "expected 'and' of 'between', found end of query"},
		{"from Orders where startsWith(A)", 30, "expected ',' and the value startsWith takes, found ')'"},
		{"from Orders where startsWith(A, 'x'", 35, "expected ')' to close startsWith( at position 28"},
		{"from Orders where exists(A, 1)", 26, "expected ')' to close exists( at position 24"},
		{"from Orders where exists()", 25, "expected field name, found ')'"},
		{"from Orders include", 19, "expected field name to include, found end of query"},
		{"from Orders include a,", 22, "expected field name to include, found end of query"},
		{"from Orders include a[", 22, "expected ']', found end of query"},
		{"from Orders include a.", 22, "expected field name after '.', found end of query"},
		{"from Orders include not", 20, "expected field name to include, found 'not'"},
		{"from Orders where A[] = 1", 19, "expected comparison operator, 'in' or 'between', found '['"},
		{"from Orders where A = $arr", 22, "parameter $arr is a JSON array: a parameter must be null, a bool, a number or a string (arrays and objects are not supported)"},
	}
	for _, tt := range tests {
		q, err := Parse(tt.in, params)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("Parse(%q) = %v, %v; want *ParseError", tt.in, q, err)
			continue
		}
		if pe.Pos != tt.pos || !strings.Contains(pe.Msg, tt.msg) || pe.Query != tt.in {
			t.Errorf("Parse(%q) error = {Pos:%d Msg:%q}, want {Pos:%d Msg:~%q}", tt.in, pe.Pos, pe.Msg, tt.pos, tt.msg)
		}
	}
}

func TestParseErrorString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"from Orders where A = 1 # x", `rql: unexpected character '#' at position 24: near "# x"`},
		{"from Orders where A =", `rql: expected value, found end of query at position 21: near end of query`},
		{"from Orders where A = $p0 and B = 'a long string value here'",
			`rql: unknown parameter $p0 at position 22: near "$p0 and B = 'a long "...`},
		{"from X where A = 1 é\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9", `rql: expected end of query, found 'é` +
			"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9" + `' at position 19: near "éééééééééé"...`},
	}
	for _, tt := range tests {
		_, err := Parse(tt.in, nil)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Parse(%q) error:\n got %v\nwant %s", tt.in, err, tt.want)
		}
	}
}

// TestQuotedFieldNames: a field whose name is a keyword or holds other
// characters is written quoted, as RavenDB's clients write it, and the
// canonical form quotes it again.
func TestQuotedFieldNames(t *testing.T) {
	doc := map[string]any{"Not": 1.0, "First Name": "Ada", "a.b": true,
		"@metadata": map[string]any{"@id": "u/1", "@collection": "U", "@last-modified": "2026-11-30T00:00:00Z"}}
	for q, canon := range map[string]string{
		"from U where 'Not' = 1":                                   "from U where 'Not' = 1",
		`from U where "First Name" = 'ada'`:                        "from U where 'First Name' = 'ada'",
		"from U where @metadata.'@last-modified' > '2026'":         "from U where @metadata.'@last-modified' > '2026'",
		"from U where 'a.b' = true":                                "from U where 'a.b' = true",
		"from U where 'Not' = 1 order by 'First Name' desc, 'Not'": "from U where 'Not' = 1 order by 'First Name' desc, 'Not'",
	} {
		parsed, err := Parse(q, nil)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if got := parsed.String(); got != canon {
			t.Errorf("%s: canonical %q, want %q", q, got, canon)
		}
		if !parsed.Matches(doc) {
			t.Errorf("%s: does not match %v", q, doc)
		}
	}
}
