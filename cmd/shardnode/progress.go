package main

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// This file holds the pure rendering of a resharding operation's progress:
// the redrawn terminal line, the plain log line, alerts and the closing
// summary. Nothing here does I/O or reads the clock, so tests call these
// functions directly.

// Operation statuses, as the server names them.
const (
	statusRunning   = "Running"
	statusCompleted = "Completed"
)

// operation is a resharding operation as GET
// /databases/{db}/resharding/{id} and the "operation" event show it.
type operation struct {
	OperationID  string `json:"OperationId"`
	FromBucket   uint32 `json:"FromBucket"`
	ToBucket     uint32 `json:"ToBucket"`
	ToShard      int    `json:"ToShard"`
	Status       string `json:"Status"`
	BucketsTotal int64  `json:"BucketsTotal"`
	BucketsDone  int64  `json:"BucketsDone"`
	// BucketsMigrated is absent (0) from servers older than the field.
	BucketsMigrated int64             `json:"BucketsMigrated"`
	DocumentsMoved  int64             `json:"DocumentsMoved"`
	BytesMoved      int64             `json:"BytesMoved"`
	StartedAt       time.Time         `json:"StartedAt"`
	EndedAt         time.Time         `json:"EndedAt"`
	StartIndex      uint64            `json:"StartIndex"`
	Errors          []string          `json:"Errors"`
	CurrentBuckets  []bucketMigration `json:"CurrentBuckets"`
	// MoreBuckets counts by status the buckets in flight the server did
	// not list in CurrentBuckets (it lists 100).
	MoreBuckets map[string]int `json:"MoreBuckets"`
	Alerts      []string       `json:"Alerts"`
	// CleanupHold is set while the operation starts no new bucket because
	// too many moved buckets wait for their source cleanup (a source node
	// is down): its progress stands still until they complete.
	CleanupHold *cleanupHold `json:"CleanupHold"`
}

// cleanupHold is an operation's CleanupHold: the database's moved buckets
// waiting for their source cleanup, and the bound they reached.
type cleanupHold struct {
	Waiting int `json:"Waiting"`
	Limit   int `json:"Limit"`
}

// heldText says that the operation is held, or is empty.
func heldText(op operation) string {
	if op.CleanupHold == nil {
		return ""
	}
	return fmt.Sprintf("HELD: %d moved buckets await source cleanup", op.CleanupHold.Waiting)
}

// finished reports whether the operation reached a final status. A
// cancelled operation is finished while a bucket it started still moves:
// see settled.
func (op *operation) finished() bool {
	return op != nil && op.Status != "" && op.Status != statusRunning
}

// settled reports whether the operation is finished and none of its
// buckets is still migrating, so its figures are final. After a cancel
// the bucket in flight finishes its move (and is counted) before that.
func (op *operation) settled() bool {
	return op.finished() && len(op.CurrentBuckets) == 0
}

// inFlightText says what a finished operation still waits for: "cancelled;
// waiting for the bucket in flight to finish", or empty.
func inFlightText(op operation) string {
	if !op.finished() || len(op.CurrentBuckets) == 0 {
		return ""
	}
	what := "the bucket in flight"
	if n := len(op.CurrentBuckets); n > 1 {
		what = fmt.Sprintf("the %d buckets in flight", n)
	}
	return fmt.Sprintf("%s; waiting for %s to finish", strings.ToLower(op.Status), what)
}

// countsMigrated reports whether the server counts the buckets that moved
// with data (BucketsMigrated); older servers leave it 0 however many
// documents moved.
func countsMigrated(op operation) bool {
	return op.BucketsMigrated > 0 || op.DocumentsMoved == 0
}

// rateUnit names the bucket rate: buckets that moved with data per second
// when the server counts them (empty buckets change owner in bulk, by the
// hundred thousand a second, which says nothing of how fast data moves),
// otherwise every bucket done.
func rateUnit(op operation) string {
	if countsMigrated(op) {
		return "data buckets/s"
	}
	return "buckets/s"
}

// rateCount is the count the bucket rate is taken of (see rateUnit).
func rateCount(op operation) int64 {
	if countsMigrated(op) {
		return op.BucketsMigrated
	}
	return op.BucketsDone
}

// opDuration is how long a settled operation took, the one figure its last
// progress line and its summary divide by: the server's StartedAt to
// EndedAt plus waited, the time the client saw a cancelled operation's
// bucket in flight still moving after EndedAt; or, without the server's
// times, wall, the time the client watched.
func opDuration(op operation, wall, waited time.Duration) time.Duration {
	if !op.StartedAt.IsZero() && !op.EndedAt.IsZero() && op.EndedAt.After(op.StartedAt) {
		return op.EndedAt.Sub(op.StartedAt) + waited
	}
	return wall
}

// bucketMigration is one live bucket migration, as the operation's
// "CurrentBuckets" and the list's "BucketMigrations" show it.
type bucketMigration struct {
	Bucket           uint32 `json:"Bucket"`
	SourceShard      int    `json:"SourceShard"`
	DestinationShard int    `json:"DestinationShard"`
	Status           string `json:"Status"`
	MigrationIndex   uint64 `json:"MigrationIndex"`
	OperationID      string `json:"OperationId"`
	Leftovers        bool   `json:"Leftovers"`
	Documents        int64  `json:"Documents"`
	Bytes            int64  `json:"Bytes"`
	LastError        string `json:"LastError"`
	Failures         int    `json:"Failures"`
	InStatusFor      string `json:"InStatusFor"`
	Stuck            bool   `json:"Stuck"`
	// WaitingFor names the nodes the step waits for (servers of this
	// version).
	WaitingFor []string `json:"WaitingFor"`
	// Sent is what the sender of a bucket long in Moving has sent so far
	// (servers of this version).
	Sent *sentProgress `json:"Sent"`
}

// sentProgress is a "Sent" object: a moving bucket's progress.
type sentProgress struct {
	Node          string `json:"Node"`
	Documents     int64  `json:"Documents"`
	Bytes         int64  `json:"Bytes"`
	LastStoredAgo string `json:"LastStoredAgo"`
}

// statusText is a migration's status, with what its sender has sent when
// the server says.
func (m bucketMigration) statusText() string {
	if m.Sent == nil {
		return m.Status
	}
	return fmt.Sprintf("%s (%s sent)", m.Status, humanBytes(m.Sent.Bytes))
}

// migrationEvent is a "migration" event's data: one step of one bucket.
type migrationEvent struct {
	Bucket           uint32 `json:"Bucket"`
	MigrationIndex   uint64 `json:"MigrationIndex"`
	SourceShard      int    `json:"SourceShard"`
	DestinationShard int    `json:"DestinationShard"`
	Step             string `json:"Step"`
	OperationID      string `json:"OperationId"`
	Error            string `json:"Error"`
}

// progressView is what one progress line shows: the operation plus what the
// client measured.
type progressView struct {
	Op         operation
	Elapsed    time.Duration
	BucketRate float64 // per second, of rateCount(Op); negative while unknown
	ByteRate   float64 // bytes per second, in-flight buckets' sent bytes included; negative while unknown
	Note       string  // e.g. "polling: event stream failed"
	// Total estimates the bytes the whole operation moves (see
	// estimateTotal); 0 when unknown, and the share done is then counted
	// in buckets.
	Total int64
}

// inFlightBytes is what the senders of the operation's buckets still in
// Moving have had stored so far (as far as the server shows it: buckets
// in Moving for over 2 s).
func inFlightBytes(op operation) int64 {
	var n int64
	for _, m := range op.CurrentBuckets {
		if m.Sent != nil && m.Status == "Moving" {
			n += m.Sent.Bytes
		}
	}
	return n
}

// movedBytes is the bytes moved so far: the buckets done and what is sent
// of those in flight.
func movedBytes(op operation) int64 {
	return op.BytesMoved + inFlightBytes(op)
}

// share is the percentage of the operation done: of its estimated bytes
// when there is an estimate and the operation moves any (empty buckets
// change owner by the hundred thousand at once and carry nothing), else
// of its buckets. Below 100 until the operation is settled: an estimate
// is only that.
func (v progressView) share() float64 {
	op := v.Op
	if v.Total <= 0 {
		return percent(op)
	}
	if op.settled() {
		return 100
	}
	return math.Floor(min(999, 1000*float64(movedBytes(op))/float64(v.Total))) / 10
}

// shareUnit names what share counts when it is not the buckets: " of
// data" (a sparse move has flipped most of its buckets long before most
// of its data moved), or empty.
func (v progressView) shareUnit() string {
	if v.Total <= 0 || v.Op.settled() {
		return ""
	}
	return " of data"
}

// eta estimates the time left from the estimate and the byte rate, or is
// empty when either is unknown, or while the operation is held: the rate
// then measures the hold (an ETA of 22 hours was seen), not the move.
func (v progressView) eta() string {
	if v.Total <= 0 || v.ByteRate <= 0 || v.Op.finished() || v.Op.CleanupHold != nil {
		return ""
	}
	left := max(v.Total-movedBytes(v.Op), 0)
	d := time.Duration(float64(left) / v.ByteRate * float64(time.Second)).Round(time.Second)
	if d < time.Second {
		return "ETA <1s"
	}
	return "ETA " + d.String()
}

// sizeText is the bytes moved, "of ~TOTAL" when estimated.
func (v progressView) sizeText() string {
	if v.Total <= 0 {
		return humanBytes(v.Op.BytesMoved)
	}
	return humanBytes(movedBytes(v.Op)) + " of ~" + humanBytes(max(v.Total, movedBytes(v.Op)))
}

// rates formats the bucket and byte rates: "1.20 data buckets/s 2.5 MB/s".
func (v progressView) rates() string {
	return fmt.Sprintf("%s %s %s", formatRate(v.BucketRate), rateUnit(v.Op), formatByteRate(v.ByteRate))
}

// formatByteRate formats bytes per second as the summary's throughput
// does, and a negative (unknown) rate as "- MB/s".
func formatByteRate(f float64) string {
	if f < 0 {
		return "- MB/s"
	}
	return humanBytes(int64(f)) + "/s"
}

// percent is the share of the operation's buckets already moved.
func percent(op operation) float64 {
	if op.BucketsTotal <= 0 {
		if op.finished() {
			return 100
		}
		return 0
	}
	// Round down, so that 100.0% means done.
	return math.Floor(min(1000, 1000*float64(op.BucketsDone)/float64(op.BucketsTotal))) / 10
}

// progressBar draws a bar of width cells filled to pct percent.
func progressBar(pct float64, width int) string {
	full := int(pct / 100 * float64(width))
	full = max(0, min(width, full))
	return "▕" + strings.Repeat("█", full) + strings.Repeat("░", width-full) + "▏"
}

// progressFields are the fields of a plain progress line, in order.
func progressFields(v progressView) []string {
	op := v.Op
	f := []string{
		fmt.Sprintf("%.1f%%%s", v.share(), v.shareUnit()),
		fmt.Sprintf("%s/%s buckets", humanCount(op.BucketsDone), humanCount(op.BucketsTotal)),
		docCount(op.DocumentsMoved),
		v.sizeText(),
		v.rates(),
		formatElapsed(v.Elapsed),
	}
	if eta := v.eta(); eta != "" {
		f = append(f, eta)
	}
	if h := heldText(op); h != "" {
		f = append(f, h)
	}
	if a := alertsText(op); a != "" {
		f = append(f, a)
	}
	return f
}

// alertsText counts the operation's alerts, or is empty.
func alertsText(op operation) string {
	if n := len(op.Alerts); n > 0 {
		return fmt.Sprintf("%d %s", n, plural(n, "ALERT", "ALERTS"))
	}
	return ""
}

// ttyLayouts are the terminal line's layouts, richest first: a narrower
// terminal gets a shorter bar, then shorter labels, then fewer fields: the
// docs, then the rates and bytes, then the elapsed time.
func ttyLayouts(v progressView) [][]string {
	op := v.Op
	pct := fmt.Sprintf("%5.1f%%", v.share())
	counts := fmt.Sprintf("%s/%s", humanCount(op.BucketsDone), humanCount(op.BucketsTotal))
	docs := docCount(op.DocumentsMoved)
	size := v.sizeText()
	rates := v.rates()
	short := fmt.Sprintf("%s/s %s", formatRate(v.BucketRate), formatByteRate(v.ByteRate))
	elapsed := formatElapsed(v.Elapsed)
	if eta := v.eta(); eta != "" {
		elapsed += " " + eta
	}
	if op.CleanupHold != nil {
		elapsed += " HELD"
	}
	bar := func(w int) string { return progressBar(v.share(), w) }
	layouts := [][]string{
		{bar(20), pct + v.shareUnit(), counts + " buckets", docs, size, rates, elapsed},
		{bar(10), pct + v.shareUnit(), counts + " buckets", docs, size, rates, elapsed},
		{bar(10), pct, counts + " buckets", docs, size, rates, elapsed},
		{bar(10), pct, counts, docs, size, short, elapsed},
		{pct, counts, docs, size, short, elapsed},
		{pct, counts, size, short, elapsed},
		{pct, counts, elapsed},
		{pct, counts},
	}
	if a := alertsText(op); a != "" {
		for i := range layouts {
			layouts[i] = append(layouts[i], a)
		}
	}
	return layouts
}

// renderTTY returns the progress line for a terminal of width columns: a
// carriage return, the line, and an erase-to-end-of-line, so that writing
// it again redraws the same line. The line never reaches the last column
// (which would wrap). It takes the richest layout that leaves room for the
// buckets migrating now (or for none, if no layout does), and gives those
// buckets and any note the room that is left.
func renderTTY(v progressView, width int) string {
	limit := max(width-1, 10)
	tail := currentText(v.Op.CurrentBuckets, v.Op.MoreBuckets, 3)
	if v.Note != "" {
		tail = strings.TrimPrefix(tail+" │ "+v.Note, " │ ")
	}
	const sep, tailSep = "  ", "  │ "
	layouts := ttyLayouts(v)
	line := strings.TrimLeft(strings.Join(layouts[len(layouts)-1], sep), " ")
	// On a wide terminal the migrating buckets may push out the bar and
	// long labels; on a narrow one the counts come first.
	want := min(utf8.RuneCountInString(tail), 20) + utf8.RuneCountInString(tailSep)
	if tail == "" || limit < 99 {
		want = 0
	}
	for _, reserve := range []int{want, 0} {
		fit := false
		for _, l := range layouts {
			if s := strings.TrimLeft(strings.Join(l, sep), " "); utf8.RuneCountInString(s)+reserve <= limit {
				line, fit = s, true
				break
			}
		}
		if fit {
			break
		}
	}
	if room := limit - utf8.RuneCountInString(line) - utf8.RuneCountInString(tailSep); tail != "" && room >= 8 {
		line += tailSep + truncate(tail, room)
	}
	return "\r" + truncate(line, limit) + "\x1b[K"
}

// renderPlain returns the progress as one self-contained line, for logs and
// pipes.
func renderPlain(v progressView) string {
	line := v.Op.Status + " " + strings.Join(progressFields(v), ", ")
	if cur := currentText(v.Op.CurrentBuckets, v.Op.MoreBuckets, 10); cur != "" {
		line += "; now: " + cur
	}
	if v.Note != "" {
		line += "; " + v.Note
	}
	return line + "\n"
}

// plainKey identifies the progress a plain line reports: counts is the
// operation's counts, news the rest worth a line of its own at once (the
// status, the note, the alerts, a bucket turning stuck or failing). The
// clock, the rates and the steps of healthy buckets are left out: they
// change all the time, and the terminal line shows them.
func plainKey(v progressView) (counts, news string) {
	op := v.Op
	var trouble []string
	for _, m := range op.CurrentBuckets {
		if m.Stuck || m.Failures > 0 {
			trouble = append(trouble, fmt.Sprintf("%d/%s/%t/%d", m.Bucket, m.Status, m.Stuck, m.Failures))
		}
	}
	slices.Sort(trouble)
	counts = fmt.Sprintf("%d|%d|%d|%d", op.BucketsTotal, op.BucketsDone, op.DocumentsMoved, op.BytesMoved)
	news = fmt.Sprintf("%s|%s|%d|%s", op.Status, v.Note, len(op.Alerts), strings.Join(trouble, ","))
	return counts, news
}

// currentText lists up to limit migrating buckets with their step and any
// trouble: "17 Moving, 530 Moved STUCK 1m5s, +2 more". Buckets still
// moving come first, then those moved and then those waiting for their
// cleanup, each in bucket order, as the server orders them: with a source
// node down, hundreds of flipped buckets wait for its cleanup, and the
// one bucket in transfer must not fall into "+N more" below them.
func currentText(cbs []bucketMigration, more map[string]int, limit int) string {
	if len(cbs) == 0 {
		return ""
	}
	cbs = slices.Clone(cbs)
	slices.SortFunc(cbs, func(a, b bucketMigration) int {
		return cmp.Or(cmp.Compare(stepRank(a.Status), stepRank(b.Status)), cmp.Compare(a.Bucket, b.Bucket))
	})
	// The buckets the server left out come after every one it listed.
	for _, status := range slices.SortedFunc(maps.Keys(more), func(a, b string) int {
		return cmp.Or(cmp.Compare(stepRank(a), stepRank(b)), strings.Compare(a, b))
	}) {
		for range more[status] {
			cbs = append(cbs, bucketMigration{Bucket: math.MaxUint32, Status: status})
		}
	}
	var parts []string
	for i, m := range cbs {
		if i == limit {
			parts = append(parts, fmt.Sprintf("+%d more", len(cbs)-limit)+restText(cbs[limit:]))
			break
		}
		s := fmt.Sprintf("%d %s", m.Bucket, m.statusText())
		if m.Stuck {
			s += " STUCK"
			if d, err := time.ParseDuration(m.InStatusFor); err == nil {
				s += " " + formatElapsed(d)
			}
		}
		if m.Failures > 0 {
			s += fmt.Sprintf(" failing×%d", m.Failures)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// stepRank orders a bucket's statuses as a move goes through them.
func stepRank(status string) int {
	switch status {
	case "Moving":
		return 0
	case "Moved":
		return 1
	default:
		return 2
	}
}

// restText counts the buckets currentText does not list by step, stuck
// ones apart: " (340 OwnershipTransferred STUCK, 8 Moved)". With a source
// node down, every bucket flipped since waits for its cleanup, and "+348
// more" alone did not say what they were doing. One bucket is counted by
// "+1 more" alone.
func restText(rest []bucketMigration) string {
	if len(rest) < 2 {
		return ""
	}
	var order []string
	counts := map[string]int{}
	for _, m := range rest {
		k := m.Status
		if m.Stuck {
			k += " STUCK"
		}
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	slices.SortStableFunc(order, func(a, b string) int { return counts[b] - counts[a] })
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%s %s", humanCount(int64(counts[k])), k)
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// renderAlert returns one alert or error line. On a terminal it first
// erases the progress line it replaces and colours the label.
func renderAlert(label, text string, tty, color bool) string {
	if tty {
		if color {
			label = "\x1b[1;33m" + label + "\x1b[0m"
		}
		return "\r\x1b[K" + label + " " + text + "\n"
	}
	return label + " " + text + "\n"
}

// durationToken matches a Go duration inside an alert, such as the time a
// stuck bucket has spent in its step.
var durationToken = regexp.MustCompile(`\b[0-9][0-9.]*(ns|µs|us|ms|s|m|h)([0-9][0-9.]*(ns|µs|us|ms|s|m|h))*\b`)

// bucketGroup matches the count and the bucket list of an alert that
// several stuck buckets share ("12 buckets stuck in ... (buckets 3, 4
// and 10 more)").
var bucketGroup = regexp.MustCompile(`^[0-9]+ (buckets .*) \(buckets [0-9, ]+( and [0-9]+ more)?\)$`)

// alertKey identifies an alert across refreshes: the same alert with a
// longer duration in it is not new, nor is one that several buckets share
// when more of them join it or some leave (as cleanups complete).
func alertKey(alert string) string {
	if m := bucketGroup.FindStringSubmatch(alert); m != nil {
		alert = m[1]
	}
	return durationToken.ReplaceAllString(alert, "…")
}

// bucketsSplit says how many of the moved buckets carried data, when the
// server reports it: ": 15 with data, one at a time; 349,510 empty, at
// once".
func bucketsSplit(op operation) string {
	if op.BucketsMigrated == 0 && op.DocumentsMoved > 0 {
		return "" // an older server
	}
	return fmt.Sprintf(": %s with data, one at a time; %s empty, at once", humanCount(op.BucketsMigrated), humanCount(op.BucketsDone-op.BucketsMigrated))
}

// renderSummary returns the closing summary of a settled operation. wall
// is the time this client watched it, used when the server's times are
// missing; waited is the time it saw a cancelled operation's bucket in
// flight still moving (see opDuration). The rates agree with the last
// progress line's, which divides by the same duration.
func renderSummary(op operation, wall, waited time.Duration) string {
	d := opDuration(op, wall, waited)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: buckets %d-%d to shard %d (operation %s)\n", op.Status, op.FromBucket, op.ToBucket, op.ToShard, op.OperationID)
	fmt.Fprintf(&b, "  Buckets     %s of %s moved%s\n", humanCount(op.BucketsDone), humanCount(op.BucketsTotal), bucketsSplit(op))
	fmt.Fprintf(&b, "  Documents   %s\n", humanCount(op.DocumentsMoved))
	fmt.Fprintf(&b, "  Bytes       %s\n", humanBytes(op.BytesMoved))
	if waited > 0 {
		fmt.Fprintf(&b, "  Duration    %s (the last %s after the cancel, finishing the move in flight)\n", formatElapsed(d), formatElapsed(waited))
	} else {
		fmt.Fprintf(&b, "  Duration    %s\n", formatElapsed(d))
	}
	// Per bucket: milliseconds with two decimals below a second, else a
	// duration ("19.4s", not "19426.48 ms").
	ms := func(n int64) string {
		if per := d / time.Duration(n); per >= time.Second {
			return formatElapsed(per)
		}
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond)/float64(n), 'f', 2, 64) + " ms"
	}
	perSecond := func(n int64) string {
		return formatRate(float64(n) / d.Seconds())
	}
	switch {
	case op.BucketsMigrated > 0 && d > 0:
		// Empty buckets change owner in a few raft commands, so the
		// duration is the moves of the buckets with data.
		fmt.Fprintf(&b, "  Average     %s per bucket with data (%s %s)\n", ms(op.BucketsMigrated), perSecond(op.BucketsMigrated), rateUnit(op))
	case op.BucketsDone > 0 && op.DocumentsMoved == 0:
		b.WriteString("  Average     - (every bucket was empty and changed owner at once)\n")
	case op.BucketsDone > 0 && d > 0: // a server that does not report BucketsMigrated
		fmt.Fprintf(&b, "  Average     %s per bucket (%s %s)\n", ms(op.BucketsDone), perSecond(op.BucketsDone), rateUnit(op))
	case op.BucketsDone > 0:
		b.WriteString("  Average     -\n")
	default:
		b.WriteString("  Average     - (no bucket needed moving)\n")
	}
	if d > 0 && op.BytesMoved > 0 {
		fmt.Fprintf(&b, "  Throughput  %s\n", formatByteRate(float64(op.BytesMoved)/d.Seconds()))
	}
	if n := len(op.Errors); n > 0 {
		fmt.Fprintf(&b, "  Errors      %d (retried; last: %s)\n", n, op.Errors[n-1])
	}
	return b.String()
}

// humanBytes formats a byte count with decimal units: 512 B, 1.5 kB,
// 12.3 MB.
func humanBytes(n int64) string {
	if n < 1000 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"kB", "MB", "GB", "TB", "PB", "EB"}
	f := float64(n)
	i := -1
	for f >= 1000 && i < len(units)-1 {
		f /= 1000
		i++
	}
	if f >= 100 {
		return fmt.Sprintf("%.0f %s", f, units[i])
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// humanCount formats an integer with thousands separators: 1,234,567.
func humanCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// formatRate formats a rate with about three significant digits, and a
// negative (unknown) rate as "-".
func formatRate(f float64) string {
	switch {
	case f < 0:
		return "-"
	case f == 0:
		return "0"
	case f < 10:
		return strconv.FormatFloat(f, 'f', 2, 64)
	case f < 100:
		return strconv.FormatFloat(f, 'f', 1, 64)
	default:
		return strconv.FormatFloat(f, 'f', 0, 64)
	}
}

// formatElapsed formats a duration for people: 850ms, 12.3s, 4m05s,
// 2h03m10s.
func formatElapsed(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dh%02dm%02ds", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
	}
}

// truncate cuts s to at most width runes, marking the cut with "…".
func truncate(s string, width int) string {
	if width < 1 {
		width = 1
	}
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

// plural picks the singular or plural form for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// docCount is n documents as the progress line says it: "1 doc", "0
// docs", "12.3k docs".
func docCount(n int64) string {
	if n == 1 {
		return "1 doc"
	}
	return humanCount(n) + " docs"
}
