package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// What a release does to one CRD of a cluster.
const (
	ActionCreate    = "Create"
	ActionUpdate    = "Update"
	ActionUnchanged = "Unchanged"
)

// ClusterInput is what the preflight of one cluster is computed from.
type ClusterInput struct {
	// Release holds the release's CRDs by name.
	Release map[string]*apiextensionsv1.CustomResourceDefinition
	// Live holds the cluster's CRDs by name (as read from it: status.storedVersions set), at
	// least those the release ships that exist.
	Live map[string]*apiextensionsv1.CustomResourceDefinition
	// Objects holds the custom resources of each live CRD by CRD name, read at its storage
	// version.
	Objects map[string][]*unstructured.Unstructured
	// Truncated names the CRDs whose objects were cut at a bound (not all were read).
	Truncated map[string]bool
	// Conversion converts between versions (nil: Conversion{}, webhooks not verified).
	Conversion Converter
}

// CRDPlan is what the release does to one CRD and its objects.
type CRDPlan struct {
	// Name of the CRD.
	Name string `json:"name"`
	// Action is Create, Update or Unchanged.
	Action string `json:"action"`
	// From and To are the storage versions before and after ("" where there is no CRD).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Objects and Bytes count the live custom resources (JSON) the snapshot holds.
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
	// Truncated: only the first Objects were read and checked.
	Truncated bool `json:"truncated,omitempty"`
	// Findings of the CRD change, of the objects against the new schema and of the round trip.
	Findings []Finding `json:"findings,omitempty"`
}

// ClusterPlan is the preflight of a release on one cluster.
type ClusterPlan struct {
	CRDs []CRDPlan `json:"crds"`
	// Objects and Bytes count the custom resources of every live CRD of Objects.
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
}

// Findings returns every finding of the plan.
func (p ClusterPlan) Findings() []Finding {
	var out []Finding
	for _, c := range p.CRDs {
		out = append(out, c.Findings...)
	}
	return out
}

// PlanCluster runs the preflight of a release on one cluster: for each CRD the release ships,
// CompareCRDs against the live one, then RoundTrip of its live objects (which includes
// CheckObjects); a CRD the cluster does not have yet is created with nothing to check; an
// unchanged one is not checked. Objects of live CRDs the release does not ship are counted.
func PlanCluster(ctx context.Context, in ClusterInput) (ClusterPlan, error) {
	var plan ClusterPlan
	seen := map[string]bool{}
	for _, name := range sortedKeys(in.Release) {
		seen[name] = true
		newCRD, live := in.Release[name], in.Live[name]
		c := CRDPlan{Name: name, To: storageVersion(newCRD), Truncated: in.Truncated[name]}
		c.Objects, c.Bytes = size(in.Objects[name])
		if live == nil {
			c.Action = ActionCreate
			plan.add(c)
			continue
		}
		c.From = storageVersion(live)
		if reflect.DeepEqual(defaulted(live).Spec, defaulted(newCRD).Spec) {
			c.Action = ActionUnchanged
			plan.add(c)
			continue
		}
		c.Action = ActionUpdate
		c.Findings = CompareCRDs(live, newCRD)
		if len(in.Objects[name]) > 0 && !hasCheck(c.Findings, CheckStoredVersionRemoved) {
			found, err := RoundTrip(ctx, live, newCRD, in.Objects[name], in.Conversion)
			if err != nil {
				return ClusterPlan{}, fmt.Errorf("CRD %s: %w", name, err)
			}
			c.Findings = append(c.Findings, found...)
		}
		if !c.Truncated {
			verified(c.Findings, c.Objects)
		}
		plan.add(c)
	}
	for _, name := range sortedKeys(in.Objects) {
		if !seen[name] {
			n, b := size(in.Objects[name])
			plan.Objects += n
			plan.Bytes += b
		}
	}
	return plan, nil
}

func (p *ClusterPlan) add(c CRDPlan) {
	p.CRDs = append(p.CRDs, c)
	p.Objects += c.Objects
	p.Bytes += c.Bytes
}

// objectChecks are what the object checks find of a CRD's live objects.
var objectChecks = map[Check]bool{
	CheckObjectRefused: true, CheckRoundTripRefused: true, CheckFieldLost: true, CheckConversionNotVerified: true,
}

// verifiedChecks are the schema changes whose harm to existing objects the object checks
// measure: a narrowed enum, a tightened bound, a new required field, a changed type, a changed
// default, a removed field.
var verifiedChecks = map[Check]bool{
	CheckEnumNarrowed: true, CheckBoundTightened: true, CheckRequiredFieldAdded: true, CheckTypeChanged: true,
	CheckDefaultChanged: true, CheckFieldRemoved: true,
}

// verified lowers the error findings of verifiedChecks to warnings when every live object of
// the CRD was read and checked (objects of them) and none was refused, lost a field or went
// unverified: the change breaks no existing object, only new ones that rely on what changed.
// OLM, which cannot see the objects, must block on them; rewind can look.
func verified(fs []Finding, objects int) {
	for _, f := range fs {
		if objectChecks[f.Check] {
			return
		}
	}
	for i := range fs {
		if fs[i].Severity == SeverityError && verifiedChecks[fs[i].Check] {
			fs[i].Severity = SeverityWarning
			fs[i].Message += fmt.Sprintf("; no live object is affected (%d checked against the new schema and round-tripped)", objects)
		}
	}
}

func hasCheck(fs []Finding, c Check) bool {
	for _, f := range fs {
		if f.Check == c {
			return true
		}
	}
	return false
}

// size counts objects and their JSON bytes.
func size(objs []*unstructured.Unstructured) (int, int64) {
	var n int64
	for _, o := range objs {
		b, err := json.Marshal(o.Object)
		if err == nil {
			n += int64(len(b))
		}
	}
	return len(objs), n
}
