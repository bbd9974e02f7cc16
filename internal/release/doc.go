// Package release turns a release source (a plain manifest folder, a Helm chart or an OLM
// registry+v1 bundle) into plain Kubernetes manifests, serializes them canonically and computes
// the content digest an OperatorRelease is bound to. It also holds the checks the CLI runs on a
// release's version, git commit and image before anything is sent to the hub.
//
// Everything here is pure: no cluster, no network. The same source always yields the same
// canonical bytes and therefore the same digest.
package release
