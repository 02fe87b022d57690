package bench

import (
	"context"
	"errors"
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
