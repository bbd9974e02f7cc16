//go:build tools

// Package stores pins the servers the snapshot-store tests start: an S3-compatible server
// (versitygw, posix backend), a GCS emulator (fake-gcs-server) and a local AWS KMS (local-kms).
// hack/stores/build.sh builds them.
package stores

import (
	_ "github.com/fsouza/fake-gcs-server"
	_ "github.com/nsmithuk/local-kms"
	_ "github.com/versity/versitygw/cmd/versitygw"
)
