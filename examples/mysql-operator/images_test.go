package mysqloperator_test

import (
	"io/fs"
	"strings"
	"testing"

	mysqloperator "github.com/rewind-dev/rewind/examples/mysql-operator"
	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
)

// TestManifestsPinTheBuildImages keeps the digests written in deploy/ equal to Build.Image().
func TestManifestsPinTheBuildImages(t *testing.T) {
	for _, b := range operator.Builds {
		found := false
		err := fs.WalkDir(mysqloperator.Deploy, "deploy/"+b.Major(), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := fs.ReadFile(mysqloperator.Deploy, p)
			if err != nil {
				return err
			}
			digest := strings.TrimPrefix(b.Image(), operator.Repository+"@")
			if strings.Contains(string(data), digest) {
				found = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			t.Errorf("no file under deploy/%s pins %s", b.Major(), b.Image())
		}
	}
}
