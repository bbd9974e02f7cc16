package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/rewind-dev/rewind/internal/join"
)

func TestCredentialFile(t *testing.T) {
	dir := t.TempDir()
	f := CredentialFile{Path: filepath.Join(dir, "credential.json")}
	if cred, hub, err := f.Load(); cred != nil || hub != nil || err != nil {
		t.Fatalf("Load of a missing file: %v %v %v, want nothing", cred, hub, err)
	}
	issued := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	hub := &rest.Config{Host: "https://hub.example.com:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}}
	for _, token := range []string{"first", "second"} { // the second replaces the first
		if err := f.Save(hub, &join.Credential{Token: token, IssuedAt: issued, ExpiresAt: issued.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(f.Path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credential file: %v, mode %v", err, fi.Mode())
	}
	cred, got, err := f.Load()
	if err != nil || cred.Token != "second" || !cred.ExpiresAt.Equal(issued.Add(time.Hour)) || got.Host != hub.Host || string(got.CAData) != "ca" {
		t.Fatalf("Load: %+v %+v %v", cred, got, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("files left beside the credential: %v", entries)
	}
	if err := os.WriteFile(f.Path, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Load(); err == nil || !strings.Contains(err.Error(), "is not an agent credential") {
		t.Fatalf("Load of a file that is no credential: %v", err)
	}
}

// CanSave finds, before a bootstrap token is spent, a credential file that could not be saved:
// a folder that does not exist, a hub CA file that cannot be read. It leaves nothing behind.
func TestCredentialFileCanSave(t *testing.T) {
	dir := t.TempDir()
	hub := &rest.Config{Host: "https://hub.example.com:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}}
	if err := (CredentialFile{Path: filepath.Join(dir, "credential.json")}).CanSave(hub); err != nil {
		t.Fatalf("a writable folder: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("files left by the check: %v", entries)
	}
	missing := filepath.Join(dir, "no-such-folder", "credential.json")
	if err := (CredentialFile{Path: missing}).CanSave(hub); err == nil || !strings.Contains(err.Error(), "--credential-file "+missing) {
		t.Fatalf("a folder that does not exist: want an error naming --credential-file, got %v", err)
	}
	noCA := &rest.Config{Host: hub.Host, TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "no-such-ca.crt")}}
	if err := (CredentialFile{Path: filepath.Join(dir, "credential.json")}).CanSave(noCA); err == nil || !strings.Contains(err.Error(), "hub's CA") {
		t.Fatalf("a CA file that cannot be read: want an error naming it, got %v", err)
	}
}
