package document

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// AppendTime is time.Format with TimeFormat, for any instant and zone.
func TestAppendTimeIsTimeFormat(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sec := rapid.Int64Range(-62135596800, 253402300799).Draw(t, "sec") // years 1 to 9999
		nsec := rapid.Int64Range(0, 999_999_999).Draw(t, "nsec")
		off := rapid.IntRange(-14*3600, 14*3600).Draw(t, "offset")
		tm := time.Unix(sec, nsec).In(time.FixedZone("z", off))
		want := tm.UTC().Format(TimeFormat)
		if got := string(AppendTime([]byte("x"), tm)); got != "x"+want {
			t.Fatalf("AppendTime(%v) = %q, want %q", tm, got, "x"+want)
		}
	})
	for _, tm := range []time.Time{{}, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if got, want := string(AppendTime(nil, tm)), tm.UTC().Format(TimeFormat); got != want {
			t.Errorf("AppendTime(%v) = %q, want %q", tm, got, want)
		}
	}
}

func BenchmarkAppendTime(b *testing.B) {
	tm := time.Date(2026, 11, 30, 8, 15, 42, 123456789, time.UTC)
	buf := make([]byte, 0, 64)
	for i := 0; i < b.N; i++ {
		buf = AppendTime(buf[:0], tm)
	}
}
