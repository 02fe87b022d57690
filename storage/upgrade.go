package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
)

// upgradeBodies moves a replica written before the doc family to the
// current layout. Such a replica kept a split item's body alone under the
// body family (its etag, then the body); the doc family keeps the whole
// item, so that a read is one lookup. Each body is rewritten under its doc
// key and its body key deleted, in batches; the last one is synced. A crash
// part way leaves the remaining body keys, and the next open goes on with
// them. A body that belongs to no split item of its etag cannot be read by
// anything and is dropped, with a warning.
func upgradeBodies(db *pebble.DB, logger *slog.Logger) error {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixOldBody}, UpperBound: []byte{prefixOldBody + 1}})
	if err != nil {
		return fmt.Errorf("upgrade bodies: %w", err)
	}
	defer closeQuietly(it)
	if !it.First() {
		return it.Error() // nothing to upgrade: the usual case
	}
	logger.Info("upgrading document bodies to the doc key layout")
	b := db.NewBatch()
	defer func() { closeQuietly(b) }()
	moved, dropped := 0, 0
	for ok := true; ok; ok = it.Next() {
		bk := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("upgrade bodies: read %q: %w", bk, err)
		}
		d, err := oldSplitItem(db, bk, v)
		if err != nil {
			return fmt.Errorf("upgrade bodies: %w", err)
		}
		if d != nil {
			if err := b.Set(familyKey(prefixDoc, bk), d.appendDocValue(nil), nil); err != nil {
				return err
			}
			moved++
		} else {
			logger.Warn("dropping a body that no item refers to", "key", fmt.Sprintf("%q", bk))
			dropped++
		}
		if err := b.Delete(bytes.Clone(bk), nil); err != nil {
			return err
		}
		if b.Count() >= 2000 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return fmt.Errorf("upgrade bodies: %w", err)
			}
			closeQuietly(b)
			b = db.NewBatch()
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("upgrade bodies: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("upgrade bodies: %w", err)
	}
	logger.Info("upgraded document bodies", "moved", moved, "dropped", dropped)
	return nil
}

// oldSplitItem is the whole item of the body v kept under the retired body
// key bk, or nil if no split item of that etag refers to it.
func oldSplitItem(db *pebble.DB, bk, v []byte) (*Document, error) {
	if len(bk) < 5 {
		return nil, nil
	}
	iv, closer, err := db.Get(familyKey(prefixItem, bk))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read item %q: %w", bk[5:], err)
	}
	defer closer.Close()
	d, err := decodeItem(binary.BigEndian.Uint32(bk[1:5]), iv)
	if err != nil {
		return nil, fmt.Errorf("item %q: %w", bk[5:], err)
	}
	etag, n := binary.Uvarint(v)
	if !d.bodyElsewhere || n <= 0 || etag != d.Etag || len(v)-n != d.bodyLen {
		return nil, nil
	}
	d.Body, d.bodyElsewhere = v[n:], false
	return d, nil
}
