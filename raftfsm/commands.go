package raftfsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/shardnode/shardnode/changevector"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/shardnode/shardnode/bucket"
)

// CommandType is the first byte of every log entry.
type CommandType uint8

// IgnoreUnknownFlag marks a command type that a node which does not know
// it may skip (an optional command added by a newer version).
const IgnoreUnknownFlag CommandType = 0x80

// Command types. Never renumber: they are in every raft log.
const (
	TypeCreateDatabase CommandType = 1
	TypeDeleteDatabase CommandType = 2
	TypeAddNode        CommandType = 3
	TypeRemoveNode     CommandType = 4
	// Online resharding (migration.go).
	TypeStartBucketMigration        CommandType = 10
	TypeSourceMigrationSendComplete CommandType = 11
	TypeDestinationMigrationConfirm CommandType = 12
	TypeSourceMigrationCleanup      CommandType = 13
	TypeMoveEmptyBuckets            CommandType = 14
	TypeReportMigrationError        CommandType = 15
	TypeStartResharding             CommandType = 16
	TypeAddShard                    CommandType = 17
	TypeCancelResharding            CommandType = 18
	// TypeSourceMigrationFinalPass is skippable: a node that does not know
	// it keeps the record without the final pass, as before it existed
	// (its source replicas then purge by LastSourceChangeVector alone).
	TypeSourceMigrationFinalPass = 19 | IgnoreUnknownFlag
)

// Limits on database records.
const (
	// MaxShards is the most shards a database may have.
	MaxShards = 1024
	// MaxReplicationFactor is the largest replication factor.
	MaxReplicationFactor = 9
)

// Errors returned as the result of applying a command.
var (
	// ErrDatabaseExists means a database with that name exists.
	ErrDatabaseExists = errors.New("database already exists")
	// ErrDatabaseNotFound means no database has that name.
	ErrDatabaseNotFound = errors.New("database does not exist")
	// ErrNodeNotFound means no node has that tag.
	ErrNodeNotFound = errors.New("node not found")
	// ErrNodeIDConflict means a node registered under a member's tag with
	// another data directory than the member's (see NodeInfo.ID).
	ErrNodeIDConflict = errors.New("node id conflict")
	// ErrInvalid wraps every validation failure of a command's content.
	ErrInvalid = errors.New("invalid request")
)

// Command is a typed state-machine command.
type Command interface {
	// Type is the command's log type byte.
	Type() CommandType
	// Request is the command's request id ("" for none): a retried
	// command with the same id applies once.
	Request() string
}

// Meta is embedded in every command.
type Meta struct {
	// RequestID makes retries idempotent.
	RequestID string `json:"RequestID,omitempty"`
	// At is the proposer's clock when the command was made: apply uses it
	// instead of reading the clock, so every node computes the same state.
	At time.Time `json:"At"`
	// Fingerprint, with RequestID, says what the client asked for (e.g.
	// "create database \"shop\": Shards 2, ReplicationFactor 1"), so that
	// a retry with the same id can be told from another command reusing
	// it. The state remembers it with the id (State.RequestFingerprints).
	// Set by proposers of this version only: entries written before it
	// apply as they did.
	Fingerprint string `json:"Fingerprint,omitempty"`
}

// Request returns the request id.
func (m Meta) Request() string { return m.RequestID }

// StampIfUnset sets At to t unless the proposer already did.
func (m *Meta) StampIfUnset(t time.Time) {
	if m.At.IsZero() {
		m.At = t
	}
}

// SetRequestID sets the request id (proposers give every command one, so
// a retry after an ambiguous failure applies once).
func (m *Meta) SetRequestID(id string) { m.RequestID = id }

// CreateDatabase creates a database record, spreading its shards over the
// cluster's nodes.
type CreateDatabase struct {
	Meta
	Name              string `json:"Name"`
	DatabaseID        string `json:"DatabaseId"`
	Shards            int    `json:"Shards"`
	ReplicationFactor int    `json:"ReplicationFactor"`
	// Candidates, when set, are the nodes the proposer saw up: shards go
	// to them only (apply cannot look at health; the proposer can).
	Candidates []string `json:"Candidates,omitempty"`
	// Spread starts the placement after the shards of the databases
	// already there. Set by proposers of this version; entries written
	// before it replay as they first applied (every node must compute the
	// same record from the same log).
	Spread bool `json:"Spread,omitempty"`
}

// Type implements Command.
func (CreateDatabase) Type() CommandType { return TypeCreateDatabase }

// DeleteDatabase removes a database record; nodes then drop its replicas.
type DeleteDatabase struct {
	Meta
	Name string `json:"Name"`
}

// Type implements Command.
func (DeleteDatabase) Type() CommandType { return TypeDeleteDatabase }

// AddNode adds or updates a cluster member.
type AddNode struct {
	Meta
	Node NodeInfo `json:"Node"`
}

// Type implements Command.
func (AddNode) Type() CommandType { return TypeAddNode }

// RemoveNode removes a cluster member. Every shard replica it held is
// given to another node (see applyRemoveNode).
type RemoveNode struct {
	Meta
	Tag string `json:"Tag"`
	// Candidates, when set, are the nodes the proposer saw up: replacement
	// replicas go to them only.
	Candidates []string `json:"Candidates,omitempty"`
}

// Type implements Command.
func (RemoveNode) Type() CommandType { return TypeRemoveNode }

// Encode frames a command for the raft log.
func Encode(c Command) ([]byte, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode command %d: %w", c.Type(), err)
	}
	return append([]byte{byte(c.Type())}, body...), nil
}

// applyFunc applies a decoded command at a raft index.
type applyFunc func(s *State, index uint64, body []byte) (any, error)

// handlers is the command table.
var handlers = map[CommandType]applyFunc{}

// checks decode a command body of each known type, for Check.
var checks = map[CommandType]func(body []byte) error{}

// Check reports whether data is a command this version knows and can
// decode. A node checks what another one asks it to propose before the
// entry enters the log: a committed entry that no node understands stops
// every node that applies it, now and at every restart.
func Check(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty command", ErrInvalid)
	}
	t := CommandType(data[0])
	check, ok := checks[t]
	switch {
	case !ok && t&IgnoreUnknownFlag != 0:
		return nil // a newer node's command that older ones may skip
	case !ok:
		return fmt.Errorf("%w: unknown command type %d", ErrInvalid, t)
	}
	return check(data[1:])
}

// register adds a command type to the table with a typed apply function.
func register[C Command](t CommandType, fn func(s *State, index uint64, c *C) (any, error)) {
	checks[t] = func(body []byte) error {
		if err := json.Unmarshal(body, new(C)); err != nil {
			return fmt.Errorf("%w: decode command %d: %v", ErrInvalid, t, err)
		}
		return nil
	}
	handlers[t] = func(s *State, index uint64, body []byte) (any, error) {
		c := new(C)
		if err := json.Unmarshal(body, c); err != nil {
			return nil, fmt.Errorf("%w: decode command %d: %v", ErrInvalid, t, err)
		}
		return fn(s, index, c)
	}
}

func init() {
	register(TypeCreateDatabase, applyCreateDatabase)
	register(TypeDeleteDatabase, applyDeleteDatabase)
	register(TypeAddNode, applyAddNode)
	register(TypeRemoveNode, applyRemoveNode)
	registerMigrationCommands()
}

// ValidateDatabaseName checks that name is a safe database name: 1–128
// letters, digits, '_', '-' or '.', not starting with '.' or '-'.
// Every request names its database, so this is a byte loop, not a regexp.
func ValidateDatabaseName(name string) error {
	ok := len(name) >= 1 && len(name) <= 128 && name[0] != '.' && name[0] != '-'
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: database name %q: use 1-128 letters, digits, '_', '-' or '.', starting with a letter, digit or '_'", ErrInvalid, name)
	}
	return nil
}

// ValidateCreate checks a CreateDatabase's parameters against limits that do
// not depend on the state, so the API can refuse them before proposing.
func ValidateCreate(c *CreateDatabase) error {
	if err := ValidateDatabaseName(c.Name); err != nil {
		return err
	}
	if c.Shards < 1 || c.Shards > MaxShards {
		return fmt.Errorf("%w: Shards %d: must be 1..%d", ErrInvalid, c.Shards, MaxShards)
	}
	if c.ReplicationFactor < 1 || c.ReplicationFactor > MaxReplicationFactor {
		return fmt.Errorf("%w: ReplicationFactor %d: must be 1..%d", ErrInvalid, c.ReplicationFactor, MaxReplicationFactor)
	}
	// The id goes into every moved document's change vector (MOVE:<index>-
	// <id>): one that does not parse there stops every node that stores one.
	// An empty one is given a valid id when applied (applyCreateDatabase).
	if msg := changevector.CheckDatabaseID(c.DatabaseID); msg != "" && c.DatabaseID != "" {
		return fmt.Errorf("%w: DatabaseId: %s", ErrInvalid, msg)
	}
	return nil
}

func applyCreateDatabase(s *State, index uint64, c *CreateDatabase) (any, error) {
	if err := ValidateCreate(c); err != nil {
		return nil, err
	}
	if _, ok := s.Databases[c.Name]; ok {
		return nil, fmt.Errorf("%w: %q", ErrDatabaseExists, c.Name)
	}
	if c.DatabaseID == "" {
		// Every node derives the same id from the entry's index.
		c.DatabaseID = fmt.Sprintf("db%d", index)
	}
	tags := make([]string, 0, len(s.Nodes))
	for t := range s.Nodes {
		if len(c.Candidates) == 0 || slices.Contains(c.Candidates, t) {
			tags = append(tags, t)
		}
	}
	sort.Slice(tags, func(i, j int) bool { return TagLess(tags[i], tags[j]) })
	if c.ReplicationFactor > len(tags) {
		return nil, fmt.Errorf("%w: ReplicationFactor %d exceeds the %d node(s) available in the cluster", ErrInvalid, c.ReplicationFactor, len(tags))
	}
	rec := &DatabaseRecord{
		DatabaseName:      c.Name,
		DatabaseID:        c.DatabaseID,
		ReplicationFactor: c.ReplicationFactor,
		CreatedAt:         c.At,
		CreatedIndex:      index,
		Etag:              index,
		Sharding: Sharding{
			Shards:           map[int]*ShardTopology{},
			BucketRanges:     bucket.EvenSplit(c.Shards),
			BucketMigrations: map[uint32]*BucketMigration{},
			Resharding:       map[string]*ReshardingOperation{},
		},
	}
	// Shard i starts at node i (mod N) so shards and their first members,
	// which serve requests by default, spread evenly; offset by the shards
	// of the databases already there, so that databases of one shard do
	// not all land on the first node (an explorer's 100 small databases
	// put 133, 167 and 100 replicas on three nodes, every one-shard
	// database of one replica on A).
	placed := 0
	if c.Spread {
		for _, r := range s.Databases {
			placed += len(r.Sharding.Shards)
		}
	}
	for i := 0; i < c.Shards; i++ {
		members := make([]string, 0, c.ReplicationFactor)
		for j := 0; j < c.ReplicationFactor; j++ {
			members = append(members, tags[(placed+i+j)%len(tags)])
		}
		rec.Sharding.Shards[i] = &ShardTopology{Members: members}
	}
	s.Databases[c.Name] = rec
	return rec.Clone(), nil
}

func applyDeleteDatabase(s *State, _ uint64, c *DeleteDatabase) (any, error) {
	if _, ok := s.Databases[c.Name]; !ok {
		return nil, databaseNotFound(c.Name)
	}
	delete(s.Databases, c.Name)
	return nil, nil
}

var tagPattern = regexp.MustCompile(`^[A-Z]{1,4}$`)

func applyAddNode(s *State, index uint64, c *AddNode) (any, error) {
	if !tagPattern.MatchString(c.Node.Tag) {
		return nil, fmt.Errorf("%w: node tag %q: must be 1-4 letters A-Z", ErrInvalid, c.Node.Tag)
	}
	n := c.Node
	old, ok := s.Nodes[n.Tag]
	if ok {
		if old.ID != "" && n.ID != "" && old.ID != n.ID {
			return nil, fmt.Errorf("%w: node %s is a member with another data directory (node id %s, not %s)", ErrNodeIDConflict, n.Tag, old.ID, n.ID)
		}
		if n.ID == "" {
			n.ID = old.ID
		}
		n.JoinedAt = old.JoinedAt
	} else {
		n.JoinedAt = c.At
	}
	// A node re-registering with the same addresses changes nothing a
	// client sees; a new node or new addresses do.
	if !ok || old.HttpUrl != n.HttpUrl || old.RaftAddr != n.RaftAddr || old.NatsUrl != n.NatsUrl {
		s.NodesIndex = index
	}
	s.Nodes[n.Tag] = &n
	return n, nil
}

// TagLess orders node tags as A < B < ... < Z < AA < AB.
func TagLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// databaseNotFound is ErrDatabaseNotFound for the database it names,
// worded as the API words it everywhere: database "x" does not exist.
type databaseNotFound string

func (e databaseNotFound) Error() string { return fmt.Sprintf("database %q does not exist", string(e)) }

func (e databaseNotFound) Is(target error) bool { return target == ErrDatabaseNotFound }
