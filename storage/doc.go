// Package storage keeps the documents of one shard replica in its own Pebble
// instance: documents and tombstones keyed by bucket first (so a bucket is a
// prefix scan and can be purged with a range delete), a per-replica etag that
// orders every change into a changes feed, and per-bucket statistics.
//
// Writes are group-committed: concurrent callers queue their operations, one
// committer goroutine applies many of them to a single Pebble batch and pays
// one fsync for all of them. A write is acknowledged only after that fsync,
// so an acknowledged write survives a crash of the process.
package storage
