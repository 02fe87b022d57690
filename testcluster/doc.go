// Package testcluster starts clusters of real shardnode nodes for tests:
// real raft, real NATS, real Pebble, on loopback ports chosen at run time.
// Nodes run in-process (fast) or as child processes of the built binary,
// so a test can kill -9, SIGSTOP/SIGCONT and restart one. Helpers wait on
// conditions with deadlines; nothing sleeps and hopes.
package testcluster
