package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

var (
	testKey  = bytes.Repeat([]byte{7}, TeamKeyBytes)
	otherKey = bytes.Repeat([]byte{8}, TeamKeyBytes)
)

func mustNode(t *testing.T, key []byte, job, node string) *NodeIdentity {
	t.Helper()
	id, err := DeriveNode(key, job, node)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustVerifier(t *testing.T, job string, key []byte) *NodeVerifier {
	t.Helper()
	v, err := NewNodeVerifier(job, JobNodeKey(key))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDeriveNodeIsPerNode: a node's credential is the same each time it
// is derived, and another node's (or job's) differs.
func TestDeriveNodeIsPerNode(t *testing.T) {
	a, a2 := mustNode(t, testKey, "j", "node-a"), mustNode(t, testKey, "j", "node-a")
	b := mustNode(t, testKey, "j", "node-b")
	c := mustNode(t, testKey, "k", "node-a")
	if !bytes.Equal(a.Pub, a2.Pub) || !bytes.Equal(a.Cert, a2.Cert) {
		t.Error("deriving node-a's credential twice gave two")
	}
	if bytes.Equal(a.Pub, b.Pub) || bytes.Equal(a.Pub, c.Pub) {
		t.Error("two nodes, or one node of two jobs, got one key")
	}
	if a.NATSPassword != AgentNATSPassword(testKey) {
		t.Error("the node credential's NATS password is not the job's")
	}
	if JobNodeKey(testKey) == JobNodeKey(otherKey) {
		t.Error("two team keys gave one job signing key")
	}
	for _, bad := range []string{"", ".a", "a b", "a/b", strings.Repeat("x", MaxNodeName+1)} {
		if _, err := DeriveNode(testKey, "j", bad); err == nil {
			t.Errorf("node name %q: derived", bad)
		}
	}
}

// TestNodeSealNamesItsNode: a seal verifies for its node, and is refused
// when the message, its kind, its fields or its named node differ, when it
// is of another job's key, or when there is none.
func TestNodeSealNamesItsNode(t *testing.T) {
	a, b := mustNode(t, testKey, "j", "node-a"), mustNode(t, testKey, "j", "node-b")
	v := mustVerifier(t, "j", testKey)
	parts := [][]byte{[]byte("op"), []byte("node-a")}
	s := a.SealFor(SealTeam, parts, []byte("body"))
	if node, err := v.Verify(s, SealTeam, parts, []byte("body")); err != nil || node != "node-a" {
		t.Fatalf("node-a's seal: %q, %v", node, err)
	}
	renamed := s
	renamed.Node = "node-b" // node-a names itself node-b, with its own key and certificate
	withB := s
	withB.Cert = hex.EncodeToString(b.Cert) // node-b's certificate, node-a's key
	other := mustNode(t, otherKey, "j", "node-a").SealFor(SealTeam, parts, []byte("body"))
	for name, c := range map[string]struct {
		s     NodeSeal
		kind  string
		parts [][]byte
		body  string
	}{
		"another body":        {s, SealTeam, parts, "b0dy"},
		"another kind":        {s, SealDemand, parts, "body"},
		"other fields":        {s, SealTeam, [][]byte{[]byte("op"), []byte("node-b")}, "body"},
		"renamed":             {renamed, SealTeam, parts, "body"},
		"another certificate": {withB, SealTeam, parts, "body"},
		"another job's key":   {other, SealTeam, parts, "body"},
		"none":                {NodeSeal{}, SealTeam, parts, "body"},
	} {
		if _, err := v.Verify(c.s, c.kind, c.parts, []byte(c.body)); !errors.Is(err, ErrNodeSeal) {
			t.Errorf("%s: %v, want ErrNodeSeal", name, err)
		}
	}
	// A seal of job j does not pass in job k, whose key is the same.
	if _, err := mustVerifier(t, "k", testKey).Verify(s, SealTeam, parts, []byte("body")); err == nil {
		t.Error("a seal of job j passed as job k's")
	}
}

// TestNodeCredentialMintsNoOther: a node credential file round-trips, and
// what it holds (the node's seed and certificate) makes no credential of
// another node: the file edited to name node-b is refused, and so is a
// certificate node-a signs itself.
func TestNodeCredentialMintsNoOther(t *testing.T) {
	a := mustNode(t, testKey, "j", "node-a")
	data := a.Encode()
	got, err := ParseNodeCredential(data)
	if err != nil {
		t.Fatal(err)
	}
	v := mustVerifier(t, "j", testKey)
	if _, err := v.Verify(got.SealFor(SealDemand, nil, []byte("x")), SealDemand, nil, []byte("x")); err != nil {
		t.Fatalf("the parsed credential's seal: %v", err)
	}
	var c NodeCredential
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	c.Node = "node-b"
	edited, _ := json.Marshal(c)
	asB, err := ParseNodeCredential(edited)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(asB.SealFor(SealDemand, nil, []byte("x")), SealDemand, nil, []byte("x")); !errors.Is(err, ErrNodeSeal) {
		t.Errorf("node-a's credential renamed node-b: %v, want refused", err)
	}
	self := *got
	self.Node = "node-b"
	self.Cert = []byte(hex.EncodeToString(got.Cert)) // any bytes: node-a cannot sign as the job
	if _, err := v.Verify(self.SealFor(SealDemand, nil, []byte("x")), SealDemand, nil, []byte("x")); !errors.Is(err, ErrNodeSeal) {
		t.Errorf("a certificate node-a made: %v, want refused", err)
	}
}

// TestParseNodeCredentialErrors: a bad file gets a clear error that does
// not quote its secrets.
func TestParseNodeCredentialErrors(t *testing.T) {
	good := mustNode(t, testKey, "j", "node-a")
	var c NodeCredential
	if err := json.Unmarshal(good.Encode(), &c); err != nil {
		t.Fatal(err)
	}
	secret := c.Seed
	for name, edit := range map[string]func(*NodeCredential){
		"version":  func(c *NodeCredential) { c.Version = 9 },
		"job":      func(c *NodeCredential) { c.Job = "a b" },
		"node":     func(c *NodeCredential) { c.Node = "" },
		"seed":     func(c *NodeCredential) { c.Seed = secret[:40] },
		"cert":     func(c *NodeCredential) { c.Cert = "zz" + secret },
		"password": func(c *NodeCredential) { c.NATSPassword = secret + "00" },
	} {
		cc := c
		edit(&cc)
		data, _ := json.Marshal(cc)
		_, err := ParseNodeCredential(data)
		if err == nil {
			t.Errorf("%s: parsed", name)
			continue
		}
		if strings.Contains(err.Error(), secret[:16]) {
			t.Errorf("%s: the error quotes the seed: %v", name, err)
		}
	}
	if _, err := ParseNodeCredential(bytes.Repeat([]byte(" "), maxNodeCredential+1)); err == nil {
		t.Error("a file over the bound parsed")
	}
	if _, err := ParseNodeCredential(append([]byte(secret), '\n')); err == nil || strings.Contains(err.Error(), secret[:16]) {
		t.Errorf("a bare seed: %v", err)
	}
}

// TestSealedRecord: a record sealed under a key over a revision opens
// there only: not under another key, nor over another revision, nor
// changed, nor unsealed.
func TestSealedRecord(t *testing.T) {
	a := mustNode(t, testKey, "j", "node-a")
	v := mustVerifier(t, "j", testKey)
	val, err := a.SealRecord("pos.j.r", 5, []byte(`{"v": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	rec, node, over, err := v.OpenRecord("pos.j.r", val)
	if err != nil || node != "node-a" || over != 5 || string(rec) != `{"v":2}` {
		t.Fatalf("open: %s %q %d %v", rec, node, over, err)
	}
	if _, _, _, err := v.OpenRecord("pos.j.other", val); !errors.Is(err, ErrNodeSeal) {
		t.Errorf("under another key: %v", err)
	}
	var r SealedRecord
	if err := json.Unmarshal(val, &r); err != nil {
		t.Fatal(err)
	}
	r.Over = 6
	moved, _ := json.Marshal(r)
	if _, _, _, err := v.OpenRecord("pos.j.r", moved); !errors.Is(err, ErrNodeSeal) {
		t.Errorf("over another revision: %v", err)
	}
	r.Over, r.Record = 5, json.RawMessage(`{"v":3}`)
	changed, _ := json.Marshal(r)
	if _, _, _, err := v.OpenRecord("pos.j.r", changed); !errors.Is(err, ErrNodeSeal) {
		t.Errorf("changed: %v", err)
	}
	if _, _, _, err := v.OpenRecord("pos.j.r", []byte(`{"v":2}`)); !errors.Is(err, ErrNodeSeal) {
		t.Errorf("unsealed: %v", err)
	}
}
