package node

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"sort"
)

// operationIDFor derives an operation id from a client's request id, so a
// retried request names the operation the first attempt started.
func operationIDFor(db, requestID string) string {
	sum := sha256.Sum256([]byte(db + "\x00" + requestID))
	return hex.EncodeToString(sum[:8])
}

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
