// Package bench measures shardnode against its peers and its physical
// limits in one run: the YCSB core workloads A–F, bulk insert, durable
// single-document PUT and point GET over the HTTP API, each beside
// baselines measured on the same machine in the same run — raw Pebble with
// the storage package's tuned options, a trivial Go HTTP handler, an
// embedded NATS server, and PostgreSQL when one is reachable — plus the
// peak RSS of a node after a large load, and online resharding on a local
// 3-node cluster: the fixed cost of moving small buckets, the transfer rate
// of one large bucket beside a raw Pebble copy, and a foreground write load
// with and without a move (with the write pause at each ownership flip).
//
// Run is the entry point; Report holds the rows, and WriteText,
// WriteMarkdown and WriteJSON render them. The `shardnode bench` command
// wraps Run.
package bench
