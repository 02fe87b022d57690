package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// newHTTPClient returns the one HTTP client every HTTP workload shares: a
// keep-alive pool large enough that each of the clients keeps its
// connection.
func newHTTPClient(clients int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        2*clients + 16,
		MaxIdleConnsPerHost: 2*clients + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}}
}

// shardnodeSystem is shardnode's HTTP API at base.
type shardnodeSystem struct {
	hc     *http.Client
	base   string
	shards int
	prefix string // database name prefix, unique per run
}

func (s *shardnodeSystem) name() string { return "shardnode" }
func (s *shardnodeSystem) close() error { return nil }

// do sends one request and reads the whole response into buf, failing
// unless the status is want.
func do(ctx context.Context, hc *http.Client, method, url string, body []byte, want int, buf *bytes.Buffer) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return fmt.Errorf("%s %s: read response: %w", method, url, err)
	}
	if resp.StatusCode != want {
		b := buf.Bytes()
		if len(b) > 300 {
			b = b[:300]
		}
		return fmt.Errorf("%s %s: status %d, want %d: %s", method, url, resp.StatusCode, want, b)
	}
	return nil
}

func (s *shardnodeSystem) dataset(ctx context.Context, name string, _ bool) (dataset, error) {
	db := s.prefix + name
	url := s.base + "/admin/databases/" + db
	body := fmt.Appendf(nil, `{"Shards":%d,"ReplicationFactor":1}`, s.shards)
	var buf bytes.Buffer
	if err := do(ctx, s.hc, http.MethodPut, url, body, http.StatusCreated, &buf); err != nil {
		return nil, fmt.Errorf("create database %s: %w", db, err)
	}
	return &shardnodeDataset{sys: s, db: db, docs: "/databases/" + db + "/docs?id="}, nil
}

// shardnodeDataset is one database.
type shardnodeDataset struct {
	sys  *shardnodeSystem
	db   string
	docs string // path prefix of a document
}

func (d *shardnodeDataset) client(context.Context, int) (client, error) {
	rc, err := newRawConn(d.sys.base)
	if err != nil {
		return nil, err
	}
	return &shardnodeClient{d: d, rc: rc}, nil
}

// settled asks each shard replica's statistics whether Pebble is
// compacting or owes compactions.
func (d *shardnodeDataset) settled(ctx context.Context) (bool, error) {
	for n := 0; n < d.sys.shards; n++ {
		var buf bytes.Buffer
		url := fmt.Sprintf("%s/databases/%s$%d/stats", d.sys.base, d.db, n)
		if err := do(ctx, d.sys.hc, http.MethodGet, url, nil, http.StatusOK, &buf); err != nil {
			return false, fmt.Errorf("settle: %w", err)
		}
		var st struct {
			Engine struct {
				CompactionsRunning  int
				CompactionDebtBytes uint64
			}
		}
		if err := json.Unmarshal(buf.Bytes(), &st); err != nil {
			return false, fmt.Errorf("settle: stats of shard %d: %w", n, err)
		}
		if st.Engine.CompactionsRunning > 0 || st.Engine.CompactionDebtBytes > 0 {
			return false, nil
		}
	}
	return true, nil
}

// cacheCounts sums the shard replicas' document cache counts.
func (d *shardnodeDataset) cacheCounts(ctx context.Context) (cacheCounts, error) {
	var sum cacheCounts
	for n := 0; n < d.sys.shards; n++ {
		var buf bytes.Buffer
		url := fmt.Sprintf("%s/databases/%s$%d/stats", d.sys.base, d.db, n)
		if err := do(ctx, d.sys.hc, http.MethodGet, url, nil, http.StatusOK, &buf); err != nil {
			return cacheCounts{}, fmt.Errorf("document cache counts: %w", err)
		}
		var st struct {
			DocCache struct{ Hits, Misses uint64 }
		}
		if err := json.Unmarshal(buf.Bytes(), &st); err != nil {
			return cacheCounts{}, fmt.Errorf("document cache counts of shard %d: %w", n, err)
		}
		sum.hits += st.DocCache.Hits
		sum.misses += st.DocCache.Misses
	}
	return sum, nil
}

func (d *shardnodeDataset) drop(ctx context.Context) error {
	var buf bytes.Buffer
	url := d.sys.base + "/admin/databases/" + d.db
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, url, nil)
	if err != nil {
		return err
	}
	resp, err := d.sys.hc.Do(req)
	if err != nil {
		return fmt.Errorf("delete database %s: %w", d.db, err)
	}
	defer resp.Body.Close()
	_, _ = buf.ReadFrom(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("delete database %s: status %d: %s", d.db, resp.StatusCode, buf.Bytes())
	}
	return nil
}

// shardnodeClient is one client's view: its own connection and buffers.
type shardnodeClient struct {
	d    *shardnodeDataset
	rc   *rawConn
	buf  bytes.Buffer
	body []byte
}

func (c *shardnodeClient) close() { c.rc.close() }

func (c *shardnodeClient) read(ctx context.Context, k int64) error {
	return c.rc.do(ctx, http.MethodGet, c.d.docs+keyName(k), nil, http.StatusOK, &c.buf)
}

// withMeta returns rec with shardnode's collection metadata, in c's
// buffer.
func (c *shardnodeClient) withMeta(rec []byte) []byte {
	c.body = append(c.body[:0], `{"@metadata":{"@collection":"`+collection+`"},`...)
	return append(c.body, rec[1:]...)
}

func (c *shardnodeClient) write(ctx context.Context, k int64, rec []byte) error {
	return c.rc.do(ctx, http.MethodPut, c.d.docs+keyName(k), c.withMeta(rec), http.StatusCreated, &c.buf)
}

func (c *shardnodeClient) scan(ctx context.Context, k int64, n int) error {
	q := "from " + collection + " where Key >= " + strconv.FormatInt(k, 10) + " and Key < " + strconv.FormatInt(k+int64(n), 10) +
		" order by Key limit " + strconv.Itoa(n)
	body, err := json.Marshal(map[string]string{"Query": q})
	if err != nil {
		return err
	}
	return c.rc.do(ctx, http.MethodPost, "/databases/"+c.d.db+"/queries", body, http.StatusOK, &c.buf)
}

func (c *shardnodeClient) writeBatch(ctx context.Context, keys []int64, recs [][]byte) error {
	b := c.body[:0]
	b = append(b, `{"Commands":[`...)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"Type":"PUT","Id":"`...)
		b = append(b, keyName(k)...)
		b = append(b, `","Document":{"@metadata":{"@collection":"`+collection+`"},`...)
		b = append(b, recs[i][1:]...)
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	c.body = b
	return c.rc.do(ctx, http.MethodPost, "/databases/"+c.d.db+"/bulk_docs", b, http.StatusCreated, &c.buf)
}
