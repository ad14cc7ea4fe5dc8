package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"
)

// An agent of a job connects to NATS as the job: user AgentNATSUser(job),
// password AgentNATSPassword(team key). The team key file stays the
// agent's one credential. `sluice job submit` stores only
// AgentPasswordHash of the password in the job record (Job.AgentAuth),
// which agents of every job may read: a hash of 256 random bits tells
// them nothing. The controller answers the NATS server's auth callout for
// such users: it compares the hash with the record's and grants the
// agent's permissions narrowed to that one job (internal/natsperm).

// agentUserPrefix starts every job's agent user; no static user
// (sluice-controller, sluice-cli, sluice-admin) starts with it.
const agentUserPrefix = "sluice-job-"

// agentPasswordLabel separates the NATS password from every other use of
// the team key (the team messages' MACs).
const agentPasswordLabel = "sluice nats agent"

// AgentNATSUser is the NATS user of job's agents.
func AgentNATSUser(job string) string { return agentUserPrefix + job }

// AgentJobOfUser is the job whose agents user is, or an error saying why
// user names none (it is never quoted whole: it came from outside).
func AgentJobOfUser(user string) (string, error) {
	job, ok := strings.CutPrefix(user, agentUserPrefix)
	if !ok {
		return "", fmt.Errorf("not an agent's user (%s<job id>)", agentUserPrefix)
	}
	if err := ValidateJobID(job); err != nil {
		return "", fmt.Errorf("an agent's user names no valid job id: want 1-64 characters of [A-Za-z0-9_-]")
	}
	return job, nil
}

// AgentNATSPassword is the NATS password of an agent of the job whose team
// key is key: HMAC-SHA256(key, "sluice nats agent"), hex.
func AgentNATSPassword(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(agentPasswordLabel))
	return hex.EncodeToString(m.Sum(nil))
}

// AgentPasswordHash is what a job record holds of its agents' password:
// SHA-256, hex. The password is 256 bits from a random key, so a plain
// hash is as hard to invert as the key is to guess.
func AgentPasswordHash(password string) string {
	h := sha256.Sum256([]byte(password))
	return hex.EncodeToString(h[:])
}

// AgentPasswordMatches reports whether password hashes to hash (a job
// record's AgentAuth), in constant time.
func AgentPasswordMatches(password, hash string) bool {
	want, err := hex.DecodeString(hash)
	if err != nil || len(want) != sha256.Size {
		return false
	}
	got := sha256.Sum256([]byte(password))
	return subtle.ConstantTimeCompare(got[:], want) == 1
}
