// Package raftfsm is the cluster's replicated state machine: the member
// nodes and the database records (shards, their members, bucket ranges and
// bucket migrations). Raft carries only this small control state, never
// document bodies.
//
// Every log entry is one typed command: a type byte followed by a JSON
// body. Each type registers its apply function in a table, so a new command
// touches no central switch. Apply is deterministic: it reads nothing but
// the state and the command (times and ids travel inside the command).
// Business errors (a database that already exists) are returned as the
// entry's result, not panicked; an unknown command type panics unless its
// type carries the ignore bit, because silent divergence between nodes is
// worse than a crash.
package raftfsm
