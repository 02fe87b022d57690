package node

import (
	"context"
	"errors"
	"net/http"
	"testing"
)

// TestRestartFiresDownSignal: a node heard with a new incarnation restarted,
// so requests waiting on its old process are released, even though it never
// went quiet long enough to be found down.
func TestRestartFiresDownSignal(t *testing.T) {
	h := newHealth("A")
	h.heard("B", "one")
	sig := h.downSignal("B")
	h.heard("B", "one")
	select {
	case <-sig:
		t.Fatal("down signal fired for a heartbeat of the same incarnation")
	default:
	}
	h.heard("B", "two")
	select {
	case <-sig:
	default:
		t.Fatal("no down signal when B came back as a new incarnation")
	}
	if !h.up("B") {
		t.Fatal("B is not up after its new incarnation's heartbeat")
	}
}

// TestDocumentsFitOneBusMessage: the embedded server's messages carry the
// largest document the configuration allows, within NATS's bounds, and a
// node never accepts a document larger than one message.
func TestDocumentsFitOneBusMessage(t *testing.T) {
	for _, c := range []struct{ doc, want int64 }{
		{1 << 20, 8 << 20},
		{16 << 20, 16<<20 + busDocumentSlack},
		{100 << 20, 64 << 20},
	} {
		if got := embeddedMaxPayload(c.doc); int64(got) != c.want {
			t.Errorf("max document %d: payload %d, want %d", c.doc, got, c.want)
		}
	}
	n := testNode(t, t.TempDir())
	if n.maxDocBytes != n.cfg.HTTP.MaxDocumentBytes || n.maxDocBytes > n.bus.nc.MaxPayload()-busDocumentSlack {
		t.Fatalf("max document %d bytes with a bus payload of %d (configured %d)", n.maxDocBytes, n.bus.nc.MaxPayload(), n.cfg.HTTP.MaxDocumentBytes)
	}
}

// TestOversizedBusRequestIsClear: a request larger than one bus message is
// refused as too large (413, nothing sent), not as an internal error.
func TestOversizedBusRequestIsClear(t *testing.T) {
	n := testNode(t, t.TempDir())
	big := make([]byte, n.bus.nc.MaxPayload()+1)
	_, err := n.callRaw(context.Background(), n.cfg.Node.Tag, "shard.write", big)
	var ae *apiError
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestEntityTooLarge || ae.Type != "BodyTooLarge" {
		t.Fatalf("oversized request: %v", err)
	}
}
