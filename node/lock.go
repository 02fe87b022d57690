package node

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// dirLock is an exclusive lock on a data directory, so a second process
// started on the same directory fails at once instead of waiting on the
// raft log's file lock.
type dirLock struct{ f *os.File }

func lockDataDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("node.data-dir %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("node.data-dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("node.data-dir %s is in use by another shardnode process", dir)
		}
		return nil, fmt.Errorf("lock node.data-dir %s: %w", dir, err)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) release() {
	if l != nil && l.f != nil {
		_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
		l.f.Close()
	}
}

// nodeTagFile names, in the data directory, the tag of the node that the
// directory belongs to.
const nodeTagFile = "NODE_TAG"

// checkNodeTag makes sure a data directory is only ever opened as the node
// it was created for: its raft state names the node by tag, and a node
// started on it under another tag never becomes ready (raft does not list
// it). A directory without the file is claimed later, by claimNodeTag,
// once raft's state is there: a start that fails before (an address that
// does not resolve, a port in use) leaves the directory free for the start
// that follows, under any tag.
func checkNodeTag(dir, tag string) error {
	b, err := os.ReadFile(filepath.Join(dir, nodeTagFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("node.data-dir %s: read the node tag: %w", dir, err)
	}
	if have := strings.TrimSpace(string(b)); have != tag {
		return fmt.Errorf("node.tag %q does not match node.data-dir %s, which belongs to node %q: start it with --tag %s, or give node %s an empty data directory", tag, dir, have, have, tag)
	}
	return nil
}

// claimNodeTag records tag as the owner of the data directory, if no node
// has claimed it yet (checkNodeTag passed). A directory from before the
// file existed is claimed by the tag it is started with.
func claimNodeTag(dir, tag string) error {
	path := filepath.Join(dir, nodeTagFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := writeFileSync(path, []byte(tag+"\n")); err != nil {
		return fmt.Errorf("node.data-dir %s: record the node tag: %w", dir, err)
	}
	return nil
}

// writeFileSync writes a small file durably (temporary file, fsync, rename).
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// nodeIDFile names, in the data directory, the directory's identity: a
// random id made when the directory is first used. The cluster records it
// with the node's tag, so a node started under a member's tag with another
// data directory (an empty one, or another node's) is refused before raft
// talks to it, instead of taking over the member's raft identity with none
// of its log or replicas.
const nodeIDFile = "NODE_ID"

// loadNodeID returns the data directory's id, making it on first use
// (also for a directory from before ids existed).
func loadNodeID(dir string) (string, error) {
	path := filepath.Join(dir, nodeIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if !validNodeID(id) {
			return "", fmt.Errorf("node.data-dir %s: %s holds %q, not a node id: restore it, or give the node an empty data directory", dir, nodeIDFile, id)
		}
		return id, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("node.data-dir %s: read the node id: %w", dir, err)
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("node.data-dir %s: make a node id: %w", dir, err)
	}
	id := hex.EncodeToString(raw[:])
	if err := writeFileSync(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("node.data-dir %s: record the node id: %w", dir, err)
	}
	return id, nil
}

// validNodeID reports whether id has the form loadNodeID makes: 32
// lowercase hex digits.
func validNodeID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
