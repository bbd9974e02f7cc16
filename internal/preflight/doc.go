// Package preflight tells, before a release is rolled out to a cluster, what the release will do
// to the custom resources already there and whether the way back loses anything:
//
//   - CompareCRDs: the upgrade-safety findings of a CRD change (the checks OLM v1's
//     crdupgradesafety makes, over apiextensions.k8s.io/v1 types), every change classified, an
//     unclassified one reported as CheckUnknownChange rather than passed silently.
//   - Schema and CheckObjects: live custom resources checked against the new CRD's structural
//     schema, list types and x-kubernetes-validations, with apiextensions-apiserver's own
//     pruning, defaulting, validation and CEL libraries.
//   - RoundTrip: each live object through the new storage version (conversion, pruning,
//     defaulting, validation) and back to the old one, naming every field that does not survive.
//
// Everything here is pure: the caller reads the CRDs and objects from the cluster and the
// release.
package preflight
