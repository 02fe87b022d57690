package bucket

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
	"pgregory.net/rapid"
)

// sum is the reference hash of already-prepared text.
func sum(text string) uint32 { return uint32(xxhash.Sum64String(text) % (1 << 20)) }

func TestForIDVectors(t *testing.T) {
	tests := []struct {
		id     string
		hashed string // the text that must be hashed, written out by hand
	}{
		{"users/1", "users/1"},
		{"Users/1", "users/1"},
		{"USERS/1", "users/1"},
		{"companies/1-A", "companies/1-a"},
		{"orders/7$users/4", "users/4"},
		{"Orders/7$Users/4", "users/4"},
		{"a$b$c/1", "c/1"},
		{"orders/1$$users/2", "users/2"},
		{"$x", "$x"},
		{"$", "$"},
		{"$a$b", "b"},
		{"Ünïcode/1", "ünïcode/1"},
		{"ΣΊΣΥΦΟΣ", "σίσυφοσ"}, // simple per-rune mapping: no final sigma
		{"注文/1", "注文/1"},
		{"ユーザー/Ä$注文/1", "注文/1"},
		{"Straße/1", "straße/1"},
		{"", ""},
	}
	for _, tt := range tests {
		if got, want := ForID(tt.id), sum(tt.hashed); got != want {
			t.Errorf("ForID(%q) = %d, want %d (hash of %q)", tt.id, got, want, tt.hashed)
		}
	}
	eq := [][2]string{
		{"Users/1", "users/1"},
		{"orders/7$users/4", "users/4"},
		{"x$y$users/4", "users/4"},
		{"ΣΊΣΥΦΟΣ", "σίσυφοσ"},
		{"ÜNÏCODE/1", "ünïcode/1"},
	}
	for _, p := range eq {
		if ForID(p[0]) != ForID(p[1]) {
			t.Errorf("ForID(%q) = %d != ForID(%q) = %d", p[0], ForID(p[0]), p[1], ForID(p[1]))
		}
	}
	if ForID("$x") == ForID("x") {
		t.Errorf("a leading '$' must not anchor")
	}
}

// TestForIDGolden pins literal values (cross-checked with an independent
// XXH64 implementation) so that any change of the hash breaks the test.
func TestForIDGolden(t *testing.T) {
	golden := map[string]uint32{
		"users/1":          1005385,
		"Users/1":          1005385,
		"orders/7$users/4": 690258,
		"companies/1-A":    471216,
		"ΣΊΣΥΦΟΣ":          490666,
		"注文/1":             146455,
		"Ünïcode/1":        61790,
		"$x":               833417,
		"":                 584089,
		"products/0000000000000000000000000000000042-A": 259201, // > 32 bytes
	}
	for id, want := range golden {
		if got := ForID(id); got != want {
			t.Errorf("ForID(%q) = %d, want %d", id, got, want)
		}
	}
}

func TestValidateID(t *testing.T) {
	ok := []string{"users/1", "orders/7$users/4", "$x", "注文/1", "a", strings.Repeat("é", MaxIDLength/2), "\uFFFD"}
	for _, id := range ok {
		if err := ValidateID(id); err != nil {
			t.Errorf("ValidateID(%q) = %v, want nil", id, err)
		}
	}
	bad := []struct {
		id   string
		want error
	}{
		{"", ErrEmptyID},
		{"orders/1$", ErrIDEndsWithDollar},
		{"$", ErrIDEndsWithDollar},
		{strings.Repeat("a", MaxIDLength+1), ErrIDTooLong},
		{strings.Repeat("é", MaxIDLength/2) + "a", ErrIDTooLong},
		{"users/\xff", ErrIDNotUTF8},
		{"\xc3", ErrIDNotUTF8},
		{"users/\x001", ErrIDControlChar},
		{"users/1\n", ErrIDControlChar},
		{"users/\x7f", ErrIDControlChar},
		{"users/\u0085", ErrIDControlChar},
	}
	for _, tt := range bad {
		err := ValidateID(tt.id)
		if !errors.Is(err, tt.want) {
			t.Errorf("ValidateID(%q) = %v, want %v", tt.id, err, tt.want)
		}
	}
	if err := ValidateID("ab\x07"); err == nil || !strings.Contains(err.Error(), "U+0007 at offset 2") {
		t.Errorf("control char error does not locate the problem: %v", err)
	}
}

// TestIDLengthIsTheShortestSpelling: an id is measured in its shortest
// spelling, so a document's spellings whose cases differ in length are
// accepted or refused alike.
func TestIDLengthIsTheShortestSpelling(t *testing.T) {
	a256 := strings.Repeat("Ⱥ", 256) // 512 bytes; 'ⱥ' takes 3
	if len(a256) != MaxIDLength || len(strings.ToLower(a256)) != 768 {
		t.Fatalf("test runes have the wrong lengths")
	}
	for _, tt := range []struct {
		id       string
		shortest int
	}{
		{a256, 512},
		{strings.ToLower(a256), 512}, // the lower case is longer
		{strings.Repeat("Ⱦ", 200) + strings.Repeat("ⱦ", 56), 512},
		{strings.Repeat("ß", 256), 512},
		{strings.Repeat("ẞ", 256), 512},                  // 768 bytes; lower-cases to 'ß'
		{strings.ToUpper(strings.Repeat("ɐ", 256)), 512}, // 'Ɐ': the upper case is longer
		{strings.Repeat("\u212a", MaxIDLength), 512},     // KELVIN SIGN, 1536 bytes: 'k'
		{strings.Repeat("K\u212ak", 170) + "Kk", 512},    // one document, three spellings of 'k'
		{"users/" + strings.Repeat("é", 253), 512},       // 'é' and 'É' both take 2
		{strings.Repeat("İ", 256), 256},                  // lower-cases to 'i'
	} {
		if got := ShortestLength(tt.id); got != tt.shortest {
			t.Errorf("ShortestLength(%.20q… %d bytes) = %d, want %d", tt.id, len(tt.id), got, tt.shortest)
		}
		for _, s := range []string{tt.id, strings.ToLower(tt.id), strings.ToUpper(tt.id)} {
			if strings.ToLower(s) != strings.ToLower(tt.id) {
				continue // another document
			}
			if err := ValidateID(s); err != nil {
				t.Errorf("ValidateID(%.20q… %d bytes) = %v, want nil", s, len(s), err)
			}
		}
	}
	if ShortestLength("\xff\xfe") != 2 {
		t.Errorf("a byte that is not UTF-8 does not count as one")
	}

	for _, tt := range []struct {
		id   string
		want string // in the error
	}{
		{a256 + "a", "513 bytes in its shortest spelling (max 512)"},
		{strings.ToLower(a256) + "a", "513 bytes in its shortest spelling, 769 as sent (max 512 in the shortest spelling)"},
		{strings.Repeat("ẞ", 257), "514 bytes in its shortest spelling, 771 as sent"},
		{strings.Repeat("ß", 257), "514 bytes in its shortest spelling (max 512)"},
		{strings.Repeat("\u212a", MaxIDLength+1), "513 bytes in its shortest spelling, 1539 as sent"},
		{strings.Repeat("a", MaxIDLength+1), "513 bytes in its shortest spelling (max 512)"},
		{strings.Repeat("a", MaxIDInputLength+1), "2049 bytes as sent (max 2048 as sent, and 512 in the id's shortest spelling)"},
		{strings.Repeat("x", 1<<20), "1048576 bytes as sent"},
	} {
		err := ValidateID(tt.id)
		if !errors.Is(err, ErrIDTooLong) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ValidateID(%.20q… %d bytes) = %v, want ErrIDTooLong saying %q", tt.id, len(tt.id), err, tt.want)
		}
		if err2 := ValidateID(strings.ToUpper(tt.id)); !errors.Is(err2, ErrIDTooLong) {
			t.Errorf("ValidateID of the upper case of %.20q… = %v, want ErrIDTooLong", tt.id, err2)
		}
	}
}

// TestShortestRuneLengthIsExact checks shortestRuneLength against every
// rune: for each rune that some rune lower-cases to, it is the smallest
// UTF-8 length among the runes that do. It also checks that lower-casing
// twice changes nothing, so that strings.ToLower(id) is a spelling of the
// document id names.
func TestShortestRuneLengthIsExact(t *testing.T) {
	least := map[rune]int{}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		c := unicode.ToLower(r)
		if unicode.ToLower(c) != c {
			t.Errorf("ToLower(%U) = %U, which lower-cases to %U", r, c, unicode.ToLower(c))
		}
		if m, ok := least[c]; !ok || utf8.RuneLen(r) < m {
			least[c] = utf8.RuneLen(r)
		}
	}
	shorter := 0
	for c, m := range least {
		if got := shortestRuneLength(c); got != m {
			t.Errorf("shortestRuneLength(%U) = %d, want %d", c, got, m)
		}
		if m < utf8.RuneLen(c) {
			shorter++
		}
	}
	if shorter == 0 {
		t.Errorf("no lower-case rune has a shorter spelling: the test runes are wrong")
	}
}

// oldValidateID is ValidateID as it was, with a limit on the bytes as sent:
// the documents it let exist must be the documents that can exist.
func oldValidateID(id string) error {
	if len(id) > MaxIDLength {
		return ErrIDTooLong
	}
	return ValidateID(id)
}

// shortestSpelling spells id in its shortest form, by the oracle's search
// of every rune's case-fold orbit.
func shortestSpelling(id string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		best := r
		for o := unicode.SimpleFold(r); o != r; o = unicode.SimpleFold(o) {
			if unicode.ToLower(o) == r && utf8.RuneLen(o) < utf8.RuneLen(best) {
				best = o
			}
		}
		b.WriteRune(best)
	}
	return b.String()
}

// respell spells each rune of id as a random member of its case-fold orbit
// that lower-cases as it does: another spelling of the same document.
func respell(t *rapid.T, id string) string {
	var b strings.Builder
	for _, r := range id {
		c := unicode.ToLower(r)
		opts := []rune{r}
		for o := unicode.SimpleFold(r); o != r; o = unicode.SimpleFold(o) {
			if unicode.ToLower(o) == c {
				opts = append(opts, o)
			}
		}
		b.WriteRune(rapid.SampledFrom(opts).Draw(t, "spelling"))
	}
	return b.String()
}

// caseRunes are runes whose cases differ in length, and their neighbours.
var caseRunes = []rune{
	'Ⱥ', 'ⱥ', 'Ⱦ', 'ⱦ', 'ß', 'ẞ', 'ɐ', 'Ɐ', 'ɑ', 'Ɑ', '\u212a', 'k', 'K', '\u2126', 'ω', 'Ω',
	'İ', 'i', 'I', 'ı', 'ſ', 's', 'S', 'é', 'É', 'Σ', 'σ', 'ς', 'a', '/', '$', '-', '注',
}

// TestIDSpellingsAgree: every spelling of one document is accepted or
// refused alike (and for the same reason), an id the old limit accepted
// is still accepted, and an accepted id names a document the old limit
// let exist: its shortest spelling passed it.
func TestIDSpellingsAgree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		runes := rapid.OneOf(rapid.SampledFrom(caseRunes), rapid.Rune())
		// A run of one rune brings the id near the limit in any of its
		// cases; the rest is random.
		pad := strings.Repeat(string(rapid.SampledFrom(caseRunes).Draw(t, "pad")), rapid.IntRange(0, 800).Draw(t, "padding"))
		id := rapid.StringOf(runes).Draw(t, "head") + pad + rapid.StringOf(runes).Draw(t, "tail")
		err := ValidateID(id)
		if oldValidateID(id) == nil && err != nil {
			t.Fatalf("ValidateID(%q) = %v, but the old limit accepted it", id, err)
		}
		if short := shortestSpelling(id); len(short) != ShortestLength(id) {
			t.Fatalf("ShortestLength(%q) = %d, but %q takes %d bytes", id, ShortestLength(id), short, len(short))
		} else if (err == nil) != (oldValidateID(short) == nil) {
			t.Fatalf("ValidateID(%q) = %v, but the old limit on its shortest spelling says %v", id, err, oldValidateID(short))
		}
		for _, s := range []string{strings.ToLower(id), strings.ToUpper(id), respell(t, id), shortestSpelling(id)} {
			if strings.ToLower(s) != strings.ToLower(id) {
				continue // another document ('ı' upper-cases to 'I', which lower-cases to 'i')
			}
			got := ValidateID(s)
			if (got == nil) != (err == nil) || !sameKind(got, err) {
				t.Fatalf("ValidateID(%q) = %v, but ValidateID(%q) = %v: one document, two answers", id, err, s, got)
			}
		}
	})
}

// sameKind reports whether two ValidateID errors wrap the same sentinel.
func sameKind(a, b error) bool {
	for _, e := range []error{ErrEmptyID, ErrIDTooLong, ErrIDNotUTF8, ErrIDControlChar, ErrIDEndsWithDollar} {
		if errors.Is(a, e) != errors.Is(b, e) {
			return false
		}
	}
	return true
}

func TestEvenSplit(t *testing.T) {
	tests := map[int]Ranges{
		1: {{0, 0}},
		2: {{0, 0}, {524288, 1}},
		3: {{0, 0}, {349525, 1}, {699050, 2}},
		7: {{0, 0}, {149796, 1}, {299592, 2}, {449388, 3}, {599184, 4}, {748980, 5}, {898776, 6}},
	}
	for n, want := range tests {
		got := EvenSplit(n)
		if !slices.Equal(got, want) {
			t.Errorf("EvenSplit(%d) = %v, want %v", n, got, want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("EvenSplit(%d).Validate() = %v", n, err)
		}
	}
	if from, to := EvenSplit(3).Span(0); from != 0 || to != 349524 {
		t.Errorf("Span(0) = %d..%d", from, to)
	}
	if from, to := EvenSplit(3).Span(2); from != 699050 || to != MaxID {
		t.Errorf("Span(2) = %d..%d", from, to)
	}
	for _, n := range []int{0, -1, Count + 1} {
		if r := EvenSplit(n); r != nil {
			t.Errorf("EvenSplit(%d) = %v, want nil", n, r)
		}
	}
	if err := EvenSplit(Count).Validate(); err != nil {
		t.Errorf("EvenSplit(Count): %v", err)
	}
}

func TestValidateRejects(t *testing.T) {
	bad := map[string]Ranges{
		"nil":            nil,
		"empty":          {},
		"first not 0":    {{1, 0}},
		"equal starts":   {{0, 0}, {5, 1}, {5, 2}},
		"decreasing":     {{0, 0}, {9, 1}, {5, 2}},
		"start >= Count": {{0, 0}, {Count, 1}},
		"same shard":     {{0, 0}, {5, 1}, {9, 1}},
		"negative shard": {{0, 0}, {5, -1}},
	}
	for name, r := range bad {
		if err := r.Validate(); !errors.Is(err, ErrInvalidRanges) {
			t.Errorf("%s: Validate(%v) = %v, want ErrInvalidRanges", name, r, err)
		}
	}
	if err := (Ranges{{0, 3}, {MaxID, 0}}).Validate(); err != nil {
		t.Errorf("valid ranges rejected: %v", err)
	}
}

func TestRangesHelpers(t *testing.T) {
	r := EvenSplit(3).Move(0, 2).MoveRange(349525, 349526, 5)
	want := Ranges{{0, 2}, {1, 0}, {349525, 5}, {349527, 1}, {699050, 2}}
	if !slices.Equal(r, want) {
		t.Fatalf("got %v, want %v", r, want)
	}
	if got := r.Shards(); !slices.Equal(got, []int{0, 1, 2, 5}) {
		t.Errorf("Shards() = %v", got)
	}
	counts := map[int]int{0: 349524, 1: 349523, 2: 349526 + 1, 5: 2}
	total := 0
	for s, n := range counts {
		if got := r.BucketsOf(s); got != n {
			t.Errorf("BucketsOf(%d) = %d, want %d", s, got, n)
		}
		total += n
	}
	if total != Count || r.BucketsOf(9) != 0 {
		t.Errorf("bucket counts do not add up: %d", total)
	}
	for b, s := range map[uint32]int{0: 2, 1: 0, 349524: 0, 349525: 5, 349526: 5, 349527: 1, 699049: 1, 699050: 2, MaxID: 2} {
		if got := r.ShardOf(b); got != s {
			t.Errorf("ShardOf(%d) = %d, want %d", b, got, s)
		}
	}
	if Ranges(nil).ShardOf(0) != -1 {
		t.Errorf("ShardOf on empty ranges should be -1")
	}
	// Moving back restores the even split exactly.
	back := r.Move(0, 0).MoveRange(349525, 349526, 1)
	if !slices.Equal(back, EvenSplit(3)) {
		t.Errorf("moving back gave %v", back)
	}
	// Moving everything leaves one entry.
	if all := r.MoveRange(0, MaxID, 4); !slices.Equal(all, Ranges{{0, 4}}) {
		t.Errorf("MoveRange(0, MaxID) = %v", all)
	}
}

func TestMovePanicsOnBadArgs(t *testing.T) {
	for _, f := range []func(){
		func() { EvenSplit(2).MoveRange(5, 4, 0) },
		func() { EvenSplit(2).Move(Count, 0) },
		func() { EvenSplit(2).Move(0, -1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("expected a panic")
				}
			}()
			f()
		}()
	}
}

func TestRangesJSON(t *testing.T) {
	b, err := json.Marshal(EvenSplit(2))
	if err != nil {
		t.Fatal(err)
	}
	const want = `[{"BucketRangeStart":0,"ShardNumber":0},{"BucketRangeStart":524288,"ShardNumber":1}]`
	if string(b) != want {
		t.Errorf("json = %s, want %s", b, want)
	}
}

// model is the reference: the initial split plus moves applied in order
// (a later move wins).
type model struct {
	initial Ranges
	moves   []move
}

type move struct {
	from, to uint32
	shard    int
}

func (m *model) shardOf(b uint32) int {
	for i := len(m.moves) - 1; i >= 0; i-- {
		if mv := m.moves[i]; mv.from <= b && b <= mv.to {
			return mv.shard
		}
	}
	return m.initial.ShardOf(b)
}

// canonical builds the minimal ranges of the model: owners can only change
// at the initial starts and at move edges.
func (m *model) canonical() Ranges {
	points := []uint32{0}
	for _, e := range m.initial {
		points = append(points, e.BucketRangeStart)
	}
	for _, mv := range m.moves {
		points = append(points, mv.from)
		if mv.to < MaxID {
			points = append(points, mv.to+1)
		}
	}
	slices.Sort(points)
	var out Ranges
	for _, p := range slices.Compact(points) {
		s := m.shardOf(p)
		if len(out) == 0 || out[len(out)-1].ShardNumber != s {
			out = append(out, Range{p, s})
		}
	}
	return out
}

// drawBucket draws a bucket biased towards 0, MaxID and range starts ±1.
func drawBucket(t *rapid.T, r Ranges, label string) uint32 {
	switch rapid.IntRange(0, 3).Draw(t, label+"-kind") {
	case 0:
		return rapid.SampledFrom([]uint32{0, 1, MaxID - 1, MaxID}).Draw(t, label)
	case 1:
		s := int64(rapid.SampledFrom(r).Draw(t, label+"-range").BucketRangeStart)
		s += int64(rapid.IntRange(-1, 1).Draw(t, label+"-delta"))
		return uint32(min(max(s, 0), MaxID))
	default:
		return rapid.Uint32Range(0, MaxID).Draw(t, label)
	}
}

func TestMoveProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(t, "shards")
		m := &model{initial: EvenSplit(n)}
		r := EvenSplit(n)
		steps := rapid.IntRange(1, 30).Draw(t, "steps")
		// Random samples come from a seeded PRNG: reproducible, but cheap
		// to shrink.
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 0))
		for step := 0; step < steps; step++ {
			shard := rapid.IntRange(0, n+2).Draw(t, "shard")
			from := drawBucket(t, r, "from")
			to := from
			if rapid.Bool().Draw(t, "range") {
				if rapid.Bool().Draw(t, "short") {
					to = uint32(min(int64(from)+int64(rapid.IntRange(0, 3).Draw(t, "len")), MaxID))
				} else {
					to = drawBucket(t, r, "to")
				}
				if to < from {
					from, to = to, from
				}
			}
			before := slices.Clone(r)
			var next Ranges
			if from == to && rapid.Bool().Draw(t, "single") {
				next = r.Move(from, shard)
			} else {
				next = r.MoveRange(from, to, shard)
			}
			if !slices.Equal(r, before) {
				t.Fatalf("step %d: input mutated: %v -> %v", step, before, r)
			}
			m.moves = append(m.moves, move{from, to, shard})
			r = next

			if err := r.Validate(); err != nil {
				t.Fatalf("step %d: after moving %d..%d to %d: %v (%v)", step, from, to, shard, err, r)
			}
			if want := m.canonical(); !slices.Equal(r, want) {
				t.Fatalf("step %d: after moving %d..%d to %d: got %v, want %v", step, from, to, shard, r, want)
			}
			for _, b := range []uint32{from, to, from + (to-from)/2} {
				if got := r.ShardOf(b); got != shard {
					t.Fatalf("step %d: moved bucket %d maps to %d, want %d", step, b, got, shard)
				}
			}
			samples := []uint32{0, MaxID}
			for _, e := range before {
				s := e.BucketRangeStart
				samples = append(samples, s, min(s+1, MaxID), max(s, 1)-1)
			}
			for _, b := range []uint32{from, to} {
				samples = append(samples, max(b, 1)-1, min(b+1, MaxID))
			}
			for range 200 {
				samples = append(samples, rng.Uint32N(Count))
			}
			for _, b := range samples {
				if got, want := r.ShardOf(b), m.shardOf(b); got != want {
					t.Fatalf("step %d: bucket %d maps to %d, model says %d (%v)", step, b, got, want, r)
				}
			}
			total := 0
			for _, s := range r.Shards() {
				total += r.BucketsOf(s)
			}
			if total != Count {
				t.Fatalf("step %d: buckets add up to %d", step, total)
			}
		}
	})
}

func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"users/1", "", "a$", "$x", "orders/7$users/4", "\xff", "注文/1", "a\x00b", strings.Repeat("Ⱥ", 256), strings.Repeat("ẞ", 257)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateID(id)
		if err == nil {
			if id == "" || len(id) > MaxIDInputLength || ShortestLength(id) > MaxIDLength || !utf8.ValidString(id) || strings.HasSuffix(id, "$") {
				t.Fatalf("ValidateID(%q) accepted a bad id", id)
			}
		} else if err.Error() == "" {
			t.Fatalf("empty error message")
		}
		if len(id) <= MaxIDLength && errors.Is(err, ErrIDTooLong) {
			t.Fatalf("ValidateID(%q) refused an id of %d bytes as too long", id, len(id))
		}
		if utf8.ValidString(id) {
			for _, s := range []string{strings.ToLower(id), strings.ToUpper(id)} {
				if strings.ToLower(s) == strings.ToLower(id) && !sameKind(ValidateID(s), err) {
					t.Fatalf("ValidateID(%q) = %v, but ValidateID(%q) = %v", id, err, s, ValidateID(s))
				}
			}
		}
	})
}

func FuzzForID(f *testing.F) {
	for _, s := range []string{"users/1", "", "$", "a$", "$x", "orders/7$users/4", "\xff", "ΣΊΣΥΦΟΣ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		b := ForID(id)
		if b > MaxID {
			t.Fatalf("ForID(%q) = %d > MaxID", id, b)
		}
		if up := strings.ToUpper(id); ForID(strings.ToLower(id)) != b || ForID(up) != ForID(strings.ToLower(up)) {
			t.Fatalf("ForID(%q) not case-insensitive", id)
		}
		if !strings.Contains(id, "$") && ForID("p$"+id) != b {
			t.Fatalf("ForID(%q) != ForID(%q)", "p$"+id, id)
		}
	})
}

func BenchmarkForID(b *testing.B) {
	for _, bc := range []struct{ name, id string }{
		{"lower", "users/1234567"},
		{"mixed", "Users/1234567-A"},
		{"anchored", "orders/7$users/1234567"},
		{"unicode", "ユーザー/Ünïcode/1"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				ForID(bc.id)
			}
		})
	}
}

// TestLostProperties: Lost finds the first bucket one valid range list
// gives a shard and another does not. Ownership is constant between the
// starts of either list, so checking every start of both is exhaustive.
func TestLostProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(t, "shards")
		moved := func(r Ranges, label string) Ranges {
			for range rapid.IntRange(0, 6).Draw(t, label+"-moves") {
				from := drawBucket(t, r, label+"-from")
				to := drawBucket(t, r, label+"-to")
				if to < from {
					from, to = to, from
				}
				r = r.MoveRange(from, to, rapid.IntRange(0, n).Draw(t, label+"-shard"))
			}
			return r
		}
		old := moved(EvenSplit(n), "old")
		next := moved(old, "next")
		shard := rapid.IntRange(0, n).Draw(t, "shard")
		var starts []uint32
		for _, e := range append(slices.Clone(old), next...) {
			starts = append(starts, e.BucketRangeStart)
		}
		slices.Sort(starts)
		want, wantOK := uint32(0), false
		for _, s := range starts {
			if old.ShardOf(s) == shard && next.ShardOf(s) != shard {
				want, wantOK = s, true
				break
			}
		}
		got, ok := old.Lost(next, shard)
		if ok != wantOK || got != want {
			t.Fatalf("Lost(%v, %v, %d) = %d, %v; want %d, %v", old, next, shard, got, ok, want, wantOK)
		}
	})
}

// TestMoveSpansIsMoveRangeInTurn checks the one-pass bulk move against
// MoveRange applied span by span, over ranges fragmented by random moves
// and spans in any order, overlapping, touching or reaching MaxID.
func TestMoveSpansIsMoveRangeInTurn(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(t, "shards")
		r := EvenSplit(n)
		for range rapid.IntRange(0, 20).Draw(t, "fragments") {
			from := drawBucket(t, r, "ffrom")
			to := min(from+uint32(rapid.IntRange(0, 5000).Draw(t, "flen")), MaxID)
			r = r.MoveRange(from, to, rapid.IntRange(0, n).Draw(t, "fshard"))
		}
		var spans []Span
		for range rapid.IntRange(0, 12).Draw(t, "spans") {
			from := drawBucket(t, r, "from")
			to := from
			switch rapid.IntRange(0, 2).Draw(t, "kind") {
			case 0:
				to = min(from+uint32(rapid.IntRange(0, 3).Draw(t, "len")), MaxID)
			case 1:
				to = drawBucket(t, r, "to")
			}
			if to < from {
				from, to = to, from
			}
			spans = append(spans, Span{From: from, To: to})
		}
		shard := rapid.IntRange(0, n+1).Draw(t, "shard")
		before, sbefore := slices.Clone(r), slices.Clone(spans)
		want := r
		for _, sp := range spans {
			want = want.MoveRange(sp.From, sp.To, shard)
		}
		got := r.MoveSpans(spans, shard)
		if !slices.Equal(r, before) || !slices.Equal(spans, sbefore) {
			t.Fatalf("input mutated")
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("moving %v to %d: %v (%v)", spans, shard, err, got)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("moving %v to %d over %v:\n got %v\nwant %v", spans, shard, r, got, want)
		}
	})
}
