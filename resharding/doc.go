// Package resharding moves buckets between shards online (DESIGN §5).
//
// The raft record holds the state of every bucket migration; this package
// holds the workers that advance it:
//
//   - an Agent per local shard replica: as a source it streams a migrating
//     bucket to the destination shard and, after the ownership flip and once
//     every node applied it, purges what moved; as a destination it
//     confirms as soon as its bucket version covers what the source sent;
//     and as the documents migrator it starts a migration for items found
//     in a bucket its shard does not own.
//   - a Driver on the raft leader that turns a resharding operation (a range
//     of buckets to one shard) into migrations, one bucket at a time per
//     source shard, flipping empty buckets together.
//
// Every worker is event-driven (raft applies, store commits); timers only
// back off after failures and run the documents migrator's safety sweep.
package resharding
