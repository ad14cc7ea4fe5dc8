package wire

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
)

// One credential per node. The job's team key stays the submitter's root
// secret; from it come, deterministically:
//
//   - the job's signing key (Ed25519, seed HMAC-SHA256(key, "sluice job
//     signing key")), whose public half the job record holds (Job.NodeKey);
//   - each node's own key (Ed25519, seed HMAC-SHA256(key, "sluice node
//     key", job, node)), and its certificate: the job signing key's
//     signature over ("sluice node certificate", job, node, the node's
//     public key).
//
// A node credential (NodeIdentity, its file NodeCredential) holds the node
// name, the node's seed, its certificate and the job's NATS password. It
// holds neither the team key nor the job signing key, so its holder can
// sign as its own node only: it cannot mint another node's credential.
// The agents sign their team messages, demand signals and reader records
// with it (SealFor); whoever reads them checks the certificate against the
// job record's NodeKey and refuses one whose named node is not the node
// certified (NodeVerifier).
const (
	// NodeCredentialFileEnv names a node credential file.
	NodeCredentialFileEnv = "SLUICE_NODE_CREDENTIAL_FILE"
	// NodeCredentialVersion is the format of a node credential file.
	NodeCredentialVersion = 1
	// MaxNodeName bounds a node's name (a host name and a pid, a pod's name).
	MaxNodeName = 128
	// maxNodeCredential bounds a node credential file.
	maxNodeCredential = 4096
)

// The labels keep each use of a key apart from every other.
const (
	jobSigningLabel = "sluice job signing key"
	nodeSeedLabel   = "sluice node key"
	nodeCertLabel   = "sluice node certificate"
	nodeSealLabel   = "sluice node seal"
)

var nodeNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]*$`)

// ValidateNodeName checks a node's name: 1 to MaxNodeName characters of
// [A-Za-z0-9._-], not starting with a dot. The error never quotes
// the name whole (it may come from outside).
func ValidateNodeName(node string) error {
	if len(node) == 0 || len(node) > MaxNodeName || !nodeNamePattern.MatchString(node) {
		return fmt.Errorf("node name %.32q: want 1-%d characters of [A-Za-z0-9._-], not starting with a dot", node, MaxNodeName)
	}
	return nil
}

// labelled is label and parts, each length-prefixed: no two lists of parts
// give the same bytes.
func labelled(label string, parts ...[]byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(label)))
	b = append(b, label...)
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

func derivedSeed(key []byte, label string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(labelled(label, parts...))
	return m.Sum(nil) // 32 bytes: an Ed25519 seed
}

// JobSigningKey is the signing key of the job whose team key is key.
func JobSigningKey(key []byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(derivedSeed(key, jobSigningLabel))
}

// JobNodeKey is what the record of the job whose team key is key holds
// (Job.NodeKey): the job signing key's public half, hex.
func JobNodeKey(key []byte) string {
	return hex.EncodeToString(JobSigningKey(key).Public().(ed25519.PublicKey))
}

// ParseNodeKey reads a record's NodeKey.
func ParseNodeKey(s string) (ed25519.PublicKey, error) {
	k, err := hex.DecodeString(s)
	if err != nil || len(k) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("node_key: want an Ed25519 public key (%d hex digits)", 2*ed25519.PublicKeySize)
	}
	return k, nil
}

func certMessage(job, node string, pub ed25519.PublicKey) []byte {
	return labelled(nodeCertLabel, []byte(job), []byte(node), pub)
}

// NodeIdentity is a node's credential in memory: what its agent signs with.
type NodeIdentity struct {
	Job, Node string
	priv      ed25519.PrivateKey
	Pub       ed25519.PublicKey
	Cert      []byte
	// NATSPassword is the job's agents' NATS password (AgentNATSPassword):
	// the NATS server admits agents by job, not by node.
	NATSPassword string
}

// DeriveNode is node's credential for job, from the job's team key.
func DeriveNode(key []byte, job, node string) (*NodeIdentity, error) {
	if len(key) != TeamKeyBytes {
		return nil, fmt.Errorf("a team key is %d bytes, this is %d", TeamKeyBytes, len(key))
	}
	if err := ValidateJobID(job); err != nil {
		return nil, err
	}
	if err := ValidateNodeName(node); err != nil {
		return nil, err
	}
	priv := ed25519.NewKeyFromSeed(derivedSeed(key, nodeSeedLabel, []byte(job), []byte(node)))
	pub := priv.Public().(ed25519.PublicKey)
	return &NodeIdentity{Job: job, Node: node, priv: priv, Pub: pub,
		Cert: ed25519.Sign(JobSigningKey(key), certMessage(job, node, pub)), NATSPassword: AgentNATSPassword(key)}, nil
}

// NodeCredential is a node credential file (JSON, written 0600; hex
// fields). Its errors never quote the secrets.
type NodeCredential struct {
	Version      int    `json:"v"`
	Job          string `json:"job"`
	Node         string `json:"node"`
	Seed         string `json:"seed"`
	Cert         string `json:"cert"`
	NATSPassword string `json:"nats_password"`
}

// Encode is id as its file holds it.
func (id *NodeIdentity) Encode() []byte {
	data, _ := json.Marshal(NodeCredential{Version: NodeCredentialVersion, Job: id.Job, Node: id.Node,
		Seed: hex.EncodeToString(id.priv.Seed()), Cert: hex.EncodeToString(id.Cert), NATSPassword: id.NATSPassword})
	return append(data, '\n')
}

// ParseNodeCredential reads a node credential file as Encode writes it.
// It checks its form, not its certificate: that needs the job's record
// (NodeVerifier).
func ParseNodeCredential(data []byte) (*NodeIdentity, error) {
	if len(data) > maxNodeCredential {
		return nil, fmt.Errorf("a node credential of %d bytes: want at most %d", len(data), maxNodeCredential)
	}
	var c NodeCredential
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, errors.New("a node credential is a JSON object of v, job, node, seed, cert and nats_password; this is not")
	}
	if c.Version != NodeCredentialVersion {
		return nil, fmt.Errorf("a node credential of format %d: this sluice reads format %d", c.Version, NodeCredentialVersion)
	}
	if err := ValidateJobID(c.Job); err != nil {
		return nil, fmt.Errorf("node credential: %w", err)
	}
	if err := ValidateNodeName(c.Node); err != nil {
		return nil, fmt.Errorf("node credential: %w", err)
	}
	seed, err := hex.DecodeString(c.Seed)
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("node credential: seed: want %d hex digits", 2*ed25519.SeedSize)
	}
	cert, err := hex.DecodeString(c.Cert)
	if err != nil || len(cert) != ed25519.SignatureSize {
		return nil, fmt.Errorf("node credential: cert: want %d hex digits", 2*ed25519.SignatureSize)
	}
	if p, err := hex.DecodeString(c.NATSPassword); err != nil || len(p) != sha256.Size {
		return nil, fmt.Errorf("node credential: nats_password: want %d hex digits", 2*sha256.Size)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	return &NodeIdentity{Job: c.Job, Node: c.Node, priv: priv, Pub: priv.Public().(ed25519.PublicKey), Cert: cert, NATSPassword: c.NATSPassword}, nil
}

// NodeSeal is a node's signature on a message, with what proves the node's
// key: the node's name, its public key and certificate.
type NodeSeal struct {
	Node string `json:"node"`
	Key  string `json:"key"`  // hex Ed25519 public key
	Cert string `json:"cert"` // hex: the job signing key's signature over (job, node, key)
	Sig  string `json:"sig"`  // hex: the node key's signature over the message
}

// The headers of a sealed NATS message.
const (
	NodeHeaderName = "Sluice-Node"
	NodeHeaderKey  = "Sluice-Node-Key"
	NodeHeaderCert = "Sluice-Node-Cert"
	NodeHeaderSig  = "Sluice-Node-Sig"
)

// What a seal is of: each kind of message is signed under its own label,
// so that no signed message can be taken for one of another kind.
const (
	SealTeam   = "team"   // a team request or reply (teamproto)
	SealDemand = "demand" // a demand signal
	SealRecord = "record" // a reader's record in ReadersBucket (position, done)
)

// sealMessage is what a seal of kind in job signs: parts (the kind's
// fields) and body.
func sealMessage(kind, job string, parts [][]byte, body []byte) []byte {
	b := labelled(nodeSealLabel, []byte(kind), []byte(job))
	b = binary.AppendUvarint(b, uint64(len(parts)))
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

// SealFor signs a message of kind: its fields parts (which the receiver
// knows or reads from the message) and its body.
func (id *NodeIdentity) SealFor(kind string, parts [][]byte, body []byte) NodeSeal {
	return NodeSeal{Node: id.Node, Key: hex.EncodeToString(id.Pub), Cert: hex.EncodeToString(id.Cert),
		Sig: hex.EncodeToString(ed25519.Sign(id.priv, sealMessage(kind, id.Job, parts, body)))}
}

// SetHeader puts s in a NATS message's headers (nats.Header's map).
func (s NodeSeal) SetHeader(h map[string][]string) {
	h[NodeHeaderName] = []string{s.Node}
	h[NodeHeaderKey] = []string{s.Key}
	h[NodeHeaderCert] = []string{s.Cert}
	h[NodeHeaderSig] = []string{s.Sig}
}

// SealOfHeader reads a seal from a NATS message's headers (empty Node:
// none).
func SealOfHeader(h map[string][]string) NodeSeal {
	get := func(k string) string {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return NodeSeal{Node: get(NodeHeaderName), Key: get(NodeHeaderKey), Cert: get(NodeHeaderCert), Sig: get(NodeHeaderSig)}
}

// ErrNodeSeal marks a message refused by its node seal.
var ErrNodeSeal = errors.New("node seal refused")

// NodeVerifier checks the seals of one job's nodes against its record's
// NodeKey. It keeps the certificates it checked (per node), so a seal
// costs one signature check; it is safe for concurrent use.
type NodeVerifier struct {
	job string
	key ed25519.PublicKey
	mu  sync.Mutex
	// certified is each node's key and certificate checked (hex, as sent).
	certified map[string][2]string
}

// maxCertified bounds the certificates a verifier keeps: past it, it
// forgets them all (a flood of certified names costs checks, not memory).
const maxCertified = 4096

// NewNodeVerifier checks the seals of job's nodes against nodeKey (a
// record's NodeKey).
func NewNodeVerifier(job, nodeKey string) (*NodeVerifier, error) {
	k, err := ParseNodeKey(nodeKey)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job, err)
	}
	return &NodeVerifier{job: job, key: k, certified: map[string][2]string{}}, nil
}

// Verify checks that s is a seal of kind over parts and body by a node
// the job's key certified, and returns that node. The error wraps
// ErrNodeSeal and names what failed, never quoting more than a bounded
// piece of the seal.
func (v *NodeVerifier) Verify(s NodeSeal, kind string, parts [][]byte, body []byte) (string, error) {
	switch {
	case s.Node == "" && s.Sig == "":
		return "", fmt.Errorf("%w: not sealed by a node (an agent without its node credential, or of an older sluice?)", ErrNodeSeal)
	case ValidateNodeName(s.Node) != nil:
		return "", fmt.Errorf("%w: %w", ErrNodeSeal, ValidateNodeName(s.Node))
	}
	pub, err := hex.DecodeString(s.Key)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return "", fmt.Errorf("%w: node %s: no valid public key", ErrNodeSeal, s.Node)
	}
	sig, err := hex.DecodeString(s.Sig)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return "", fmt.Errorf("%w: node %s: no valid signature", ErrNodeSeal, s.Node)
	}
	if !v.certifiedNode(s) {
		cert, err := hex.DecodeString(s.Cert)
		if err != nil || len(cert) != ed25519.SignatureSize || !ed25519.Verify(v.key, certMessage(v.job, s.Node, pub), cert) {
			return "", fmt.Errorf("%w: node %s: its key is not certified by job %s's key (a credential of another node, job or submission?)", ErrNodeSeal, s.Node, v.job)
		}
		v.remember(s)
	}
	if !ed25519.Verify(pub, sealMessage(kind, v.job, parts, body), sig) {
		return "", fmt.Errorf("%w: node %s: the signature does not match the message", ErrNodeSeal, s.Node)
	}
	return s.Node, nil
}

func (v *NodeVerifier) certifiedNode(s NodeSeal) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.certified[s.Node]
	return ok && subtle.ConstantTimeCompare([]byte(c[0]), []byte(s.Key)) == 1 && subtle.ConstantTimeCompare([]byte(c[1]), []byte(s.Cert)) == 1
}

func (v *NodeVerifier) remember(s NodeSeal) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.certified) >= maxCertified {
		clear(v.certified)
	}
	v.certified[s.Node] = [2]string{s.Key, s.Cert}
}

// A reader's record in ReadersBucket (its position, its done record),
// written by an agent holding a node credential, is stored sealed: the
// record's own bytes, the revision of the key it was written over (0: a
// create), and the writer's seal over the bucket key, that revision and
// the bytes. The key keeps a record of one reader from passing as
// another's; the revision keeps an earlier record of the key from being
// put back as if new (its reader's agent knows the revision it last
// wrote).
type SealedRecord struct {
	Record json.RawMessage `json:"record"`
	Over   uint64          `json:"over"`
	Seal   NodeSeal        `json:"seal"`
}

func recordParts(key string, over uint64) [][]byte {
	return [][]byte{[]byte(key), binary.AppendUvarint(nil, over)}
}

// SealRecord is record (JSON) as stored under key over revision over,
// sealed by id.
// record must be valid JSON.
func (id *NodeIdentity) SealRecord(key string, over uint64, record []byte) ([]byte, error) {
	var rec bytes.Buffer
	if err := json.Compact(&rec, record); err != nil {
		return nil, fmt.Errorf("sealing the record under %s: %w", key, err)
	}
	data, err := json.Marshal(SealedRecord{Record: rec.Bytes(), Over: over, Seal: id.SealFor(SealRecord, recordParts(key, over), rec.Bytes())})
	if err != nil {
		return nil, fmt.Errorf("sealing the record under %s: %w", key, err)
	}
	return data, nil
}

// OpenRecord checks value, stored under key, as SealRecord writes it, and
// returns the record's bytes, the node that wrote it and the revision it
// was written over.
func (v *NodeVerifier) OpenRecord(key string, value []byte) (record []byte, node string, over uint64, err error) {
	var r SealedRecord
	if err := json.Unmarshal(value, &r); err != nil || r.Record == nil {
		return nil, "", 0, fmt.Errorf("%w: the record under %s is not sealed by a node (written without a node credential?)", ErrNodeSeal, key)
	}
	// Marshal compacts a RawMessage: what was signed is compact (json.Marshal's).
	var rec bytes.Buffer
	if err := json.Compact(&rec, r.Record); err != nil {
		return nil, "", 0, fmt.Errorf("%w: the record under %s: %w", ErrNodeSeal, key, err)
	}
	node, err = v.Verify(r.Seal, SealRecord, recordParts(key, r.Over), rec.Bytes())
	if err != nil {
		return nil, "", 0, fmt.Errorf("the record under %s: %w", key, err)
	}
	return rec.Bytes(), node, r.Over, nil
}

// ReadReaderDone reads a reader's done record (value under key
// ReaderDoneKey) of job: sealed by a node of the job where its record has
// a node key (the node is returned), plain where it has none.
func ReadReaderDone(job Job, key string, value []byte) (ReaderDone, string, error) {
	var d ReaderDone
	node := ""
	if job.NodeKey != "" {
		v, err := NewNodeVerifier(job.Spec.ID, job.NodeKey)
		if err != nil {
			return d, "", err
		}
		if value, node, _, err = v.OpenRecord(key, value); err != nil {
			return d, "", err
		}
	}
	if err := json.Unmarshal(value, &d); err != nil {
		return d, "", fmt.Errorf("decoding %s: %w", key, err)
	}
	return d, node, nil
}
