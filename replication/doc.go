// Package replication keeps the replicas of a shard converged: each replica
// tails its own changes feed and pushes batches to every other replica of
// the shard; the receiver decides each item by change vector (newer
// applies, equal or older is skipped, concurrent is a conflict resolved the
// same way on every replica). Progress lives at the receiver, written in the
// same batch as the items it covers, so a restarted node resumes where it
// stopped instead of resending everything.
package replication
