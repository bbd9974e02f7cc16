package preflight

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CheckObjects returns the objects (live custom resources of newCRD's group and kind) that the
// release's CRD newCRD refuses, one CheckObjectRefused finding per object and field. Each
// object goes where the API server takes it once the release is applied: read at its own
// version under the new schema (pruning, defaults), converted to the new storage version by
// conv, pruned, defaulted and validated there (OpenAPI, list types, CEL).
//
// A conversion conv cannot make (a webhook it cannot call) is reported once per CRD as
// CheckConversionNotVerified, with the objects validated at their own version instead.
// A nil conv is Conversion{} (None strategy only).
func CheckObjects(ctx context.Context, newCRD *apiextensionsv1.CustomResourceDefinition, objs []*unstructured.Unstructured, conv Converter) ([]Finding, error) {
	a, err := newAnalysis(nil, newCRD, conv)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if _, _, err := a.forward(ctx, o); err != nil {
			return nil, err
		}
	}
	return a.result(), nil
}

// RoundTrip runs each live object (at oldCRD's group and kind) the way forward and back, as the
// API server and a rewind rollback would, and reports what does not survive:
//
//	read at its version under newCRD -> converted to newCRD's storage version -> written there
//	(pruned, defaulted, validated) -> converted back to oldCRD's storage version by newCRD's
//	conversion (a rollback's storage migration) -> written there under newCRD -> read under oldCRD
//	(pruned, defaulted, validated).
//
// Findings: CheckObjectRefused (refused on the way forward, as CheckObjects), CheckRoundTripRefused
// (refused on the way back), CheckFieldLost (a field the object no longer has at the end, with the
// step that dropped it), CheckFieldChanged (a value that differs at the end, or a field that
// appears), CheckConversionNotVerified. Lost and changed fields are aggregated by CRD, path and
// step, with the count of objects and the first few names.
func RoundTrip(ctx context.Context, oldCRD, newCRD *apiextensionsv1.CustomResourceDefinition, objs []*unstructured.Unstructured, conv Converter) ([]Finding, error) {
	if oldCRD == nil {
		return nil, errors.New("RoundTrip needs the cluster's current CRD (oldCRD)")
	}
	a, err := newAnalysis(oldCRD, newCRD, conv)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if err := a.roundTrip(ctx, o); err != nil {
			return nil, err
		}
	}
	return a.result(), nil
}

type analysis struct {
	old, new *apiextensionsv1.CustomResourceDefinition
	conv     Converter
	schemas  map[string]*Schema // "old/v1", "new/v1"
	findings []Finding
	// notVerified counts the objects per conversion (from -> to) a webhook should have made.
	notVerified map[string][]string
	// aggregated lost and changed fields: key -> finding and objects.
	aggregated map[string]*aggregate
	order      []string
}

type aggregate struct {
	f       Finding
	objects []string
}

func newAnalysis(old, new *apiextensionsv1.CustomResourceDefinition, conv Converter) (*analysis, error) {
	if new == nil {
		return nil, errors.New("no CRD given for the release")
	}
	if conv == nil {
		conv = Conversion{}
	}
	a := &analysis{
		new: defaulted(new), conv: conv, schemas: map[string]*Schema{},
		notVerified: map[string][]string{}, aggregated: map[string]*aggregate{},
	}
	if old != nil {
		a.old = defaulted(old)
	}
	if storageVersion(a.new) == "" {
		return nil, fmt.Errorf("CustomResourceDefinition %s of the release has no storage version: set storage: true on one of spec.versions", new.Name)
	}
	return a, nil
}

// schema returns the Schema of version of the old or new CRD (nil when it has no such version).
func (a *analysis) schema(old bool, version string) (*Schema, error) {
	crd, k := a.new, "new/"+version
	if old {
		crd, k = a.old, "old/"+version
	}
	if s, ok := a.schemas[k]; ok {
		return s, nil
	}
	s, err := NewSchema(crd, version)
	var verr *VersionError
	if errors.As(err, &verr) && !verr.NoSchema {
		s, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	a.schemas[k] = s
	return s, nil
}

func objectName(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// step is the state of an object after one step of its trip.
type step struct {
	name   string
	leaves map[string]any
}

// forward takes o where the API server does once the release is applied, recording each step.
// ok is false when the object was refused or could not be converted (reported).
func (a *analysis) forward(ctx context.Context, o *unstructured.Unstructured) (cur map[string]any, steps []step, err error) {
	gv, err := schema.ParseGroupVersion(o.GetAPIVersion())
	if err != nil || gv.Group != a.new.Spec.Group || o.GetKind() != a.new.Spec.Names.Kind {
		return nil, nil, fmt.Errorf("object %s (%s %s) is not a %s of CustomResourceDefinition %s", objectName(o), o.GetAPIVersion(), o.GetKind(), a.new.Spec.Names.Kind, a.new.Name)
	}
	name := objectName(o)
	from, to := gv.Version, storageVersion(a.new)
	cur = deepCopy(o.Object)
	steps = append(steps, step{name: "as read from the cluster", leaves: leaves(cur)})

	read, err := a.schema(false, from)
	if err != nil {
		return nil, nil, err
	}
	if read != nil {
		read.Read(cur)
		steps = append(steps, step{name: fmt.Sprintf("read at %s under the release's CRD (pruned, defaulted)", from), leaves: leaves(cur)})
	}
	converted, err := a.conv.Convert(ctx, a.new, cur, to)
	var werr *WebhookError
	switch {
	case errors.Is(err, ErrConversionNotVerified):
		k := from + " -> " + to
		a.notVerified[k] = append(a.notVerified[k], name)
		if read != nil { // the best that can be checked: the object at its own version
			a.refusals(ctx, read, cur, name, CheckObjectRefused, "")
		}
		return nil, nil, nil
	case errors.As(err, &werr):
		a.add(Finding{CRD: a.new.Name, Check: CheckObjectRefused, Severity: SeverityError, Version: to, Object: name,
			Message: fmt.Sprintf("the conversion from %s to %s fails: %v", from, to, err)})
		return nil, nil, nil
	case err != nil:
		return nil, nil, err
	}
	cur = converted
	if from != to {
		steps = append(steps, step{name: fmt.Sprintf("converted from %s to %s by the release's CRD (%s)", from, to, a.new.Spec.Conversion.Strategy), leaves: leaves(cur)})
	}
	write, err := a.schema(false, to)
	if err != nil {
		return nil, nil, err
	}
	write.Read(cur)
	steps = append(steps, step{name: fmt.Sprintf("written at %s under the release's CRD (pruned, defaulted)", to), leaves: leaves(cur)})
	if a.refusals(ctx, write, cur, name, CheckObjectRefused, "") {
		return nil, nil, nil
	}
	return cur, steps, nil
}

// refusals reports what s refuses in obj; true when it refuses anything.
func (a *analysis) refusals(ctx context.Context, s *Schema, obj map[string]any, name string, check Check, context string) bool {
	errs := s.Validate(ctx, obj)
	for _, e := range errs {
		msg := e.ErrorBody()
		if context != "" {
			msg = context + ": " + msg
		}
		a.add(Finding{CRD: a.new.Name, Check: check, Severity: SeverityError, Version: s.Version, Path: fieldPath(e), Object: name, Message: msg})
	}
	return len(errs) > 0
}

func (a *analysis) roundTrip(ctx context.Context, o *unstructured.Unstructured) error {
	cur, steps, err := a.forward(ctx, o)
	if err != nil || cur == nil {
		return err
	}
	name := objectName(o)
	to, back := storageVersion(a.new), storageVersion(a.old)
	converted, err := a.conv.Convert(ctx, a.new, cur, back)
	var werr *WebhookError
	switch {
	case errors.Is(err, ErrConversionNotVerified):
		k := to + " -> " + back
		a.notVerified[k] = append(a.notVerified[k], name)
		return nil
	case errors.As(err, &werr):
		a.add(Finding{CRD: a.new.Name, Check: CheckRoundTripRefused, Severity: SeverityError, Version: back, Object: name,
			Message: fmt.Sprintf("the conversion back from %s to %s fails: %v; the rollback's storage migration cannot read the object, only the snapshot restores it", to, back, err)})
		return nil
	case err != nil:
		return err
	}
	cur = converted
	if to != back {
		steps = append(steps, step{name: fmt.Sprintf("converted back from %s to %s by the release's CRD (%s)", to, back, a.new.Spec.Conversion.Strategy), leaves: leaves(cur)})
	}
	migrate, err := a.schema(false, back)
	if err != nil {
		return err
	}
	if migrate != nil {
		migrate.Read(cur)
		steps = append(steps, step{name: fmt.Sprintf("rewritten at %s under the release's CRD by the rollback's storage migration (pruned, defaulted)", back), leaves: leaves(cur)})
		if a.refusals(ctx, migrate, cur, name, CheckRoundTripRefused, "the rollback's storage migration is refused") {
			return nil
		}
	}
	final, err := a.schema(true, back)
	if err != nil {
		return err
	}
	if final == nil {
		return &VersionError{CRD: a.old.Name, Version: back}
	}
	final.Read(cur)
	steps = append(steps, step{name: fmt.Sprintf("read at %s under the cluster's current CRD (pruned, defaulted)", back), leaves: leaves(cur)})
	a.refusals(ctx, final, cur, name, CheckRoundTripRefused, "refused at the old version once the rollback is done")
	a.compare(name, back, steps)
	return nil
}

// compare reports every leaf of the object's first step that the last one lost or changed, and
// every leaf the trip added, with the step that did it.
func (a *analysis) compare(name, version string, steps []step) {
	first, last := steps[0].leaves, steps[len(steps)-1].leaves
	for _, p := range sortedKeys(first) {
		v, ok := last[p]
		switch {
		case !ok:
			at := firstStep(steps, func(l map[string]any) bool { _, has := l[p]; return !has })
			a.aggregate(Finding{CRD: a.new.Name, Check: CheckFieldLost, Severity: SeverityWarning, Version: version, Path: p,
				Message: fmt.Sprintf("lost when %s; the live object keeps it only until it is written at the new version, the snapshot holds it and a rollback's restore brings it back", at)}, name)
		case !reflect.DeepEqual(v, first[p]):
			at := firstStep(steps, func(l map[string]any) bool { return !reflect.DeepEqual(l[p], first[p]) })
			a.aggregate(Finding{CRD: a.new.Name, Check: CheckFieldChanged, Severity: SeverityWarning, Version: version, Path: p,
				Message: fmt.Sprintf("value changes (%v -> %v) when %s", first[p], v, at)}, name)
		}
	}
	for _, p := range sortedKeys(last) {
		if _, ok := first[p]; ok {
			continue
		}
		at := firstStep(steps, func(l map[string]any) bool { _, has := l[p]; return has })
		a.aggregate(Finding{CRD: a.new.Name, Check: CheckFieldChanged, Severity: SeverityInfo, Version: version, Path: p,
			Message: fmt.Sprintf("added (%v) when %s", last[p], at)}, name)
	}
}

func firstStep(steps []step, f func(map[string]any) bool) string {
	for _, s := range steps {
		if f(s.leaves) {
			return s.name
		}
	}
	return steps[len(steps)-1].name
}

func (a *analysis) add(f Finding) { a.findings = append(a.findings, f) }

// aggregate counts an object's lost or changed field with the others of the same path and step.
func (a *analysis) aggregate(f Finding, object string) {
	k := strings.Join([]string{string(f.Check), f.Version, f.Path, f.Message}, "\x00")
	g, ok := a.aggregated[k]
	if !ok {
		g = &aggregate{f: f}
		a.aggregated[k] = g
		a.order = append(a.order, k)
	}
	g.objects = append(g.objects, object)
}

// maxNames is how many object names an aggregated finding lists.
const maxNames = 3

func (a *analysis) result() []Finding {
	out := append([]Finding(nil), a.findings...)
	for _, k := range a.order {
		g := a.aggregated[k]
		f := g.f
		f.Object = g.objects[0]
		f.Message = fmt.Sprintf("%s (%s)", f.Message, describeObjects(g.objects))
		out = append(out, f)
	}
	for _, k := range sortedKeys(a.notVerified) {
		objs := a.notVerified[k]
		out = append(out, Finding{CRD: a.new.Name, Check: CheckConversionNotVerified, Severity: SeverityWarning, Object: objs[0],
			Message: fmt.Sprintf("the conversion %s goes through the CRD's webhook, which cannot be called here: not verified, not safe (%s)", k, describeObjects(objs))})
	}
	sortFindings(out)
	return out
}

func describeObjects(objs []string) string {
	names := objs
	if len(names) > maxNames {
		names = names[:maxNames]
	}
	s := fmt.Sprintf("%d object", len(objs))
	if len(objs) != 1 {
		s += "s"
	}
	s += ": " + strings.Join(names, ", ")
	if len(objs) > maxNames {
		s += ", ..."
	}
	return s
}

// leaves flattens an object's content (without apiVersion and metadata) into its leaf values by
// path: ".spec.replicas", ".spec.tags[0]"; an empty map or list is a leaf.
func leaves(obj map[string]any) map[string]any {
	out := map[string]any{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch t := v.(type) {
		case map[string]any:
			if len(t) == 0 {
				out[path] = t
			}
			for k, c := range t {
				walk(childPath(path, k), c)
			}
		case []any:
			if len(t) == 0 {
				out[path] = t
			}
			for i, c := range t {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		default:
			out[path] = v
		}
	}
	for k, v := range obj {
		if k == "apiVersion" || k == "metadata" {
			continue
		}
		walk(childPath("", k), v)
	}
	return out
}
