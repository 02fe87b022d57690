package resharding

import (
	"encoding/json"
	"fmt"

	"github.com/shardnode/shardnode/replication"
)

// MarshalBinary encodes the batch for the bus in the binary batch format
// (replication.FormatBinaryV1): the header fields, then the items with
// their bodies as they are, so neither end re-parses a document.
func (b *Batch) MarshalBinary() ([]byte, error) {
	e := replication.Encoder{Buf: make([]byte, 0, 64+len(b.DB)+len(b.DatabaseID)+replication.ItemsSize(b.Items))}
	e.Buf = append(e.Buf, replication.FormatBinaryV1)
	e.String(b.DB)
	e.Varint(int64(b.Shard))
	e.Uvarint(uint64(b.Bucket))
	e.Uvarint(b.MigrationIndex)
	e.String(b.DatabaseID)
	e.Items(b.Items)
	return e.Buf, nil
}

// DecodeBatch reads a migration batch in the binary format or, from an
// older sender, in JSON. Malformed input is an error wrapping
// replication.ErrMalformed (or a JSON error). Bodies alias data.
func DecodeBatch(data []byte) (*Batch, error) {
	var b Batch
	if len(data) > 0 && data[0] == '{' {
		if err := json.Unmarshal(data, &b); err != nil {
			return nil, fmt.Errorf("migration batch (JSON): %w", err)
		}
		return &b, nil
	}
	if len(data) == 0 || data[0] != replication.FormatBinaryV1 {
		return nil, fmt.Errorf("migration batch: unknown format: %w", replication.ErrMalformed)
	}
	d := replication.NewDecoder(data[1:])
	b.DB = d.String("db")
	b.Shard = d.Int("shard")
	b.Bucket = d.Uint32("bucket")
	b.MigrationIndex = d.Uvarint("migration index")
	b.DatabaseID = d.String("database id")
	b.Items = d.Items()
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("migration batch: %w", err)
	}
	return &b, nil
}
