package wire

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
)

// A job's team key authenticates every message between the agents of a
// reader's team (the trainer agent's team protocol, TeamSubject): `sluice
// job submit` issues one per job and writes it to a file only its user
// reads; each agent of the job gets it out of band (a file or the
// environment), never in the job record, argv or a log.
const (
	// TeamKeyEnv holds a team key itself (hex).
	TeamKeyEnv = "SLUICE_TEAM_KEY"
	// TeamKeyFileEnv names a file holding a team key.
	TeamKeyFileEnv = "SLUICE_TEAM_KEY_FILE"
	// TeamKeyDirEnv names the directory of team key files, one per job
	// (TeamKeyPath); default: the user's config directory, sluice/teamkeys.
	TeamKeyDirEnv = "SLUICE_TEAM_KEY_DIR"
	// TeamKeyBytes is the size of a team key.
	TeamKeyBytes = 32
)

// NewTeamKey is a random team key, as its file holds it (hex, a newline).
func NewTeamKey() []byte {
	k := make([]byte, TeamKeyBytes)
	_, _ = rand.Read(k)
	return append(hex.AppendEncode(nil, k), '\n')
}

// ParseTeamKey reads a team key as NewTeamKey writes it. Its errors never
// quote the data.
func ParseTeamKey(data []byte) ([]byte, error) {
	data = bytes.TrimSpace(data)
	if len(data) != 2*TeamKeyBytes {
		return nil, fmt.Errorf("a team key is %d hex digits, this is %d characters", 2*TeamKeyBytes, len(data))
	}
	k, err := hex.DecodeString(string(data))
	if err != nil {
		return nil, errors.New("a team key is hex digits, this is not")
	}
	return k, nil
}

// TeamKeyPath is where job's team key file is in directory dir.
func TeamKeyPath(dir, job string) string { return filepath.Join(dir, job+".teamkey") }
