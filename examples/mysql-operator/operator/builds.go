// Package operator is the sample MySQLCluster operator (group database.example.com) that rewind's
// demo and version-jump tests release, upgrade and roll back. It is a plain controller-runtime
// operator: for each MySQLCluster it owns a StatefulSet, a headless Service, a ConfigMap and a
// Secret, and it reports status.readyReplicas, status.phase, status.observedGeneration and a
// Ready condition.
//
// Three releases exist, each reading and writing MySQLClusters at its own API version:
//
//	1.0.0  v1alpha1 (served and stored)                    plain manifests  deploy/v1
//	2.0.0  v1beta1 (stored; adds spec.backup.schedule)     Helm chart       deploy/v2
//	3.0.0  v1 (stored; spec.version -> spec.mysqlVersion)  OLM bundle       deploy/v3
//
// Release 3.0.0 serves the CRD's conversion webhook (/convert).
package operator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Repository is the image repository of the sample operator. The images are never pulled
// (pods on the testbed run nothing); the testbed's runner maps their digests to the builds.
const Repository = "registry.example.com/mysql-operator"

// Build is one release of the operator.
type Build struct {
	// Version is the release version (SemVer).
	Version string
	// APIVersion is the MySQLCluster version this build reads and writes.
	APIVersion string
	// GitCommit is the commit the build is labelled with.
	GitCommit string
	// ServesConversion says whether the build serves the CRD conversion webhook.
	ServesConversion bool
}

// Builds are the three releases, oldest first.
var Builds = []Build{
	{Version: "1.0.0", APIVersion: "v1alpha1", GitCommit: "26468fd10174e8cb4d22fd3d518676ce1f341c4d"},
	{Version: "2.0.0", APIVersion: "v1beta1", GitCommit: "ef741a4364299fa83ad657f3c33c1c5d47ba9b65"},
	{Version: "3.0.0", APIVersion: "v1", GitCommit: "8a6fbe4ae4e136c57b681d0893c9336be58bf250", ServesConversion: true},
}

// Image is the digest-pinned image of the build.
func (b Build) Image() string {
	sum := sha256.Sum256([]byte("mysql-operator " + b.Version))
	return Repository + "@sha256:" + hex.EncodeToString(sum[:])
}

// Major is the release's major version as "v1", "v2" or "v3".
func (b Build) Major() string { return "v" + strings.SplitN(b.Version, ".", 2)[0] }

// BuildFor returns the build of a version ("1.0.0", "v1", "2", ...).
func BuildFor(version string) (Build, error) {
	v := strings.TrimPrefix(version, "v")
	for _, b := range Builds {
		if b.Version == v || strings.SplitN(b.Version, ".", 2)[0] == v {
			return b, nil
		}
	}
	return Build{}, fmt.Errorf("the sample operator has no release %q (known: 1.0.0, 2.0.0, 3.0.0)", version)
}

// BuildForImage returns the build an image reference runs, if it is one of Builds.
func BuildForImage(image string) (Build, bool) {
	for _, b := range Builds {
		if b.Image() == image {
			return b, true
		}
	}
	return Build{}, false
}
