package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"

	"github.com/rewind-dev/rewind/internal/join"
)

// CredentialFile keeps the agent's hub credential (the hub's server and CA, the token and its
// lifetime) in a file readable only by its owner, written whole or not at all: a restarted
// agent goes on with it and needs no bootstrap token.
type CredentialFile struct{ Path string }

type storedCredential struct {
	Server    string    `json:"server"`
	CAData    []byte    `json:"caData,omitempty"`
	Token     string    `json:"token"`
	IssuedAt  time.Time `json:"issuedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Load returns the stored credential and the hub configuration it goes with (nil, nil: none
// stored yet).
func (f CredentialFile) Load() (*join.Credential, *rest.Config, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("--credential-file %s: %w", f.Path, err)
	}
	var s storedCredential
	if err := json.Unmarshal(b, &s); err != nil || s.Token == "" || s.Server == "" {
		return nil, nil, fmt.Errorf("--credential-file %s is not an agent credential (remove it and join again)", f.Path)
	}
	hub := &rest.Config{Host: s.Server, TLSClientConfig: rest.TLSClientConfig{CAData: s.CAData}}
	return &join.Credential{Token: s.Token, IssuedAt: s.IssuedAt, ExpiresAt: s.ExpiresAt}, hub, nil
}

// Save writes cred for hub (its server and CA), replacing the file atomically.
func (f CredentialFile) Save(hub *rest.Config, cred *join.Credential) error {
	ca, err := hubCA(hub)
	if err != nil {
		return err
	}
	b, err := json.Marshal(storedCredential{Server: hub.Host, CAData: ca, Token: cred.Token, IssuedAt: cred.IssuedAt, ExpiresAt: cred.ExpiresAt})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.Path), ".rewind-agent-credential-*")
	if err != nil {
		return fmt.Errorf("--credential-file %s: %w", f.Path, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing left to remove
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("--credential-file %s: %w", f.Path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), f.Path); err != nil {
		return fmt.Errorf("--credential-file %s: %w", f.Path, err)
	}
	return nil
}

// hubCA is the hub's CA of hub: its data, or its file's.
func hubCA(hub *rest.Config) ([]byte, error) {
	if len(hub.CAData) > 0 || hub.CAFile == "" {
		return hub.CAData, nil
	}
	b, err := os.ReadFile(hub.CAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the hub's CA %s: %w", hub.CAFile, err)
	}
	return b, nil
}

// CanSave says whether a credential for hub can be saved (its CA read, a file written in the
// file's folder), before the bootstrap token is spent: a credential that cannot be stored once
// it is traded would cost the token.
func (f CredentialFile) CanSave(hub *rest.Config) error {
	if _, err := hubCA(hub); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.Path), ".rewind-agent-credential-check-*")
	if err != nil {
		return fmt.Errorf("--credential-file %s cannot be written (%w): the agent keeps the credential it trades its bootstrap token for there; point it at a writable folder that outlives the agent (the chart: agent.persistence)", f.Path, err)
	}
	name := tmp.Name()
	tmp.Close()
	return os.Remove(name)
}
