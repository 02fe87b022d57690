package replication

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shardnode/shardnode/storage"
)

// The binary batch format carries items on the bus without touching their
// bodies: encoding/json re-validates and re-compacts every json.RawMessage
// on both ends, which made JSON the bulk of a transfer's CPU. A message
// starts with a format byte, so a receiver tells it from the JSON that
// older senders send (which starts with '{').
const (
	// FormatBinaryV1 is the first byte of a batch in binary format version
	// 1: then the batch's header fields and its items, each field either a
	// uvarint, a zigzag varint, a byte, or a uvarint length and the bytes.
	FormatBinaryV1 = 0x01
	// FormatBinaryV2 is version 1 with the batch's After after LastEtag.
	FormatBinaryV2 = 0x02
	// FormatBinaryV3 is version 2 whose items may be stubs (Item.Stub): an
	// item's flags byte then carries itemStub, and its body is empty.
	FormatBinaryV3 = 0x03
	// formatJSON is the first byte of a JSON-encoded batch.
	formatJSON = '{'
)

// itemStub marks a stub in an item's flags byte on the wire (format 3
// only); storage.Flags never uses this bit.
const itemStub = 0x80

// ErrMalformed reports a binary batch that cannot be decoded: truncated,
// with a length beyond its end, a value out of range, or trailing bytes.
var ErrMalformed = errors.New("malformed binary batch")

// minItemBytes is the least an encoded item takes (five empty lengths or
// zero values, the flags and the nanoseconds); it bounds how many items a
// count may claim from what is left of the message.
const minItemBytes = 7

// Encoder appends the fields of the binary batch format to Buf.
type Encoder struct {
	// Buf holds what was encoded so far.
	Buf []byte
}

// Uvarint appends an unsigned integer.
func (e *Encoder) Uvarint(v uint64) { e.Buf = binary.AppendUvarint(e.Buf, v) }

// Varint appends a signed integer (zigzag).
func (e *Encoder) Varint(v int64) { e.Buf = binary.AppendVarint(e.Buf, v) }

// Bytes appends a length-prefixed byte string.
func (e *Encoder) Bytes(b []byte) {
	e.Buf = binary.AppendUvarint(e.Buf, uint64(len(b)))
	e.Buf = append(e.Buf, b...)
}

// String appends a length-prefixed string.
func (e *Encoder) String(s string) {
	e.Buf = binary.AppendUvarint(e.Buf, uint64(len(s)))
	e.Buf = append(e.Buf, s...)
}

// Items appends a count and the items. LastModified goes as Unix seconds
// and nanoseconds, exact for every time.Time (its zone is not kept: a
// decoded time is in UTC); the body goes as it is.
func (e *Encoder) Items(items []Item) {
	e.Uvarint(uint64(len(items)))
	for i := range items {
		it := &items[i]
		e.String(it.ID)
		e.String(it.Collection)
		e.String(it.ChangeVector)
		e.Varint(it.LastModified.Unix())
		e.Uvarint(uint64(it.LastModified.Nanosecond()))
		flags := byte(it.Flags)
		if it.Stub {
			flags |= itemStub
		}
		e.Buf = append(e.Buf, flags)
		e.Bytes(it.Body)
	}
}

// ItemsSize is an upper bound of the bytes Items appends for items, to size
// a buffer once.
func ItemsSize(items []Item) int {
	n := binary.MaxVarintLen64
	for i := range items {
		it := &items[i]
		n += len(it.ID) + len(it.Collection) + len(it.ChangeVector) + len(it.Body) + 4*binary.MaxVarintLen64 + 2*binary.MaxVarintLen64 + 1
	}
	return n
}

// Decoder reads the fields of the binary batch format. The first failure
// sticks: later reads return zero values and Err reports it.
type Decoder struct {
	buf []byte
	err error
}

// NewDecoder reads buf. Decoded byte fields alias buf, so buf must not be
// changed while they are in use.
func NewDecoder(buf []byte) *Decoder { return &Decoder{buf: buf} }

func (d *Decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%s: %w", what, ErrMalformed)
	}
}

// Byte reads one byte.
func (d *Decoder) Byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.buf) == 0 {
		d.fail(what)
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

// Uvarint reads an unsigned integer.
func (d *Decoder) Uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// Varint reads a signed integer.
func (d *Decoder) Varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// Uint32 reads an unsigned integer that must fit 32 bits.
func (d *Decoder) Uint32(what string) uint32 {
	v := d.Uvarint(what)
	if v > math.MaxUint32 {
		d.fail(what)
		return 0
	}
	return uint32(v)
}

// Int reads a signed integer that must fit an int.
func (d *Decoder) Int(what string) int {
	v := d.Varint(what)
	if v < math.MinInt || v > math.MaxInt {
		d.fail(what)
		return 0
	}
	return int(v)
}

// Bytes reads a length-prefixed byte string, aliasing the input; empty
// reads as nil.
func (d *Decoder) Bytes(what string) []byte {
	n := d.Uvarint(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.fail(what)
		return nil
	}
	if n == 0 {
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

// String reads a length-prefixed string.
func (d *Decoder) String(what string) string { return string(d.Bytes(what)) }

// Items reads what Encoder.Items wrote, with no stub among them. Bodies
// alias the input.
func (d *Decoder) Items() []Item { return d.items(false) }

// items reads items, stubs among them where stubs is set (a format 3
// replication batch); elsewhere a stub is malformed.
func (d *Decoder) items(stubs bool) []Item {
	n := d.Uvarint("item count")
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)/minItemBytes) {
		d.fail("item count")
		return nil
	}
	items := make([]Item, n)
	for i := range items {
		it := &items[i]
		it.ID = d.String("item id")
		it.Collection = d.String("item collection")
		it.ChangeVector = d.String("item change vector")
		sec := d.Varint("item last-modified")
		nsec := d.Uvarint("item last-modified")
		if nsec >= 1e9 {
			d.fail("item last-modified")
		}
		it.LastModified = time.Unix(sec, int64(nsec)).UTC()
		flags := d.Byte("item flags")
		if flags&itemStub != 0 {
			if !stubs {
				d.fail("item flags")
			}
			it.Stub, flags = true, flags&^itemStub
		}
		it.Flags = storage.Flags(flags)
		it.Body = d.Bytes("item body")
		if it.Stub && len(it.Body) > 0 {
			d.fail("stub body")
		}
		if d.err != nil {
			return nil
		}
	}
	return items
}

// Finish reports the first failure, or trailing bytes after a complete
// message.
func (d *Decoder) Finish() error {
	if d.err == nil && len(d.buf) > 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.buf)))
	}
	return d.err
}

// MarshalBinary encodes the batch in the binary format: version 1, what
// every receiver decodes, unless the batch has an After (version 2) or
// stubs (version 3).
func (b *Batch) MarshalBinary() ([]byte, error) {
	e := Encoder{Buf: make([]byte, 0, 64+len(b.DB)+len(b.Source)+len(b.SourceTag)+ItemsSize(b.Items))}
	format := byte(FormatBinaryV1)
	switch {
	case slices.ContainsFunc(b.Items, func(it Item) bool { return it.Stub }):
		format = FormatBinaryV3
	case b.After != 0:
		format = FormatBinaryV2
	}
	e.Buf = append(e.Buf, format)
	e.String(b.DB)
	e.Varint(int64(b.Shard))
	e.String(b.Source)
	e.String(b.SourceTag)
	e.Uvarint(b.LastEtag)
	if format >= FormatBinaryV2 {
		e.Uvarint(b.After)
	}
	e.Items(b.Items)
	return e.Buf, nil
}

// DecodeBatch reads a batch in the binary format or, from an older sender,
// in JSON. Bodies alias data.
func DecodeBatch(data []byte) (*Batch, error) {
	var b Batch
	if len(data) > 0 && data[0] == formatJSON {
		if err := json.Unmarshal(data, &b); err != nil {
			return nil, fmt.Errorf("replication batch (JSON): %w", err)
		}
		return &b, nil
	}
	if len(data) == 0 || data[0] < FormatBinaryV1 || data[0] > FormatBinaryV3 {
		return nil, fmt.Errorf("replication batch: unknown format: %w", ErrMalformed)
	}
	d := NewDecoder(data[1:])
	b.DB = d.String("db")
	b.Shard = d.Int("shard")
	b.Source = d.String("source")
	b.SourceTag = d.String("source tag")
	b.LastEtag = d.Uvarint("last etag")
	if data[0] >= FormatBinaryV2 {
		b.After = d.Uvarint("after")
	}
	b.Items = d.items(data[0] == FormatBinaryV3)
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("replication batch: %w", err)
	}
	return &b, nil
}
