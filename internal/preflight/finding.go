package preflight

import (
	"fmt"
	"sort"
)

// Severity of a finding. An error finding stops a release under an enforcing preflight gate.
type Severity string

const (
	// SeverityError: the release breaks existing objects or clients, or cannot be applied.
	SeverityError Severity = "error"
	// SeverityWarning: the release may break existing objects; the object checks tell which.
	SeverityWarning Severity = "warning"
	// SeverityInfo: a change worth knowing that breaks nothing by itself.
	SeverityInfo Severity = "info"
)

// Check identifies what a finding is about. The values are stable: a Rollout's preflight
// override list names them.
type Check string

// The CRD upgrade-safety checks (CompareCRDs).
const (
	CheckStoredVersionRemoved  Check = "StoredVersionRemoved"
	CheckScopeChanged          Check = "ScopeChanged"
	CheckServedVersionRemoved  Check = "ServedVersionRemoved"
	CheckNamesChanged          Check = "NamesChanged"
	CheckVersionAdded          Check = "VersionAdded"
	CheckStorageVersionChanged Check = "StorageVersionChanged"
	CheckConversionChanged     Check = "ConversionChanged"
	CheckRequiredFieldAdded    Check = "RequiredFieldAdded"
	CheckFieldRemoved          Check = "FieldRemoved"
	CheckFieldAdded            Check = "FieldAdded"
	CheckTypeChanged           Check = "TypeChanged"
	CheckDefaultAdded          Check = "DefaultAdded"
	CheckDefaultChanged        Check = "DefaultChanged"
	CheckDefaultRemoved        Check = "DefaultRemoved"
	CheckEnumNarrowed          Check = "EnumNarrowed"
	CheckEnumWidened           Check = "EnumWidened"
	CheckBoundTightened        Check = "BoundTightened"
	CheckBoundLoosened         Check = "BoundLoosened"
	CheckPatternChanged        Check = "PatternChanged"
	CheckFormatChanged         Check = "FormatChanged"
	CheckNullableRemoved       Check = "NullableRemoved"
	CheckPreserveUnknownFields Check = "PreserveUnknownFieldsChanged"
	CheckListTypeChanged       Check = "ListTypeChanged"
	CheckValidationRuleAdded   Check = "ValidationRuleAdded"
	CheckValidationRuleRemoved Check = "ValidationRuleRemoved"
	CheckUnknownChange         Check = "UnknownChange"
)

// The checks of live objects (CheckObjects, RoundTrip).
const (
	// CheckObjectRefused: a live object the new schema refuses.
	CheckObjectRefused Check = "ObjectRefused"
	// CheckFieldLost: a field of a live object that does not survive the round trip.
	CheckFieldLost Check = "FieldLost"
	// CheckFieldChanged: a field whose value the round trip changes (a default, a conversion).
	CheckFieldChanged Check = "FieldChanged"
	// CheckRoundTripRefused: an object refused on the way back (by the old schema).
	CheckRoundTripRefused Check = "RoundTripRefused"
	// CheckConversionNotVerified: a webhook conversion that could not be called.
	CheckConversionNotVerified Check = "ConversionNotVerified"
)

// Finding is one result of a preflight check.
type Finding struct {
	// CRD is the CustomResourceDefinition's name.
	CRD string `json:"crd"`
	// Check says what was found.
	Check Check `json:"check"`
	// Severity of the finding.
	Severity Severity `json:"severity"`
	// Version is the CRD version the finding is about ("" for the whole CRD).
	Version string `json:"version,omitempty"`
	// Path is the field path in the schema or object (".spec.replicas"; "" for none).
	Path string `json:"path,omitempty"`
	// Object is namespace/name of the custom resource ("" for schema findings).
	Object string `json:"object,omitempty"`
	// Message says what changed and what it does, in a sentence.
	Message string `json:"message"`
}

func (f Finding) String() string {
	where := f.CRD
	if f.Version != "" {
		where += " " + f.Version
	}
	if f.Object != "" {
		where += " " + f.Object
	}
	if f.Path != "" {
		where += " " + f.Path
	}
	return fmt.Sprintf("%s %s (%s): %s", f.Severity, f.Check, where, f.Message)
}

// Errors returns the findings of error severity whose check is not in ignore.
func Errors(findings []Finding, ignore ...Check) []Finding {
	skip := map[Check]bool{}
	for _, c := range ignore {
		skip[c] = true
	}
	var out []Finding
	for _, f := range findings {
		if f.Severity == SeverityError && !skip[f.Check] {
			out = append(out, f)
		}
	}
	return out
}

func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.CRD != b.CRD {
			return a.CRD < b.CRD
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		if a.Object != b.Object {
			return a.Object < b.Object
		}
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		return a.Check < b.Check
	})
}
