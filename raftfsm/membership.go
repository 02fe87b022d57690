package raftfsm

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// applyRemoveNode removes a node and hands each shard replica it held to
// the node with the fewest replicas that does not hold that shard yet (among
// the proposer's candidates), so no shard is left waiting for a member
// that will never answer: migrations would wait forever for its
// confirmation, and the shard would stay below its replication factor. The
// new member fills through replication from the others. A node that holds
// the only replica of a shard cannot be removed: its data exists nowhere
// else.
func applyRemoveNode(s *State, index uint64, c *RemoveNode) (any, error) {
	if _, ok := s.Nodes[c.Tag]; !ok {
		return nil, fmt.Errorf("%w: %q", ErrNodeNotFound, c.Tag)
	}
	names := make([]string, 0, len(s.Databases))
	for name := range s.Databases {
		names = append(names, name)
	}
	sort.Strings(names) // the same order, so the same choices, everywhere
	for _, name := range names {
		if shard, ok := s.Databases[name].SoleReplicaShard(c.Tag); ok {
			return nil, fmt.Errorf("%w: node %s holds the only replica of shard %d of %q; delete the database or wait for a replica elsewhere", ErrConflict, c.Tag, shard, name)
		}
	}
	delete(s.Nodes, c.Tag)
	s.NodesIndex = index
	load := map[string]int{}
	for t := range s.Nodes {
		load[t] = 0
	}
	for _, r := range s.Databases {
		for _, t := range r.Sharding.Shards {
			for _, m := range t.Members {
				if _, ok := load[m]; ok {
					load[m]++
				}
			}
		}
	}
	replaced := map[string][]string{}
	for _, name := range names {
		if !holds(s.Databases[name], c.Tag) {
			continue
		}
		_, err := mutate(s, index, name, func(r *DatabaseRecord) (any, error) {
			for _, n := range r.ShardNumbers() {
				t := r.Sharding.Shards[n]
				if !slices.Contains(t.Members, c.Tag) {
					continue
				}
				t.Members = slices.DeleteFunc(t.Members, func(m string) bool { return m == c.Tag })
				if len(t.Members) < r.ReplicationFactor {
					if m := leastLoaded(load, t.Members, c.Candidates); m != "" {
						t.Members = append(t.Members, m)
						load[m]++
						replaced[name] = append(replaced[name], fmt.Sprintf("shard %d: %s", n, m))
					}
				}
			}
			r.settleMigrations(c.At, index)
			return nil, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return replaced, nil
}

// SoleReplicaShard returns the lowest-numbered shard whose only member is
// tag: removing that node would lose the shard's data.
func (r *DatabaseRecord) SoleReplicaShard(tag string) (int, bool) {
	for _, n := range r.ShardNumbers() {
		if m := r.Sharding.Shards[n].Members; len(m) == 1 && m[0] == tag {
			return n, true
		}
	}
	return 0, false
}

func holds(r *DatabaseRecord, tag string) bool {
	for _, t := range r.Sharding.Shards {
		if slices.Contains(t.Members, tag) {
			return true
		}
	}
	return false
}

// leastLoaded picks the node with the fewest replicas (ties by tag) that is
// not in members and, if candidates are given, is one of them.
func leastLoaded(load map[string]int, members, candidates []string) string {
	best := ""
	for t, n := range load {
		if slices.Contains(members, t) || (len(candidates) > 0 && !slices.Contains(candidates, t)) {
			continue
		}
		if best == "" || n < load[best] || (n == load[best] && TagLess(t, best)) {
			best = t
		}
	}
	return best
}

// settleMigrations finishes the steps that waited only for members that
// are gone: a Moved migration whose remaining destination members all
// confirmed flips ownership, and an OwnershipTransferred one whose
// remaining source members all cleaned up leaves the record.
func (r *DatabaseRecord) settleMigrations(at time.Time, index uint64) {
	for b, m := range r.Sharding.BucketMigrations {
		switch m.Status {
		case MigrationMoved:
			if containsAll(m.ConfirmedDestinations, r.Sharding.Shards[m.DestinationShard].Members) {
				r.transferOwnership(r.ownMigration(b), at, index)
			}
		case MigrationOwnershipTransferred:
			if containsAll(m.ConfirmedSourceCleanup, r.Sharding.Shards[m.SourceShard].Members) {
				r.dropMigration(b)
				r.finishOperations(at)
			}
		}
	}
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
