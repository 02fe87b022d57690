package bench

import (
	"context"
	"errors"
	"time"
)

// errUnsupported is returned by a baseline for an operation it does not
// model (the HTTP ceiling only serves GETs).
var errUnsupported = errors.New("operation not supported by this system")

// system is one measured system: shardnode over HTTP, PostgreSQL, raw
// Pebble, or the HTTP ceiling.
type system interface {
	// name labels the system's rows.
	name() string
	// dataset creates a fresh, empty dataset (database, table, Pebble
	// directory) called name; scans tells it YCSB E's range queries will
	// run on it.
	dataset(ctx context.Context, name string, scans bool) (dataset, error)
	// close releases what the system holds (not the datasets).
	close() error
}

// dataset is where one system keeps the records of one or more workloads.
type dataset interface {
	// client returns client i's handle; handles may share a connection
	// pool but each is used by one goroutine at a time.
	client(ctx context.Context, i int) (client, error)
	// drop deletes the dataset.
	drop(ctx context.Context) error
}

// client performs one operation at a time against a dataset. Key numbers
// name records (see keyName and pebbleKey); bodies are appendRecord's
// JSON without metadata unless the client adds its own.
type client interface {
	// read fetches record k whole.
	read(ctx context.Context, k int64) error
	// write stores record k durably, inserting or replacing it whole.
	write(ctx context.Context, k int64, rec []byte) error
	// scan reads up to n records with key numbers from k on, in key order.
	scan(ctx context.Context, k int64, n int) error
	// writeBatch stores the records durably as one batch (bulk insert).
	writeBatch(ctx context.Context, keys []int64, recs [][]byte) error
	// close releases the client's connection, if it has its own.
	close()
}

// settler is a dataset whose storage does background work after a load
// (an LSM's flushes and compactions). The closed-loop rounds start once it
// is idle, so they measure the workload and not the load's tail, as a
// YCSB run phase follows its load phase.
type settler interface {
	// settled reports whether no compaction is running or owed.
	settled(ctx context.Context) (bool, error)
}

// maxSettle bounds the wait for a loaded dataset to settle.
const maxSettle = 60 * time.Second

// errCompacting is a settler's answer while compactions run or are owed.
var errCompacting = errors.New("compactions still running or owed")

// settle waits until ds, if it is a settler, is idle, at most maxSettle; it
// returns how long it waited and whether ds settled.
func settle(ctx context.Context, ds dataset) (time.Duration, bool, error) {
	s, ok := ds.(settler)
	if !ok {
		return 0, true, nil
	}
	start := time.Now()
	err := waitUntil(ctx, maxSettle, func() error {
		done, err := s.settled(ctx)
		if err == nil && !done {
			err = errCompacting
		}
		return err
	})
	if errors.Is(err, errCompacting) {
		return time.Since(start), false, nil
	}
	return time.Since(start), err == nil, err
}
