package node

import (
	"crypto/rand"
	"encoding/hex"
	"sort"
)

// newOperationID returns a random id for a resharding operation.
func newOperationID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sortOperations orders operations newest first.
func sortOperations(ops []operationView) {
	sort.Slice(ops, func(i, j int) bool { return ops[i].StartIndex > ops[j].StartIndex })
}
