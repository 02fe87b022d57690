package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgSystem is the PostgreSQL baseline: a table (id text primary key, data
// jsonb) per dataset, upserts, and one connection per client, kept for the
// whole run — what a pool of Clients connections gives when every client
// holds one, without the pool's bookkeeping.
type pgSystem struct {
	url    string
	prefix string // table name prefix
	admin  *pgx.Conn
	conns  map[int]*pgx.Conn // client i's connection; clients of one round run concurrently, rounds do not
}

// connectPG connects and checks the server answers within a few seconds.
func connectPG(ctx context.Context, url, prefix string) (*pgSystem, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if err := conn.Ping(cctx); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("ping PostgreSQL: %w", err)
	}
	return &pgSystem{url: url, prefix: prefix, admin: conn, conns: map[int]*pgx.Conn{}}, nil
}

func (s *pgSystem) name() string { return "postgresql" }

func (s *pgSystem) close() error {
	ctx := context.Background()
	for _, c := range s.conns {
		_ = c.Close(ctx)
	}
	return s.admin.Close(ctx)
}

// conn returns client i's connection, connecting the first time. It is
// called from one goroutine at a time (runClosedLoop prepares clients
// before starting them).
func (s *pgSystem) conn(ctx context.Context, i int) (*pgx.Conn, error) {
	if c, ok := s.conns[i]; ok && !c.IsClosed() {
		return c, nil
	}
	c, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	s.conns[i] = c
	return c, nil
}

// version returns the server's version string.
func (s *pgSystem) version(ctx context.Context) string {
	var v string
	if err := s.admin.QueryRow(ctx, "show server_version").Scan(&v); err != nil {
		return "unknown"
	}
	return v
}

func (s *pgSystem) dataset(ctx context.Context, name string, scans bool) (dataset, error) {
	table := pgx.Identifier{s.prefix + name}.Sanitize()
	stmts := []string{
		"drop table if exists " + table,
		"create table " + table + " (id text primary key, data jsonb not null)",
	}
	if scans {
		// What a PostgreSQL user would add for YCSB E's range queries; the
		// shardnode side has no index yet and scans.
		stmts = append(stmts, "create index on "+table+" (((data->>'Key')::bigint))")
	}
	for _, q := range stmts {
		if _, err := s.admin.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("PostgreSQL %q: %w", q, err)
		}
	}
	return &pgDataset{sys: s, name: s.prefix + name, table: table}, nil
}

// pgDataset is one table.
type pgDataset struct {
	sys   *pgSystem
	name  string
	table string
}

func (d *pgDataset) client(ctx context.Context, i int) (client, error) {
	conn, err := d.sys.conn(ctx, i)
	if err != nil {
		return nil, err
	}
	return &pgClient{
		d:    d,
		conn: conn,
		get:  "select data from " + d.table + " where id = $1",
		put: "insert into " + d.table + " (id, data) values ($1, $2) " +
			"on conflict (id) do update set data = excluded.data",
		scanQ: "select data from " + d.table + " where (data->>'Key')::bigint >= $1 and (data->>'Key')::bigint < $2 " +
			"order by (data->>'Key')::bigint limit $3",
	}, nil
}

func (d *pgDataset) drop(ctx context.Context) error {
	if _, err := d.sys.admin.Exec(ctx, "drop table if exists "+d.table); err != nil {
		return fmt.Errorf("drop table %s: %w", d.table, err)
	}
	return nil
}

// pgClient is one client's use of its connection on one table.
type pgClient struct {
	d               *pgDataset
	conn            *pgx.Conn
	get, put, scanQ string
	buf             []byte
}

func (c *pgClient) close() {}

func (c *pgClient) read(ctx context.Context, k int64) error {
	if err := c.conn.QueryRow(ctx, c.get, keyName(k)).Scan(&c.buf); err != nil {
		return fmt.Errorf("read %s: %w", keyName(k), err)
	}
	return nil
}

func (c *pgClient) write(ctx context.Context, k int64, rec []byte) error {
	if _, err := c.conn.Exec(ctx, c.put, keyName(k), rec); err != nil {
		return fmt.Errorf("upsert %s: %w", keyName(k), err)
	}
	return nil
}

func (c *pgClient) scan(ctx context.Context, k int64, n int) error {
	rows, err := c.conn.Query(ctx, c.scanQ, k, k+int64(n), n)
	if err != nil {
		return fmt.Errorf("scan from %d: %w", k, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(&c.buf); err != nil {
			return fmt.Errorf("scan from %d: %w", k, err)
		}
	}
	return rows.Err()
}

// writeBatch uses COPY, PostgreSQL's fastest bulk load path.
func (c *pgClient) writeBatch(ctx context.Context, keys []int64, recs [][]byte) error {
	rows := make([][]any, len(keys))
	for i, k := range keys {
		rows[i] = []any{keyName(k), recs[i]}
	}
	if _, err := c.conn.CopyFrom(ctx, pgx.Identifier{c.d.name}, []string{"id", "data"}, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("copy %d rows: %w", len(keys), err)
	}
	return nil
}
